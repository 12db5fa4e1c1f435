"""Where a policy's goodput loss against another falls, per query (same items and arrivals):
queries where one votes and the other does not, and queries where both made the same choices
for every call (no vote, same model and strategy), with the model's running batch at their
dispatch (docs/learning/journal.md, 2026-12-06 20:04).

    .venv/bin/python experiments/same_choice_loss.py runs/diag19 rltail rltail0 --seeds 1-10 \\
        --rates 412.468,824.937   # reads runs/diag19/{rltail,rltail0}-sS/{queries,calls}.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def read_cell(root: Path, run: str, seed: int, rate: float,
              policy: str = "inframind") -> pd.DataFrame:
    """One policy's queries of one cell, with each query's call choices and mean batch."""
    q = pd.read_parquet(root / f"{run}-s{seed}" / "queries.parquet")
    c = pd.read_parquet(root / f"{run}-s{seed}" / "calls.parquet")
    q = q[(q.policy == policy) & ((q.rate_per_min - rate).abs() < 1)].set_index("query_id")
    c = c[(c.policy == policy) & ((c.rate_per_min - rate).abs() < 1)].sort_values("node_id")
    calls = c.groupby("query_id")
    q["choices"] = calls.apply(lambda d: tuple(zip(d.model, d.strategy, strict=True)))
    q["running"] = calls.load_running.mean()
    q["good"] = (q.correct & q.within_budget).astype(float)
    q["vote"] = q.topology == "debate"
    return q


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("run", help="run prefix of the policy (PREFIX-sS/)")
    ap.add_argument("ref", help="run prefix it is compared with")
    ap.add_argument("--seeds", required=True, help="e.g. 1-10")
    ap.add_argument("--rates", required=True, help="cells' rates, req/min, comma-separated")
    a = ap.parse_args()
    lo, _, hi = a.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    for rate in (float(r) for r in a.rates.split(",")):
        j = pd.concat([read_cell(a.root, a.run, s, rate).add_suffix("_a").join(
            read_cell(a.root, a.ref, s, rate).add_suffix("_b"), how="inner") for s in seeds])
        d = j.good_a - j.good_b
        slo = j.within_budget_a.astype(float) - j.within_budget_b.astype(float)
        same = ~j.vote_a & ~j.vote_b & (j.choices_a == j.choices_b)
        groups = {f"{a.run} votes, {a.ref} not": j.vote_a & ~j.vote_b,
                  "both vote": j.vote_a & j.vote_b,
                  f"{a.ref} votes, {a.run} not": ~j.vote_a & j.vote_b,
                  "neither, same choices": same,
                  "neither, other choices": ~j.vote_a & ~j.vote_b & ~same}
        print(f"\n{rate:g} req/min, {len(j)} queries; {a.run} minus {a.ref}, points of all "
              "queries\n\n| queries | n | goodput | SLO | running at dispatch |\n"
              "|---|---:|---:|---:|---|")
        for name, m in groups.items():
            print(f"| {name} | {int(m.sum())} | {100 * d[m].sum() / len(j):+.2f} | "
                  f"{100 * slo[m].sum() / len(j):+.2f} | {j.running_a[m].mean():.0f} against "
                  f"{j.running_b[m].mean():.0f} |")


if __name__ == "__main__":
    main()
