"""More TRAIN-split traces for the execution controller, without the validation half that
`inframind controller fit` records beside them (docs/controller.md, "More low-load training
traces"). The same `record` cells as `controller fit` (bench/controller_fit.py ``collect``):
the constrained pool, the mixed workload, the four multi-agent policies; writes
OUT/traces_train.jsonl and an empty OUT/traces_val.jsonl, so `controller fit --traces` reads
the folder beside the others (its rows keep their own ``trace_set``).

    .venv/bin/python experiments/controller_train_traces.py --seed 10 \
        --rates 10,20,30 --duration 1200 --out runs/controller-low-s10/traces
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from inframind_ray.bench.controller_fit import FitSpec, collect, save_traces
from inframind_ray.config import load_pool


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True, help="seed of the TRAIN-split cells")
    ap.add_argument("--rates", default="10,20,30", help="req/min, comma-separated")
    ap.add_argument("--duration", type=float, default=1200.0, help="simulated s per cell")
    ap.add_argument("--pool", default="constrained")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="traces folder")
    a = ap.parse_args()
    rates = tuple(float(r) for r in a.rates.split(",") if r.strip())
    spec = FitSpec(load_pool(a.pool), a.pool, rates=rates, duration_s=a.duration, seed=a.seed)
    t0 = time.perf_counter()
    train = collect(spec, "train", a.seed, a.jobs or None, False)
    save_traces(a.out, train, [])
    print(f"{len(train)} TRAIN prefixes of seed {a.seed} -> {a.out} "
          f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
