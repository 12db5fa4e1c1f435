"""Markdown tables of a mixed-workload sweep (docs/tasks.md, "A mixed workload, every policy"):
goodput per policy and rate; per task family the papers' table shape (accuracy at the lowest
rate, SLO attainment and goodput at the highest); and each policy's model mix per family at the
highest rate.

    .venv/bin/python experiments/tasks_report.py docs/bench/mixed/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    rows = doc["rows"]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    rates = sorted({r["rate_per_min"] for r in rows})
    cell = {(r["policy"], r["rate_per_min"]): r for r in rows}
    tasks = list(doc["meta"]["tasks"])
    print(f"mix {doc['meta']['tasks']}, {doc['meta']['queries_per_cell']} queries per cell, "
          f"split {doc['meta']['split']}, seed {doc['meta']['seed']}\n")

    print("Goodput (SLO attainment) per rate, req/min:\n")
    print("| policy | " + " | ".join(f"{r:g}" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    for p in policies:
        print(f"| {p} | " + " | ".join(
            f"{cell[p, r]['goodput']:.3f} ({cell[p, r]['slo_attainment']:.2f})" for r in rates)
            + " |")

    lo, hi = rates[0], rates[-1]
    print(f"\nPer family: accuracy at {lo:g} req/min / SLO attainment at {hi:g} / goodput at "
          f"{hi:g}:\n")
    print("| policy | " + " | ".join(tasks) + " |")
    print("|---|" + "---|" * len(tasks))
    for p in policies:
        parts = []
        for t in tasks:
            a, b = cell[p, lo]["by_task"][t], cell[p, hi]["by_task"][t]
            parts.append(f"{a['accuracy']:.3f} / {b['slo_attainment']:.2f} / {b['goodput']:.3f}")
        print(f"| {p} | " + " | ".join(parts) + " |")

    print(f"\nModel mix of agent calls per family (share of calls) at {lo:g} and {hi:g} req/min:\n")
    print("| policy | rate | " + " | ".join(tasks) + " |")
    print("|---|---:|" + "---|" * len(tasks))
    for p in policies:
        for r in (lo, hi):
            parts = []
            for t in tasks:
                mix = cell[p, r]["by_task"][t]["model_mix"]
                top = sorted(mix.items(), key=lambda kv: -kv[1])[:3]
                parts.append(", ".join(f"{m} {v:.0%}" for m, v in top))
            print(f"| {p} | {r:g} | " + " | ".join(parts) + " |")


if __name__ == "__main__":
    main()
