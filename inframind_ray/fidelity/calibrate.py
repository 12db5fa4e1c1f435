"""Make a profile file: calibrate a started engine (the grid, the fit, the optional entry-delay
fit), profile the model a deployment file names (``twin profile``), or refit recorded grid rows
without an engine (``twin refit``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from inframind_ray.errors import ConfigError
from inframind_ray.fidelity.fit import fit
from inframind_ray.fidelity.grid import run_grid
from inframind_ray.fidelity.profile import (
    FittedProfile,
    hardware_name,
    load_profile,
    profile_document,
)
from inframind_ray.fidelity.report import console, print_profile
from inframind_ray.fidelity.specs import GridSpec, ProfileSpec

if TYPE_CHECKING:
    from inframind_ray.config import ModelConfig, PoolConfig
    from inframind_ray.fidelity.real import EngineInfo, PromptMaker
    from inframind_ray.serving.engines.base import Engine


@contextlib.asynccontextmanager
async def started_engine(model: ModelConfig, pool: PoolConfig,
                         label: str) -> AsyncIterator[tuple[Engine, EngineInfo]]:
    """``real.open_engine`` with a "starting engine" status line while it starts."""
    from inframind_ray.fidelity.real import open_engine

    with console.status(f"starting engine {model.name!r} ({label})"):
        ctx = open_engine(model, pool)
        engine, info = await ctx.__aenter__()
    try:
        yield engine, info
    finally:
        await ctx.__aexit__(None, None, None)


async def calibrate_engine(engine: Engine, info: EngineInfo, maker: PromptMaker, path: Path,
                           key: str, measured_model: str, grid: GridSpec | None = None, *,
                           hardware: str | None = None, num_gpus: int = 0,
                           per_batch: bool = False, entry_requests: int = 0,
                           seed: int = 0) -> FittedProfile:
    """Profile a started engine on ``grid`` (default: the default grid), keeping only batch
    sizes up to its slots; fit, then fit the entry delay on ``entry_requests`` Poisson requests
    (``entry.entry_case``; 0 = none); write the profile to ``path``, its raw rows next to it
    as .parquet (the entry case's as .entry.parquet), print the fit. `twin profile` and `twin
    validate --calibrate` both use it."""
    import pandas as pd

    from inframind_ray.fidelity.entry import ENTRY_CASE_RATE, entry_case, fit_entry
    from inframind_ray.fidelity.real_replay import replay_real
    from inframind_ray.fidelity.twin_replay import twin_kv_tokens

    grid = grid or GridSpec()
    grid = dataclasses.replace(
        grid, batches=tuple(b for b in grid.batches if b <= info.max_num_seqs) or (1,))
    with console.status("grid") as st:
        def tick(k: int, n: int, cell: tuple) -> None:
            st.update(f"grid cell {k}/{n}: batch {cell[0]}, prompt {cell[1]}, output {cell[2]}")

        rows = await run_grid(engine, maker.make, grid, tick)
    fp = fit(rows, per_batch=per_batch)
    kv_tokens = twin_kv_tokens(info)
    if entry_requests >= 2 and kv_tokens:
        case = entry_case(entry_requests, seed)
        with console.status(f"entry-delay calibration: {entry_requests} requests at "
                            f"{ENTRY_CASE_RATE:g} req/min"):
            await replay_real(engine, case, maker.make)
        entry = await asyncio.to_thread(fit_entry, case, fp, info, int(kv_tokens))
        fp = dataclasses.replace(fp, entry=entry)
        pd.DataFrame(case.real).to_parquet(path.with_suffix(".entry.parquet"), index=False)
    doc = profile_document(key, fp, model=measured_model,
                           hardware=hardware or hardware_name(), num_gpus=num_gpus,
                           engine=info.as_dict(), grid=grid)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    raw = path.with_suffix(".parquet")
    pd.DataFrame(rows).to_parquet(raw, index=False)
    print_profile(key, fp)
    console.print(f"wrote {path} and {raw} ({len(rows)} requests)")
    return fp


def profile_model(s: ProfileSpec) -> None:
    """``twin profile``: start the engine of ``s.model`` in the deployment file ``s.config`` with
    max_num_seqs = the grid's largest batch size, calibrate it, and write the profile."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, model_with, pin_driver

    pool, m = load_model(str(s.config), s.model)
    m = model_with(m, max_num_seqs=max(s.grid.batches))
    out = s.out or Path(f"runs/fidelity/profile-{s.model}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    maker = PromptMaker(m)
    if s.pin and (cores := pin_driver(m)):
        console.print(f"driver pinned to cores {sorted(cores)}")
    host = "cpu" if m.engine.kind == "vllm" and not s.num_gpus else "gpu"
    key = s.key or f"{s.model}@{host}-{m.engine.kind}"

    async def go() -> None:
        async with started_engine(m, pool, m.engine.kind) as (engine, info):
            console.print(f"engine up: {info.as_dict()}")
            await calibrate_engine(engine, info, maker, out, key,
                                   getattr(m.engine, "model", s.model), s.grid,
                                   hardware=s.hardware, num_gpus=s.num_gpus,
                                   per_batch=s.per_batch, entry_requests=s.entry_requests)

    asyncio.run(go())


RAW_COLUMNS = {"status", "batch", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s"}
"""The columns of `twin profile` raw rows that a refit needs."""


def refit_profile(raw: Path, profile: Path, out: Path, per_batch: bool = False) -> None:
    """``twin refit``: refit the profile ``profile`` from its recorded grid rows ``raw``, keeping
    its labels, grid and entry delay, and write it to ``out``."""
    import pandas as pd

    key, entry, old = load_profile(profile)
    try:
        rows = pd.read_parquet(raw).to_dict("records")
    except (OSError, ValueError) as e:
        raise ConfigError("raw", f"{raw}: not a Parquet file of `twin profile` rows ({e})"
                          ) from None
    if not rows or not set(rows[0]) >= RAW_COLUMNS:
        raise ConfigError("raw", f"{raw}: expected `twin profile` rows with "
                          f"{sorted(RAW_COLUMNS)}")
    fp = dataclasses.replace(fit(rows, per_batch=per_batch), entry=old.entry)
    grid = GridSpec.from_dict(entry.get("fit", {}).get("grid", {}))
    doc = profile_document(key, fp, model=entry.get("measured_model", key),
                           hardware=entry.get("hardware", "?"),
                           num_gpus=int(entry.get("num_gpus", 0)),
                           engine=entry.get("engine", {}), grid=grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print_profile(key, fp)
    console.print(f"wrote {out} (refit of {len(rows)} recorded requests)")
