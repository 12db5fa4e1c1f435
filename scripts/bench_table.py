"""Print a bench run's results.json as a markdown table: goodput (SLO attainment) per policy and
rate, and the share of calls off the pool's most used model. Usage:
``python scripts/bench_table.py RUN_DIR``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    d = json.loads((Path(sys.argv[1]) / "results.json").read_text())
    rows = d["rows"]
    rates = sorted({r["rate_per_min"] for r in rows})
    pols = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["policy"], r["rate_per_min"]): r for r in rows}
    print("| policy | " + " | ".join(f"{x:g}/min" for x in rates) + " | mean goodput |")
    print("|---|" + "---:|" * (len(rates) + 1))
    for p in pols:
        cs = [cell[(p, x)] for x in rates]
        txt = [f"{c['goodput']:.3f} ({c['slo_attainment']:.2f})" for c in cs]
        mean = sum(c["goodput"] for c in cs) / len(cs)
        print(f"| {p} | " + " | ".join(txt) + f" | {mean:.4f} |")
    print()
    for p in pols:
        mixes = [", ".join(f"{m} {v:.0%}" for m, v in sorted(cell[(p, x)]["model_mix"].items(),
                                                               key=lambda kv: -kv[1]) if v >= 0.01)
                 for x in rates]
        print(f"- {p}: " + "; ".join(f"{x:g}/min: {m}" for x, m in zip(rates, mixes, strict=True)))


if __name__ == "__main__":
    main()
