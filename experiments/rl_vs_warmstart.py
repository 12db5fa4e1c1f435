"""RL beyond its teacher (issue 19): the kept checkpoint against its own warm start, paired over
training seeds, on the report seed's validation draws (``eval.report_seed``: not the rows the
checkpoint was selected on). One ``inframind train`` run per seed, then

    .venv/bin/python experiments/rl_vs_warmstart.py runs/rl-seed*/summary.json

prints per seed and per validation pool the two goodputs, the paired difference of their means
over the pools, its mean and 95 % t-interval over the seeds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats


def main() -> None:
    """Entry point: one summary.json per training seed on the command line."""
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        sys.exit("usage: rl_vs_warmstart.py SUMMARY.json [SUMMARY.json ...]")
    reps = []
    for p in paths:
        s = json.loads(p.read_text())
        if "report" not in s:
            sys.exit(f"error: {p} has no report (train with eval.report_seed set)")
        reps.append((p.parent.name, s["report"]))
    pools = sorted({k for _, r in reps for k in r["kept_by_pool"]})
    print(f"report seed {reps[0][1]['seed']}; goodput {reps[0][1]['start_phase']} -> kept\n")
    print("| run | " + " | ".join(pools) + " | mean | difference |")
    print("|---|" + "---:|" * (len(pools) + 2))
    for name, r in reps:
        cells = [f"{r['start_by_pool'][p]:.3f} -> {r['kept_by_pool'][p]:.3f}" for p in pools]
        print(f"| {name} | " + " | ".join(cells) +
              f" | {r['start_mean']:.3f} -> {r['kept_mean']:.3f} | {r['kept_minus_start']:+.4f} |")
    d = np.array([r["kept_minus_start"] for _, r in reps])
    if len(d) > 1:
        lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d)) \
            if d.std() > 0 else (d.mean(), d.mean())
        print(f"\npaired over {len(d)} seeds: mean difference {d.mean():+.4f} "
              f"(95 % interval {lo:+.4f} to {hi:+.4f}); target: >= +0.0100 with the interval "
              "above 0")


if __name__ == "__main__":
    main()
