"""Where the learned policy's goodput against a baseline falls, by what it did with each query
(same items and arrivals in both runs): a vote, a call sent off the strongest model, Concise or
Flash on the strongest, or one DeepThink call of the strongest ("same": what always-strongest
does, and static-task on the default pool outside MBPP), per task family; points of the cell's
goodput, mean over the runs and seeds given (docs/learning/journal.md, 2026-12-07 02:33).

    .venv/bin/python experiments/query_classes.py runs/diag19 --runs rldelay0 rldelay1 \\
        --seeds 1-10 --baseline static-task --load 0.5
    # reads runs/diag19/{base,RUN}-sS/{queries,calls}.parquet (the bench commands: journal)
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd


def _good(q: pd.DataFrame) -> pd.Series:
    return (q.correct & q.within_budget).astype(int)


def _at(df: pd.DataFrame, rate: float, policy: str) -> pd.DataFrame:
    return df[((df.rate_per_min - rate).abs() < 1e-3) & (df.policy == policy)]


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--runs", nargs="+", required=True, help="inframind run prefixes: RUN-sS/")
    ap.add_argument("--base", default="base", help="baselines' run prefix")
    ap.add_argument("--baseline", default="static-task")
    ap.add_argument("--seeds", default="1-10", help="e.g. 1-10")
    ap.add_argument("--load", type=float, default=0.5, help="load factor of the cell")
    ap.add_argument("--strongest", default="llama-3.1-70b")
    args = ap.parse_args()
    a, _, b = args.seeds.partition("-")
    seeds = range(int(a), int(b or a) + 1)
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    cells = 0
    for run in args.runs:
        for s in seeds:
            qb = pd.read_parquet(args.root / f"{args.base}-s{s}" / "queries.parquet")
            qi = pd.read_parquet(args.root / f"{run}-s{s}" / "queries.parquet")
            ci = pd.read_parquet(args.root / f"{run}-s{s}" / "calls.parquet")
            rows = json.loads((args.root / f"{run}-s{s}" / "results.json").read_text())["rows"]
            rate = next(r["rate_per_min"] for r in rows if abs(r["load_factor"] - args.load) < 1e-3)
            qb = _at(qb, rate, args.baseline).set_index("query_id")
            qi = _at(qi, rate, "inframind").set_index("query_id")
            ci = _at(ci, rate, "inframind").groupby("query_id")
            off = ci.model.apply(lambda m: bool((m != args.strongest).any()))
            terse = ci.strategy.apply(lambda x: bool((x != "deepthink").any()))
            dg, dc = _good(qi) - _good(qb), qi.correct.astype(int) - qb.correct.astype(int)
            db = qi.within_budget.astype(int) - qb.within_budget.astype(int)
            n, cells = len(qi), cells + 1
            for qid, row in qi.iterrows():
                kind = ("vote" if row.topology != "io" else
                        f"off-strongest:{row.task}" if off[qid] else
                        f"concise/flash:{row.task}" if terse[qid] else f"same:{row.task}")
                acc = sums[kind]
                acc[0] += 1
                acc[1] += 100 * dg[qid] / n
                acc[2] += 100 * dc[qid] / n
                acc[3] += 100 * db[qid] / n
    print(f"inframind ({', '.join(args.runs)}) minus {args.baseline}, x{args.load:g}, "
          f"{cells} cells; points of the cell's goodput per class of query\n")
    print("| class | queries per cell | goodput | correct | in budget |")
    print("|---|---:|---:|---:|---:|")
    for kind in sorted(sums):
        k, g, c, b = (v / cells for v in sums[kind])
        print(f"| {kind} | {k:.1f} | {g:+.3f} | {c:+.3f} | {b:+.3f} |")
    print(f"| total | | {sum(v[1] for v in sums.values()) / cells:+.3f} | | |")


if __name__ == "__main__":
    main()
