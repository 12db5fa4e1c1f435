"""The `constrained` regression guard of issue 19's shipping rule (docs/learning.md, "The
checkpoint picked"): the cells of `tests/test_bench.py::
test_shipped_learned_policy_beats_task_only_under_load` for each given checkpoint, beside
always-strongest, with the test's outcome lines checked.

    .venv/bin/python experiments/constrained_guard.py inframind_ray/data/policy \
        runs/rl-overlap240-seed4/policy   # ~35 s per checkpoint on 2 cores

A candidate passes if its 300 req/min goodput is no lower than the first checkpoint's (the one
it would replace) and the test's outcome lines hold.
"""

from __future__ import annotations

import argparse
import json

from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.tasks.workload import WorkloadSpec

KEYS = ("goodput", "slo_attainment", "topology_mix", "model_mix")


def _cell(pool, policy: str, rate: float, n: int, checkpoint: str | None = None) -> dict:
    s = run_cell(CellSpec(pool, policy, WorkloadSpec(rate, n, seed=0),
                          checkpoint=checkpoint)).summary
    return {k: s[k] for k in KEYS}


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+", help="the replaced checkpoint first, then candidates")
    ap.add_argument("--json", action="store_true", help="print the cells as JSON")
    args = ap.parse_args()
    pool = load_pool("constrained")
    lo_a, hi_a = _cell(pool, "always-strongest", 10, 400), _cell(pool, "always-strongest", 300, 800)
    cells = {c: (_cell(pool, "inframind", 10, 400, c), _cell(pool, "inframind", 300, 800, c))
             for c in args.checkpoints}
    if args.json:
        print(json.dumps({"always-strongest": [lo_a, hi_a]} | cells, indent=1))
        return
    ref = cells[args.checkpoints[0]][1]["goodput"]
    print(f"always-strongest: 10/min {lo_a['goodput']:.4f}, 300/min {hi_a['goodput']:.4f}")
    for c, (lo, hi) in cells.items():
        lines = {"idle >= always-strongest - 0.01": lo["goodput"] >= lo_a["goodput"] - 0.01,
                 "idle 70B > 90 %": lo["model_mix"].get("llama-3.1-70b", 0) > 0.9,
                 "idle debate > 50 %": lo["topology_mix"].get("debate", 0) > 0.5,
                 "300/min > 1.5x always-strongest": hi["goodput"] > 1.5 * hi_a["goodput"],
                 "300/min SLO > 0.95": hi["slo_attainment"] > 0.95,
                 f"300/min >= {ref:.4f} (replaced)": hi["goodput"] >= ref}
        verdict = "pass" if all(lines.values()) else "FAIL: " + ", ".join(
            k for k, ok in lines.items() if not ok)
        print(f"{c}: 10/min {lo['goodput']:.4f} (debate {lo['topology_mix'].get('debate', 0):.3f})"
              f", 300/min {hi['goodput']:.4f} (SLO {hi['slo_attainment']:.4f}, 70B "
              f"{hi['model_mix'].get('llama-3.1-70b', 0):.3f}): {verdict}")


if __name__ == "__main__":
    main()
