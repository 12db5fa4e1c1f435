"""The `constrained` regression guard of issue 19's shipping rule, per checkpoint.

The cells of `tests/test_bench.py::test_shipped_learned_policy_beats_task_only_under_load` for
each given checkpoint, beside always-strongest, with the test's outcome lines checked
(docs/learning.md, "The checkpoint picked").

    .venv/bin/python experiments/constrained_guard.py inframind_ray/data/policy \
        runs/rl-overlap240-seed4/policy   # ~35 s per checkpoint on 2 cores

A candidate passes if its 300 req/min goodput is no lower than the first checkpoint's (the one
it would replace) and the test's outcome lines hold. With ``--seeds 1-10 --split val`` it prints
instead, for the 300 req/min cell only, every checkpoint's goodput per item draw and each
candidate minus the first, paired, with its 95 % t-interval (how far one cell moves between
draws; docs/learning/journal.md, 2026-12-08 01:04).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy import stats

from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool
from inframind_ray.tasks.workload import WorkloadSpec

KEYS = ("goodput", "slo_attainment", "topology_mix", "model_mix")


def _cell(pool, policy: str, rate: float, n: int, checkpoint: str | None = None,
          seed: int = 0, split: str = "test") -> dict:
    s = run_cell(CellSpec(pool, policy, WorkloadSpec(rate, n, split=split, seed=seed),
                          checkpoint=checkpoint)).summary
    return {k: s[k] for k in KEYS}


def _seeds(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def _spread(pool, checkpoints: list[str], seeds: list[int], split: str) -> None:
    good = {c: np.array([_cell(pool, "inframind", 300, 800, c, s, split)["goodput"]
                         for s in seeds]) for c in checkpoints}
    print(f"300 req/min, 800 queries, {split} split, seeds {seeds[0]}-{seeds[-1]}")
    for c, g in good.items():
        print(f"{c}: " + " ".join(f"{x:.4f}" for x in g)
              + f"; mean {g.mean():.4f}, sd {g.std(ddof=1):.4f}")
    ref = good[checkpoints[0]]
    for c in checkpoints[1:]:
        d = 100 * (good[c] - ref)
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        print(f"{c} minus {checkpoints[0]}: {d.mean():+.2f} points [{d.mean() - half:+.2f}, "
              f"{d.mean() + half:+.2f}], sd {d.std(ddof=1):.2f} ({int((d >= 0).sum())}/{len(d)} "
              "at or above)")


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+", help="the replaced checkpoint first, then candidates")
    ap.add_argument("--json", action="store_true", help="print the cells as JSON")
    ap.add_argument("--seeds", type=_seeds, help="e.g. 1-10: the 300 req/min cell per item draw, "
                    "paired against the first checkpoint")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"),
                    help="items of this split (default: test, as the bench test)")
    args = ap.parse_args()
    pool = load_pool("constrained")
    if args.seeds:
        _spread(pool, args.checkpoints, args.seeds, args.split)
        return
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
