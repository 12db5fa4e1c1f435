"""How much a drift leaves for a continual learner to win (issue 20, docs/continual.md): the
frozen shipped policy beside every baseline and the per-item oracle in the twin, on a drift
scenario's pool and the scenario window's workload (test split, 400 queries, budgets x the
pool's time_scale 0.1), over several arrival seeds. Prints a Markdown table; --json writes rows.

    python experiments/continual/headroom.py --scenario slowed --seeds 1,2,3,4,5
    python experiments/continual/headroom.py --scenario none --tasks mmlu_pro   # the pool undrifted
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from drift_scenario import HERE, SCENARIOS, TIME_SCALE, WINDOW_SPLIT

from inframind_ray import assumptions as A
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.serving.drift import apply_to_config
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec

POLICIES = ("inframind", "always-strongest", "static-task", "infra-heuristic", "infra-topology",
            "priced-topology", "oracle")
SCALED_BUDGETS = tuple(b * TIME_SCALE for b in A.BUDGET_RANGE_S)  # the scenario's budgets


def twin_cell(pool, policy: str, wl: WorkloadSpec,  # noqa: ANN001
              checkpoint: str | None = None) -> tuple[float, float]:
    """Goodput and SLO attainment of one twin cell."""
    q = run_cell(CellSpec(pool=pool, policy=policy, workload=wl, checkpoint=checkpoint)).queries
    return (float(np.mean([x["correct"] and x["within_budget"] for x in q])),
            float(np.mean([x["within_budget"] for x in q])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=[*SCENARIOS, "none"], required=True,
                    help="the drifted pool and its traffic; none: the pool as shipped")
    ap.add_argument("--tasks", default=None, help="with --scenario none: family=share,... "
                    "(default: MMLU-Pro only)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seeds", default="1,2,3,4,5", help="arrival/item seeds (the window's: 1)")
    ap.add_argument("--rate", type=float, default=120.0, help="req/min (the live rate)")
    ap.add_argument("--n", type=int, default=400, help="queries per cell")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    pool = load_pool(HERE / "pool.yaml")
    if args.scenario == "none":
        tasks = MMLU_ONLY if not args.tasks else tuple(
            (f, float(s)) for f, s in (p.split("=") for p in args.tasks.split(",")))
    else:
        drift, tasks = SCENARIOS[args.scenario]
        pool = apply_to_config(pool, drift)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = {}
    for p in args.policies.split(","):
        g = []
        for s in seeds:
            wl = WorkloadSpec(args.rate, args.n, split=WINDOW_SPLIT, seed=s,
                              budget_range_s=SCALED_BUDGETS, tasks=tuple(tasks))
            g.append(twin_cell(pool, p, wl)[0])
        rows[p] = g
    ref = np.array(rows.get("inframind", next(iter(rows.values()))))
    print(f"scenario {args.scenario}, {args.rate:g} req/min, {args.n} queries x seeds {seeds}\n")
    print("| policy | goodput per seed | mean | minus frozen inframind (points, mean [min, max]) |")
    print("|---|---|---:|---:|")
    for p, g in rows.items():
        d = (np.array(g) - ref) * 100
        print(f"| {p} | {', '.join(f'{x:.4f}' for x in g)} | {np.mean(g):.4f} | "
              f"{d.mean():+.2f} [{d.min():+.2f}, {d.max():+.2f}] |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"scenario": args.scenario, "rate": args.rate,
                                         "n": args.n, "seeds": seeds, "goodput": rows},
                                        indent=1))


if __name__ == "__main__":
    main()
