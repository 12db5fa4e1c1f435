"""Markdown tables and the issue's target checks for the learned policy, from one bench run.

    .venv/bin/python experiments/learning_report.py docs/bench/learned/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TASK_ONLY = ("always-strongest", "static-task", "moa")
REFERENCE = ("oracle",)  # not a competitor: knows the recorded answers


def main() -> None:
    """Entry point."""
    rows = json.loads(Path(sys.argv[1]).read_text())["rows"]
    by = {(r["policy"], r["rate_per_min"]): r for r in rows}
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    rates = sorted({r["rate_per_min"] for r in rows})
    print("Goodput (SLO attainment in brackets):\n")
    print("| policy | " + " | ".join(f"{r:g}/min" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    for p in policies:
        cells = [f"{by[p, r]['goodput']:.3f} ({by[p, r]['slo_attainment']:.3f})" for r in rates]
        print(f"| {p} | " + " | ".join(cells) + " |")

    me = "inframind"
    print("\nTargets:\n")
    print("| target | rate | inframind | bar | met |")
    print("|---|---:|---:|---:|:---:|")
    for r in rates:
        rivals = [p for p in policies if p not in (me, *REFERENCE)]
        best = max(rivals, key=lambda p: by[p, r]["goodput"])
        v, b = by[me, r]["goodput"], by[best, r]["goodput"]
        print(f"| goodput >= every baseline (best: {best}) | {r:g} | {v:.3f} | {b:.3f} | "
              f"{'yes' if v >= b else 'no'} |")
    for r in (150.0, 300.0):
        if (me, r) in by:
            best = max((p for p in TASK_ONLY if (p, r) in by), key=lambda p: by[p, r]["goodput"])
            v, b = by[me, r]["goodput"], 1.5 * by[best, r]["goodput"]
            print(f"| goodput >= 1.5x best task-only ({best}) | {r:g} | {v:.3f} | {b:.3f} | "
                  f"{'yes' if v >= b else 'no'} |")
    if (me, 100.0) in by:
        v = by[me, 100.0]["slo_attainment"]
        ok = "yes" if v >= 0.99 else "no"
        print(f"| SLO attainment >= 0.99 | 100 | {v:.3f} | 0.990 | {ok} |")
    if (me, 10.0) in by:
        v, a = by[me, 10.0]["accuracy"], by["always-strongest", 10.0]["accuracy"]
        print(f"| accuracy >= always-strongest - 1 pp | 10 | {v:.3f} | {a - 0.01:.3f} | "
              f"{'yes' if v >= a - 0.01 else 'no'} |")

    print("\nWhat inframind chooses per rate (share of agent calls / of queries):\n")
    print("| rate/min | models | strategies | topologies |")
    print("|---:|---|---|---|")

    def fmt(mix: dict) -> str:
        return ", ".join(f"{k} {v:.0%}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1]))

    for r in rates:
        x = by[me, r]
        print(f"| {r:g} | {fmt(x['model_mix'])} | {fmt(x['strategy_mix'])} | "
              f"{fmt(x['topology_mix'])} |")


if __name__ == "__main__":
    main()
