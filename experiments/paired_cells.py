"""Goodput of each policy minus the best baseline of the same cell, paired over bench seeds: mean
and 95 % t-interval per load factor (docs/learning/journal.md, issue 19's x0.5 diagnosis).

    .venv/bin/python experiments/paired_cells.py runs/diag19 --seeds 1-10 \
        --runs base rl clone   # reads runs/diag19/{base,rl,clone}-sS/results.json
    .venv/bin/python experiments/paired_cells.py runs/diag19 --seeds 1-10 \
        --runs base rldelay rldelay0 --minus rldelay0   # also: each run minus rldelay0's policy

A policy that appears in several runs (``inframind`` with different checkpoints) is named by its
run: ``inframind@rl``. The best baseline of a cell is the highest goodput among
always-strongest, static-task, moa and infra-heuristic in that seed's cell.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

BASELINES = ("always-strongest", "static-task", "moa", "infra-heuristic")


def _seeds(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--seeds", type=_seeds, required=True, help="e.g. 1-10")
    ap.add_argument("--runs", nargs="+", required=True, help="run prefixes: PREFIX-sS/")
    ap.add_argument("--minus", help="also print every inframind run minus this run's, with its "
                    "debate share per load")
    args = ap.parse_args()
    good: dict[tuple[str, float], dict[int, float]] = defaultdict(dict)  # (policy, load) -> seed
    votes: dict[tuple[str, float], dict[int, float]] = defaultdict(dict)
    for s in args.seeds:
        for run in args.runs:
            for row in json.loads((args.root / f"{run}-s{s}" / "results.json").read_text())[
                    "rows"]:
                name = row["policy"] if row["policy"] != "inframind" else f"inframind@{run}"
                key = (name, round(row["load_factor"], 3))
                good[key][s] = row["goodput"]
                votes[key][s] = row["topology_mix"].get("debate", 0.0)
    loads = sorted({lf for _, lf in good})
    names = list(dict.fromkeys(name for name, _ in good))
    best = {(lf, s): max(good[(b, lf)][s] for b in BASELINES if (b, lf) in good)
            for lf in loads for s in args.seeds}
    n = len(args.seeds)

    def cell(d: np.ndarray) -> str:
        half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n) if n > 1 else 0.0
        return (f"{d.mean():+.2f} [{d.mean() - half:+.2f}, {d.mean() + half:+.2f}] "
                f"({int((d >= 0).sum())}/{n})")

    print(f"Goodput minus the best of {', '.join(BASELINES)} in the same cell, points; mean "
          f"[95 % t-interval] over {n} seeds (wins = seeds at or above it)\n")
    print("| policy | " + " | ".join(f"x{lf:g}" for lf in loads) + " |")
    print("|---|" + "---:|" * len(loads))
    for name in names:
        cells = [cell(np.array([100 * (good[(name, lf)][s] - best[(lf, s)]) for s in args.seeds]))
                 for lf in loads]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.minus:
        ref = f"inframind@{args.minus}"
        print(f"\nMinus {ref}, points (seeds at or above it); debate share of queries\n")
        print("| policy | " + " | ".join(f"x{lf:g} | votes x{lf:g}" for lf in loads) + " |")
        print("|---|" + "---:|---:|" * len(loads))
        for name in (x for x in names if x.startswith("inframind@")):
            cells = []
            for lf in loads:
                d = np.array([100 * (good[(name, lf)][s] - good[(ref, lf)][s])
                              for s in args.seeds])
                v = np.mean([votes[(name, lf)][s] for s in args.seeds])
                cells += [cell(d), f"{100 * v:.1f} %"]
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
