"""Print Markdown tables from a bench results.json (used to write docs/twin.md).

    .venv/bin/python experiments/results_markdown.py docs/bench/default/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    """Entry point."""
    doc = json.loads(Path(sys.argv[1]).read_text())
    rows = doc["rows"]
    print("| policy | rate/min | goodput | accuracy | SLO | lat mean s | p95 s | p99 s | calls/q |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['policy']} | {r['rate_per_min']:g} | {r['goodput']:.3f} | "
              f"{r['accuracy']:.3f} | {r['slo_attainment']:.3f} | {r['latency_mean_s']:.1f} | "
              f"{r['latency_p95_s']:.1f} | {r['latency_p99_s']:.1f} | {r['calls_per_query']:.2f} |")
    models = list(rows[0]["queue_depth_mean"])
    print("\nMean waiting requests per model (always-strongest | least-loaded):\n")
    print("| rate/min | " + " | ".join(models) + " |")
    print("|---:|" + "---:|" * len(models))
    by = {(r["policy"], r["rate_per_min"]): r for r in rows}
    for rate in sorted({r["rate_per_min"] for r in rows}):
        a, b = by.get(("always-strongest", rate)), by.get(("least-loaded", rate))
        if a and b:
            cells = [f"{a['queue_depth_mean'][m]:.1f} \\| {b['queue_depth_mean'][m]:.1f}"
                     for m in models]
            print(f"| {rate:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
