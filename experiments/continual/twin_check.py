"""A scenario run's versions in the twin, each alone on the run's drifted pool (issue 20,
docs/continual.md): on the twin gate's workload (validation, 300 queries, seed 0), on 2,000
validation queries, and on a workload like the window's (test split, 2,000 queries, seed 1), all
at the run's live rate and task mix (its results.json) with budgets x 0.1. Goodput and SLO
attainment per version.

    python experiments/continual/twin_check.py runs/continual/slowed-480-evidence v0001 v0005
"""

import json
import sys
from pathlib import Path

from headroom import SCALED_BUDGETS, twin_cell

from inframind_ray.config import load_pool
from inframind_ray.tasks.workload import WorkloadSpec


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: twin_check.py RUN_DIR VERSION [VERSION ...]")
    run = sys.argv[1]
    pool = load_pool(f"{run}/pool.yaml")
    doc = json.loads(Path(run, "results.json").read_text())
    rate, tasks = float(doc["rate"]), tuple((f, float(w)) for f, w in doc["tasks"])
    print(f"{run}: {rate:g} req/min, tasks {tasks}", flush=True)
    cells = {"the gate's (val, 300, seed 0)": ("val", 300, 0),
             "val, 2,000, seed 0": ("val", 2000, 0),
             "like the window (test, 2,000, seed 1)": ("test", 2000, 1)}
    for name, (split, n, seed) in cells.items():
        wl = WorkloadSpec(rate, n, split=split, seed=seed, budget_range_s=SCALED_BUDGETS,
                          tasks=tasks)
        res = []
        for v in sys.argv[2:]:
            gp, slo = twin_cell(pool, "inframind", wl, f"{run}/registry/versions/{v}")
            res.append(f"{v} goodput {gp:.4f} SLO {slo:.4f}")
        print(f"{name}: " + "; ".join(res), flush=True)


if __name__ == "__main__":
    main()
