"""``inframind twin profile`` and ``inframind twin validate`` (vLLM is imported only when an
engine starts, so ``inframind --help`` stays fast)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from inframind_ray.errors import ConfigError

if TYPE_CHECKING:
    from inframind_ray.fidelity.profile import FittedProfile, GridSpec

twin_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Calibrate the twin on a real engine and measure its fidelity.")
console = Console(width=None if sys.stdout.isatty() else 160)

ConfigOpt = Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")]
ModelOpt = Annotated[str, typer.Option("--model", help="model name in the deployment file")]


def _ints(text: str, field: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ConfigError(field, f"expected integers >= 1, got {text!r}")
    return vals


def _range(text: str, field: str) -> tuple[int, int]:
    vals = _ints(text, field)
    if len(vals) != 2 or vals[0] > vals[1]:
        raise ConfigError(field, f"expected LO,HI with LO <= HI, got {text!r}")
    return vals[0], vals[1]


def _floats(text: str, field: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals or min(vals) <= 0:
        raise ConfigError(field, f"expected numbers > 0, got {text!r}")
    return vals


@twin_app.command()
def profile(
    config: ConfigOpt,
    model: ModelOpt,
    out: Annotated[Path | None, typer.Option(
        help="profile JSON (default runs/fidelity/profile-MODEL.json); raw rows go next to it "
             "as .parquet")] = None,
    batches: Annotated[str, typer.Option(help="batch sizes (requests sent at once)")] = "1,2,4,8",
    prompts: Annotated[str, typer.Option(help="prompt lengths, tokens")] = "16,128,512",
    outputs: Annotated[str, typer.Option(help="output lengths, tokens")] = "16,64,256",
    repeats: Annotated[int, typer.Option(help="repetitions of the grid")] = 2,
    prompt_jitter: Annotated[float, typer.Option(
        help="draw each prompt length within +-this fraction of its cell's length, so every "
             "prefill has a new token count as in real traffic (0 = exact lengths)")] = 0.25,
    key: Annotated[str | None, typer.Option(
        help="profile key in the file (default MODEL@HOST-ENGINE)")] = None,
    hardware: Annotated[str | None, typer.Option(
        help="hardware label (default: this machine's CPU model)")] = None,
    num_gpus: Annotated[int, typer.Option(help="GPUs per replica (label only)")] = 0,
    pin: Annotated[bool, typer.Option(
        help="keep this process off the vLLM CPU worker's cores (VLLM_CPU_OMP_THREADS_BIND)"
    )] = True,
    entry_requests: Annotated[int, typer.Option(
        help="requests of the Poisson case that fits the entry delay (busy / idle engine); "
             "0 = none")] = 0,
    per_batch: Annotated[bool, typer.Option(
        help="also fit a decode factor per measured batch size (for engines whose step time "
             "is not linear in the batch; docs/fidelity.md)")] = False,
) -> None:
    """Drive the served model through a grid of batch sizes and prompt/output lengths, record
    per-request TTFT, TPOT and E2E plus the engine's own metrics, and fit the twin's iteration
    profile (c0, c_prefill, c_decode, c_kv and a per-request front-end delay).

    The engine is the one the deployment file names, started in this process with
    max_num_seqs = the largest batch size.
    """
    from inframind_ray.fidelity import profile as P
    from inframind_ray.fidelity.real import (
        PromptMaker,
        load_model,
        model_with,
        open_engine,
        pin_driver,
    )

    grid = P.GridSpec(_ints(batches, "batches"), _ints(prompts, "prompts"),
                      _ints(outputs, "outputs"), repeats, prompt_jitter)
    if repeats < 1:
        raise ConfigError("repeats", "must be >= 1")
    if not 0 <= prompt_jitter < 1:
        raise ConfigError("prompt-jitter", "must be in [0, 1)")
    pool, m = load_model(str(config), model)
    m = model_with(m, max_num_seqs=max(grid.batches))
    out = out or Path(f"runs/fidelity/profile-{model}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    maker = PromptMaker(m)
    if pin and (cores := pin_driver(m)):
        console.print(f"driver pinned to cores {sorted(cores)}")
    key = key or f"{model}@{'cpu' if m.engine.kind == 'vllm' and not num_gpus else 'gpu'}" \
                 f"-{m.engine.kind}"

    async def go() -> None:
        with console.status(f"starting engine {m.name!r} ({m.engine.kind})"):
            ctx = open_engine(m, pool)
            engine, info = await ctx.__aenter__()
        try:
            console.print(f"engine up: {info.as_dict()}")
            await calibrate_engine(engine, info, maker, out, key,
                                   getattr(m.engine, "model", model), grid, hardware=hardware,
                                   num_gpus=num_gpus, per_batch=per_batch,
                                   entry_requests=entry_requests)
        finally:
            await ctx.__aexit__(None, None, None)

    asyncio.run(go())


@twin_app.command()
def refit(
    raw: Annotated[Path, typer.Argument(help="raw rows (.parquet) written by `twin profile`")],
    profile: Annotated[Path, typer.Option(
        "--profile", help="the profile JSON those rows were fitted into (labels, grid)")],
    out: Annotated[Path, typer.Option(help="new profile JSON")],
    per_batch: Annotated[bool, typer.Option(
        help="also fit a decode factor per measured batch size")] = False,
) -> None:
    """Refit a profile from recorded `twin profile` measurements, without an engine (e.g. with
    or without per-batch decode factors). The source profile's entry delay is carried over."""
    import pandas as pd

    from inframind_ray.fidelity import profile as P

    key, entry, old = P.load_profile(profile)
    try:
        rows = pd.read_parquet(raw).to_dict("records")
    except (OSError, ValueError) as e:
        raise ConfigError("raw", f"{raw}: not a Parquet file of `twin profile` rows ({e})"
                          ) from None
    need = {"status", "batch", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s"}
    if not rows or not need <= set(rows[0]):
        raise ConfigError("raw", f"{raw}: expected `twin profile` rows with {sorted(need)}")
    fp = P.fit(rows, per_batch=per_batch)
    fp = dataclasses.replace(fp, entry=old.entry)
    grid = P.GridSpec.from_dict(entry.get("fit", {}).get("grid", {}))
    doc = P.profile_document(key, fp, model=entry.get("measured_model", key),
                             hardware=entry.get("hardware", "?"),
                             num_gpus=int(entry.get("num_gpus", 0)),
                             engine=entry.get("engine", {}), grid=grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _print_profile(key, fp)
    console.print(f"wrote {out} (refit of {len(rows)} recorded requests)")


def _print_profile(key: str, fp: FittedProfile) -> None:
    """The fitted coefficients, in-sample errors and decode factors as a table."""
    t = Table(title=f"fitted profile {key}")
    for col in ("c0 (ms)", "c_prefill (µs/tok)", "c_decode (µs/seq)", "c_kv (ns/tok)",
                "front-end d (ms)", "TTFT err med/p90", "TPOT err med/p90", "E2E err med/p90"):
        t.add_column(col, justify="right")
    f = fp.fit
    t.add_row(f"{fp.profile.c0 * 1e3:.3f}", f"{fp.profile.c_prefill * 1e6:.2f}",
              f"{fp.profile.c_decode * 1e6:.1f}", f"{fp.profile.c_kv * 1e9:.2f}",
              f"{fp.request_overhead_s * 1e3:.3f}",
              f"{f['ttft_median_rel_err']:.1%} / {f['ttft_p90_rel_err']:.1%}",
              f"{f['tpot_median_rel_err']:.1%} / {f['tpot_p90_rel_err']:.1%}",
              f"{f['e2e_median_rel_err']:.1%} / {f['e2e_p90_rel_err']:.1%}")
    console.print(t)
    e = fp.entry
    if not e.trivial:
        ms = [f"{x * 1e3:g}" for x in e.idle_edges_s]
        bins = ([f"< {ms[0]} ms"] + [f"{a}-{b} ms" for a, b in zip(ms[:-1], ms[1:], strict=True)]
                + [f">= {ms[-1]} ms"]) if ms else ["any"]
        console.print(f"entry delay: busy engine d - {e.busy_cut_s * 1e3:.2f} ms; idle engine "
                      + ", ".join(f"{b}: d {w * 1e3:+.2f} ms"
                                  for b, w in zip(bins, e.idle_wake_s, strict=True)))
    if fp.profile.decode_factors:
        console.print("decode factors per batch size: " + ", ".join(
            f"{b}: {x:.3f}" for b, x in fp.profile.decode_factors))


@twin_app.command()
def validate(
    config: ConfigOpt,
    model: ModelOpt,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="profile JSON from `twin profile` (or --calibrate)")] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/fidelity/validate"),
    rates: Annotated[str, typer.Option(help="Poisson rates, req/min (light to saturated)")] = (
        "60,180,300"),
    requests: Annotated[int, typer.Option(help="requests per case")] = 40,
    trace_rate: Annotated[float, typer.Option(
        help="rate of the trace:azure_conv replay case, req/min (0 = skip)")] = 180.0,
    edf_rate: Annotated[float, typer.Option(
        help="rate of the mixed-deadline EDF case, req/min (0 = skip)")] = 300.0,
    kv_rate: Annotated[float, typer.Option(
        help="rate of the KV-pressure case, req/min (0 = skip; vllm engines only)")] = 360.0,
    kv_cache_bytes: Annotated[int, typer.Option(
        help="KV cache of the KV-pressure engine, bytes")] = 2 * 2**20,
    kv_max_num_seqs: Annotated[int, typer.Option(
        help="sequence slots of the KV-pressure engine")] = 8,
    kv_block_size: Annotated[int, typer.Option(
        help="KV block size of the KV-pressure engine (tokens)")] = 32,
    profile_key: Annotated[str | None, typer.Option(
        help="profile key when the file holds several")] = None,
    seed: Annotated[int, typer.Option(help="seed of arrivals, lengths and deadlines")] = 0,
    pin: Annotated[bool, typer.Option(
        help="keep this process off the vLLM CPU worker's cores (VLLM_CPU_OMP_THREADS_BIND)"
    )] = True,
    anchor: Annotated[bool, typer.Option(
        help="re-anchor the profile's speed per case with lone probe requests run just before "
             "and after it (the fixed profile's errors are reported beside)")] = False,
    calibrate: Annotated[bool, typer.Option(
        help="instead of --profile, profile each engine (the default grid, batches up to its "
             "slots) right before its cases, on the same engine; the fits go to "
             "OUT/profile-ENGINE.json")] = False,
    prompts: Annotated[str, typer.Option(
        help="prompt lengths of the cases, LO,HI tokens (log-uniform)")] = "32,512",
    outputs: Annotated[str, typer.Option(
        help="output lengths of the cases, LO,HI tokens (uniform)")] = "16,192",
    kv_prompts: Annotated[str, typer.Option(
        help="prompt lengths of the KV-pressure case, LO,HI tokens")] = "128,384",
    kv_outputs: Annotated[str, typer.Option(
        help="output lengths of the KV-pressure case, LO,HI tokens")] = "96,256",
    grid_prompts: Annotated[str, typer.Option(
        help="prompt lengths of the --calibrate grid, tokens")] = "16,128,512",
    entry_requests: Annotated[int, typer.Option(
        help="with --calibrate: requests of the Poisson case that fits the entry delay "
             "(busy / idle engine); 0 = none")] = 0,
) -> None:
    """Replay the same arrivals (Poisson per rate, a bursty trace, mixed deadlines, a small KV
    cache) against the real engine and the twin with the fitted profile; report per-request TTFT
    and E2E error, queue depth, completion order and throughput.

    Writes OUT/validate.json (one row per case), OUT/requests.parquet, OUT/samples.parquet,
    OUT/latency_cdf.png and OUT/queue_depth.png, and prints a table.
    """
    from inframind_ray.fidelity import profile as P

    if calibrate == (profile is not None):
        raise ConfigError("profile", "give either --profile FILE or --calibrate")
    key, entry, fp = (f"{model}@calibrated", {}, None) if profile is None else \
        P.load_profile(profile, profile_key)  # malformed profile: fail before any engine
    rate_vals = _floats(rates, "rates")
    if requests < 2:
        raise ConfigError("requests", "must be >= 2")
    from inframind_ray.fidelity import validate as V
    from inframind_ray.fidelity.real import (
        PromptMaker,
        load_model,
        model_with,
        open_engine,
        pin_driver,
    )

    pool, m = load_model(str(config), model)
    kv_rate = kv_rate if m.engine.kind == "vllm" else 0.0
    cases = V.make_cases(rate_vals, requests, seed, trace_rate=trace_rate or None,
                         edf_rate=edf_rate or None, kv_rate=kv_rate or None,
                         prompt=_range(prompts, "prompts"), output=_range(outputs, "outputs"),
                         kv_prompt=_range(kv_prompts, "kv-prompts"),
                         kv_output=_range(kv_outputs, "kv-outputs"))
    grid = P.GridSpec(prompts=_ints(grid_prompts, "grid-prompts"))
    out.mkdir(parents=True, exist_ok=True)
    maker = PromptMaker(m, seed)
    if pin and (cores := pin_driver(m)):
        console.print(f"driver pinned to cores {sorted(cores)}")
    infos = {}
    fps = {}

    async def run_on(mcfg, label: str, group: list) -> None:
        with console.status(f"starting engine {mcfg.name!r} ({label})"):
            ctx = open_engine(mcfg, pool)
            engine, info = await ctx.__aenter__()
        infos[label] = info
        console.print(f"engine {label}: {info.as_dict()}")
        try:
            fps[label] = await calibrate_engine(
                engine, info, maker, out / f"profile-{label}.json", key,
                getattr(mcfg.engine, "model", model), grid, entry_requests=entry_requests,
                seed=seed) if calibrate else fp
            probe: list[dict] = []
            if anchor:
                with console.status("speed probe"):
                    await V.probe_real(engine, maker.make, f"{label}-warm")  # warm-up, dropped
                    probe = await V.probe_real(engine, maker.make, f"{label}-0")
            for k, c in enumerate(group):
                dur = float(c.arrivals[-1])
                with console.status(f"{c.name}: {len(c.arrivals)} requests over {dur:.0f} s"):
                    await V.replay_real(engine, c, maker.make)
                    if anchor:
                        c.probe_before = probe
                        probe = c.probe_after = await V.probe_real(engine, maker.make,
                                                                   f"{label}-{k + 1}")
                console.print(f"  real {c.name}: done")
        finally:
            await ctx.__aexit__(None, None, None)

    async def go():
        main = [c for c in cases if c.engine == "main"]
        kv = [c for c in cases if c.engine == "kv"]
        await run_on(m, "main", main)
        if kv:
            mk = model_with(m, max_num_seqs=kv_max_num_seqs, kv_cache_memory_bytes=kv_cache_bytes,
                            engine_kwargs={"block_size": kv_block_size})
            await run_on(mk, "kv", kv)

    asyncio.run(go())
    rows = []
    for c in cases:
        info = infos[c.engine]
        kv_tokens = V.twin_kv_tokens(info) or entry.get("engine", {}).get("kv_capacity_tokens")
        if not kv_tokens:
            raise ConfigError("kv_capacity_tokens", f"unknown for {m.name!r}; set it in the "
                              "deployment file")
        cfp = fps[c.engine]
        if anchor:
            V.replay_twin(c, cfp, info, int(kv_tokens))  # c.speed is 1 here: the fixed profile
            c.twin_fixed = c.twin
            V.anchor_case(c, cfp)
        rows.append(_score(c, cfp, info, int(kv_tokens)))
    _write(out, cases, rows, key, infos)


def _score(case, fp: FittedProfile, info, kv_tokens: int) -> dict:
    """Replay one case's real side on the twin and compare: its validate.json row."""
    from inframind_ray.fidelity import validate as V

    V.replay_twin(case, fp, info, kv_tokens)
    return {**V.compare(case), "twin_kv_capacity_tokens": kv_tokens}


async def calibrate_engine(engine, info, maker, path: Path, key: str, measured_model: str,
                           grid: GridSpec | None = None, *, hardware: str | None = None,
                           num_gpus: int = 0, per_batch: bool = False, entry_requests: int = 0,
                           seed: int = 0) -> FittedProfile:
    """Profile a started engine on ``grid`` (default: the default grid), keeping only batch
    sizes up to its slots; fit, then fit the entry delay on ``entry_requests`` Poisson requests
    (``validate.entry_case``; 0 = none); write the profile to ``path``, its raw rows next to it
    as .parquet (the entry case's as .entry.parquet), print the fit. `twin profile` and `twin
    validate --calibrate` both use it."""

    import pandas as pd

    from inframind_ray.fidelity import profile as P
    from inframind_ray.fidelity import validate as V

    grid = grid or P.GridSpec()
    grid = dataclasses.replace(
        grid, batches=tuple(b for b in grid.batches if b <= info.max_num_seqs) or (1,))
    with console.status("grid") as st:
        def tick(k: int, n: int, cell: tuple) -> None:
            st.update(f"grid cell {k}/{n}: batch {cell[0]}, prompt {cell[1]}, output {cell[2]}")

        rows = await P.run_grid(engine, maker.make, grid, tick)
    fp = P.fit(rows, per_batch=per_batch)
    kv_tokens = V.twin_kv_tokens(info)
    if entry_requests >= 2 and kv_tokens:
        case = V.entry_case(entry_requests, seed)
        with console.status(f"entry-delay calibration: {entry_requests} requests at "
                            f"{V.ENTRY_CASE_RATE:g} req/min"):
            await V.replay_real(engine, case, maker.make)
        entry = await asyncio.to_thread(V.fit_entry, case, fp, info, int(kv_tokens))
        fp = dataclasses.replace(fp, entry=entry)
        pd.DataFrame(case.real).to_parquet(path.with_suffix(".entry.parquet"), index=False)
    doc = P.profile_document(key, fp, model=measured_model,
                             hardware=hardware or P.hardware_name(), num_gpus=num_gpus,
                             engine=info.as_dict(), grid=grid)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    raw = path.with_suffix(".parquet")
    pd.DataFrame(rows).to_parquet(raw, index=False)
    _print_profile(key, fp)
    console.print(f"wrote {path} and {raw} ({len(rows)} requests)")
    return fp


@twin_app.command()
def rescore(
    run: Annotated[Path, typer.Argument(help="folder of a recorded `twin validate` run")],
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="profile JSON to score (default: the run's own --calibrate "
                          "profiles, RUN/profile-ENGINE.json)")] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/fidelity/rescore"),
    profile_key: Annotated[str | None, typer.Option(
        help="profile key if the file holds several")] = None,
    entry: Annotated[bool, typer.Option(
        help="use the profile's fitted entry delay (--no-entry: plain front-end delay d)"
    )] = True,
) -> None:
    """Replay the real side of a recorded `twin validate` run on the twin with another profile,
    without an engine: the same arrivals, token counts and deadlines, the same table and files
    as `validate` (no speed anchoring)."""
    from inframind_ray.fidelity import validate as V
    from inframind_ray.fidelity.profile import EntryDelay, load_profile

    cases, infos = V.load_recorded(run)
    if profile is not None:
        key, _, fp = load_profile(profile, profile_key)
        fps = dict.fromkeys(infos, fp)
    else:
        fps = {k: load_profile(run / f"profile-{k}.json", profile_key)[2] for k in infos}
        key = f"{run.name} (in-run profiles)"
    if not entry:
        fps = {k: dataclasses.replace(f, entry=EntryDelay()) for k, f in fps.items()}
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for c in cases:
        kv_tokens = V.twin_kv_tokens(infos[c.engine])
        if not kv_tokens:
            raise ConfigError("replay", f"{run}: engine {c.engine!r} has no KV capacity")
        rows.append(_score(c, fps[c.engine], infos[c.engine], int(kv_tokens)))
    _write(out, cases, rows, key, infos)


def _write(out: Path, cases: list, rows: list[dict], key: str, infos: dict) -> None:
    import pandas as pd

    from inframind_ray.fidelity import validate as V

    (out / "validate.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "meta.json").write_text(json.dumps(
        {"profile_key": key, "engines": {k: v.as_dict() for k, v in infos.items()}}, indent=1))
    reqs, samples = [], []
    for c in cases:
        for side, rs in (("real", c.real), ("twin", c.twin), ("twin_fixed", c.twin_fixed)):
            reqs += [{"case": c.name, "side": side, **r} for r in rs]
        for side, ss in (("real", c.real_samples), ("twin", c.twin_samples)):
            samples += [{"case": c.name, "side": side, **s} for s in ss]
    pd.DataFrame(reqs).to_parquet(out / "requests.parquet", index=False)
    pd.DataFrame(samples).to_parquet(out / "samples.parquet", index=False)
    V.plot(cases, str(out / "latency_cdf.png"), str(out / "queue_depth.png"))
    t = Table(title="twin vs real engine (relative error |twin - real| / real, per request)")
    cols = ("case", "rate/min", "TTFT med", "TTFT p90", "E2E med", "E2E p90", "thr real",
            "thr twin", "depth real/twin", "order tau", "preempt real/twin", "speed",
            "fixed TTFT/E2E med")
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["case"], f"{r['rate_per_min']:g}", f"{r['ttft_median_rel_err']:.1%}",
                  f"{r['ttft_p90_rel_err']:.1%}", f"{r['e2e_median_rel_err']:.1%}",
                  f"{r['e2e_p90_rel_err']:.1%}", f"{r['throughput_real']:.1f}",
                  f"{r['throughput_twin']:.1f}",
                  f"{r['queue_depth_mean_real']:.2f}/{r['queue_depth_mean_twin']:.2f}",
                  f"{r['finish_order_kendall_tau']:.2f}",
                  f"{r['preemptions_real']}/{r['preemptions_twin']}", f"{r['speed_scale']:.3f}",
                  f"{r['fixed_ttft_median_rel_err']:.1%}/{r['fixed_e2e_median_rel_err']:.1%}"
                  if "fixed_ttft_median_rel_err" in r else "-")
    console.print(t)
    console.print(f"wrote {out}/validate.json, requests.parquet, samples.parquet, "
                  "latency_cdf.png, queue_depth.png")
