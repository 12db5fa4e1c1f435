"""Twin speed benchmark (a script, not a test): simulated seconds per wall second on ONE core.

Simulates the default 5-model pool at 300 req/min for each policy given, single process pinned to
one CPU, and prints simulated_s / wall_s. Usage (from the repository root):

    .venv/bin/python experiments/twin_speed.py --queries 3000 --rate 300 --out docs/bench/speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.tasks.workload import WorkloadSpec


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", default="constrained")  # the figures' pool (issue 19)
    ap.add_argument("--rate", type=float, default=300.0, help="req/min")
    ap.add_argument("--queries", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--policies", default="always-strongest,least-loaded,infra-heuristic,moa,random"
    )
    ap.add_argument("--out", type=Path, default=None, help="write a JSON record here")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    pool = load_pool(args.pool)
    rows = []
    for policy in args.policies.split(","):
        t0 = time.perf_counter()
        r = run_cell(CellSpec(pool, policy, WorkloadSpec(args.rate, args.queries, seed=args.seed)))
        wall = time.perf_counter() - t0
        s = r.summary
        row = {"policy": policy, "rate_per_min": args.rate, "queries": args.queries,
               "agent_calls": len(r.calls), "simulated_s": round(r.simulated_s, 1),
               "wall_s": round(wall, 3), "speedup": round(r.simulated_s / wall, 1),
               "goodput": s["goodput"]}
        rows.append(row)
        print(f"{policy:18s} {args.queries} queries, {len(r.calls)} agent calls: "
              f"{r.simulated_s:8.1f} simulated s in {wall:6.2f} wall s = "
              f"{r.simulated_s / wall:7.1f}x real time")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cpu": platform.processor() or platform.machine(),
                                        "cores_used": 1, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
