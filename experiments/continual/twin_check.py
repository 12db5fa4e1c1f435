"""A scenario run's versions in the twin, each alone on the run's drifted pool (issue 20,
docs/continual.md): on the twin gate's workload (validation, 300 queries, seed 0), on 2,000
validation queries, and on a workload like the window's (test split, 2,000 queries, seed 1), all
at 480 req/min with budgets x 0.1. Goodput and SLO attainment per version.

    python experiments/continual/twin_check.py runs/continual/slowed-480-evidence v0001 v0005
"""

import sys

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec

RATE = 480.0


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: twin_check.py RUN_DIR VERSION [VERSION ...]")
    run = sys.argv[1]
    pool = load_pool(f"{run}/pool.yaml")
    sc = tuple(b * 0.1 for b in A.BUDGET_RANGE_S)
    cells = {"the gate's (val, 300, seed 0)": ("val", 300, 0),
             "val, 2,000, seed 0": ("val", 2000, 0),
             "like the window (test, 2,000, seed 1)": ("test", 2000, 1)}
    for name, (split, n, seed) in cells.items():
        wl = WorkloadSpec(RATE, n, split=split, seed=seed, budget_range_s=sc, tasks=MMLU_ONLY)
        res = []
        for v in sys.argv[2:]:
            q = run_cell(CellSpec(pool=pool, policy="inframind", workload=wl,
                                  checkpoint=f"{run}/registry/versions/{v}")).queries
            gp = np.mean([x["correct"] and x["within_budget"] for x in q])
            res.append(f"{v} goodput {gp:.4f} SLO {np.mean([x['within_budget'] for x in q]):.4f}")
        print(f"{name}: " + "; ".join(res), flush=True)


if __name__ == "__main__":
    main()
