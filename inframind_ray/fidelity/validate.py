"""One `twin validate` run: replay the same cases on the real engine (wall clock) and on the twin
with a fitted profile (simulated clock), score them request by request, and write the run.

The main engine runs every case but the KV-pressure one, which gets a second engine with a small
KV cache and more sequence slots. With ``calibrate`` each engine is profiled right before its
cases (``calibrate.calibrate_engine``); with ``anchor`` its speed is probed around every case
(``fidelity.anchor``). The cases are in ``fidelity.cases``, the twin replay in
``fidelity.twin_replay``, the scoring in ``fidelity.compare``.
"""

from __future__ import annotations

import asyncio

from inframind_ray.errors import ConfigError
from inframind_ray.fidelity.anchor import anchor_case
from inframind_ray.fidelity.calibrate import calibrate_engine, started_engine
from inframind_ray.fidelity.cases import Case, make_cases
from inframind_ray.fidelity.compare import score_case
from inframind_ray.fidelity.profile import FittedProfile, load_profile
from inframind_ray.fidelity.real import EngineInfo
from inframind_ray.fidelity.report import console, write_run
from inframind_ray.fidelity.specs import GridSpec, ValidateSpec
from inframind_ray.fidelity.twin_replay import replay_twin, twin_kv_tokens


def run_validation(s: ValidateSpec) -> None:
    """Run ``s``: fail on bad options and a malformed profile before any engine starts."""
    if s.calibrate == (s.profile is not None):
        raise ConfigError("profile", "give either --profile FILE or --calibrate")
    key, entry, fp = (f"{s.model}@calibrated", {}, None) if s.profile is None else \
        load_profile(s.profile, s.profile_key)
    if s.requests < 2:
        raise ConfigError("requests", "must be >= 2")
    from inframind_ray.fidelity.real import PromptMaker, load_model, model_with, pin_driver

    pool, m = load_model(str(s.config), s.model)
    kv_rate = s.kv_rate if m.engine.kind == "vllm" else 0.0
    cases = make_cases(s.rates, s.requests, s.seed, trace_rate=s.trace_rate or None,
                       edf_rate=s.edf_rate or None, kv_rate=kv_rate or None,
                       prompt=s.prompts, output=s.outputs, kv_prompt=s.kv_prompts,
                       kv_output=s.kv_outputs)
    grid = GridSpec(prompts=s.grid_prompts)
    s.out.mkdir(parents=True, exist_ok=True)
    maker = PromptMaker(m, s.seed)
    if s.pin and (cores := pin_driver(m)):
        console.print(f"driver pinned to cores {sorted(cores)}")
    infos: dict[str, EngineInfo] = {}
    fps: dict[str, FittedProfile | None] = {}

    async def run_on(mcfg, label: str, group: list[Case]) -> None:  # noqa: ANN001
        from inframind_ray.fidelity.real_replay import probe_real, replay_real

        async with started_engine(mcfg, pool, label) as (engine, info):
            infos[label] = info
            console.print(f"engine {label}: {info.as_dict()}")
            fps[label] = await calibrate_engine(
                engine, info, maker, s.out / f"profile-{label}.json", key,
                getattr(mcfg.engine, "model", s.model), grid, entry_requests=s.entry_requests,
                seed=s.seed) if s.calibrate else fp
            probe: list[dict] = []
            if s.anchor:
                with console.status("speed probe"):
                    await probe_real(engine, maker.make, f"{label}-warm")  # warm-up, dropped
                    probe = await probe_real(engine, maker.make, f"{label}-0")
            for k, c in enumerate(group):
                dur = float(c.arrivals[-1])
                with console.status(f"{c.name}: {len(c.arrivals)} requests over {dur:.0f} s"):
                    await replay_real(engine, c, maker.make)
                    if s.anchor:
                        c.probe_before = probe
                        probe = c.probe_after = await probe_real(engine, maker.make,
                                                                 f"{label}-{k + 1}")
                console.print(f"  real {c.name}: done")

    async def go() -> None:
        await run_on(m, "main", [c for c in cases if c.engine == "main"])
        kv = [c for c in cases if c.engine == "kv"]
        if kv:
            mk = model_with(m, max_num_seqs=s.kv_max_num_seqs,
                            kv_cache_memory_bytes=s.kv_cache_bytes,
                            engine_kwargs={"block_size": s.kv_block_size})
            await run_on(mk, "kv", kv)

    asyncio.run(go())
    rows = []
    for c in cases:
        info = infos[c.engine]
        kv_tokens = twin_kv_tokens(info) or entry.get("engine", {}).get("kv_capacity_tokens")
        if not kv_tokens:
            raise ConfigError("kv_capacity_tokens", f"unknown for {m.name!r}; set it in the "
                              "deployment file")
        cfp = fps[c.engine]
        if s.anchor:
            replay_twin(c, cfp, info, int(kv_tokens))  # c.speed is 1 here: the fixed profile
            c.twin_fixed = c.twin
            anchor_case(c, cfp)
        rows.append(score_case(c, cfp, info, int(kv_tokens)))
    write_run(s.out, cases, rows, key, infos)
