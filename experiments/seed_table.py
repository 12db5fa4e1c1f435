"""Goodput over several seeds of the same bench: mean, min and max per (policy, rate), and the
share of runs in which the strongest model took under 90 % of calls (docs/learning.md).

    .venv/bin/python experiments/seed_table.py runs/val-seeds/*/results.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def main() -> None:
    """Entry point: one results.json per seed on the command line."""
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        sys.exit("usage: seed_table.py RESULTS.json [RESULTS.json ...]")
    cells: dict[tuple[str, float], list[dict]] = defaultdict(list)
    for p in paths:
        for row in json.loads(p.read_text())["rows"]:
            cells[(row["policy"], row["rate_per_min"])].append(row)
    policies = list(dict.fromkeys(k[0] for k in cells))
    rates = sorted({k[1] for k in cells})
    print(f"Goodput over {len(paths)} seeds: mean [min, max]; (k) = runs in which the "
          "most-used model took < 90 % of calls\n")
    print("| policy | " + " | ".join(f"{r:g}/min" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    for pol in policies:
        out = []
        for r in rates:
            rows = cells.get((pol, r), [])
            if not rows:
                out.append("")
                continue
            g = np.array([x["goodput"] for x in rows])
            spread = sum(max(x["model_mix"].values()) < 0.9 for x in rows)
            out.append(f"{g.mean():.3f} [{g.min():.3f}, {g.max():.3f}]"
                       + (f" ({spread})" if spread else ""))
        print(f"| {pol} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
