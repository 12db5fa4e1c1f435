"""Always-strongest at 10 req/min on each task family alone, in the twin, beside the recorded
accuracy of its model (the pool's strongest) on that family's test split: the twin's accuracy
must match within sampling error (docs/tasks.md, "The twin replays each family").

    .venv/bin/python experiments/family_accuracy.py              # ~30 s on 2 cores
"""

from __future__ import annotations

import argparse

import numpy as np

from inframind_ray import data
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.registry import FAMILIES, family
from inframind_ray.tasks.workload import WorkloadSpec


def recorded_accuracy(name: str, recorded: str, ids: np.ndarray) -> float:
    """Mean recorded correctness (pass@1 for code) of a model over items."""
    fam = family(name)
    if name == "mmlu_pro":
        rec = data.outcomes()[recorded]["correct"]
    else:
        col = "pass_at_1" if name in ("humaneval", "mbpp") else "correct"
        rec = data.task_outcomes(name)[recorded][col]
    return float(np.mean([rec[fam.index(int(i))] for i in ids]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", default="constrained")  # the figures' pool (issue 19)
    ap.add_argument("--queries", type=int, default=500,
                    help="queries per family (at most the test split where it has that many)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pool = load_pool(args.pool)
    strongest = build_pool_info(pool).strongest
    model = next(m for m in pool.models if m.name == strongest)
    print(f"pool {args.pool}: always-strongest = {strongest}, seed {args.seed}\n")
    print("| family | recorded model | test items | queries | recorded test accuracy | "
          "twin accuracy at 10 req/min | difference | 3 standard errors |")
    print("|---|---|---|---|---|---|---|---|")
    for name in FAMILIES:
        ids = family(name).split_ids("test")
        code = name in ("humaneval", "mbpp")
        n = args.queries if code else min(len(ids), args.queries)
        res = run_cell(CellSpec(pool, "always-strongest",
                                WorkloadSpec(10, n, seed=args.seed, tasks=((name, 1.0),))))
        rec_name = model.recorded_for(name)
        want = recorded_accuracy(name, rec_name, ids)
        got = res.summary["accuracy"]
        # every item drawn once and replayed: no sampling error; a sample of items or code
        # draws: the binomial standard error of n queries
        exact = n == len(ids) and not code
        se = 0.0 if exact else float(np.sqrt(want * (1 - want) / n))
        print(f"| {name} | {rec_name} | {len(ids)} | {n} | {want:.4f} | {got:.4f} | "
              f"{got - want:+.4f} | {3 * se:.4f}{' (every item, exact replay)' if exact else ''} |")


if __name__ == "__main__":
    main()
