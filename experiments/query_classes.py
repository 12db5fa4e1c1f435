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
from pathlib import Path

import pandas as pd
from same_choice_loss import read_cell


def _classes(q: pd.DataFrame, strongest: str) -> pd.Series:
    """Each query's class from its call choices (model, strategy) and topology."""
    off = q.choices.map(lambda cs: any(m != strongest for m, _ in cs))
    terse = q.choices.map(lambda cs: any(st != "deepthink" for _, st in cs))
    return pd.Series(["vote" if v else f"off-strongest:{t}" if o else
                      f"concise/flash:{t}" if c else f"same:{t}"
                      for v, o, c, t in zip(q.vote, off, terse, q.task, strict=True)], q.index)


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
    cells = []
    for run in args.runs:
        for s in range(int(a), int(b or a) + 1):
            rows = json.loads((args.root / f"{run}-s{s}" / "results.json").read_text())["rows"]
            rate = next(r["rate_per_min"] for r in rows if abs(r["load_factor"] - args.load) < 1e-3)
            q = read_cell(args.root, run, s, rate)
            base = read_cell(args.root, args.base, s, rate, args.baseline)
            pts = 100 / len(q)  # one query, in points of the cell
            cells.append(pd.DataFrame({
                "class": _classes(q, args.strongest),
                "goodput": pts * (q.good - base.good),
                "correct": pts * (q.correct.astype(int) - base.correct.astype(int)),
                "in budget": pts * (q.within_budget.astype(int) - base.within_budget.astype(int)),
            }))
    t = pd.concat(cells).groupby("class")
    table = pd.concat([t.size().rename("queries"), t.sum()], axis=1) / len(cells)
    print(f"inframind ({', '.join(args.runs)}) minus {args.baseline}, x{args.load:g}, "
          f"{len(cells)} cells; points of the cell's goodput per class of query\n")
    print("| class | queries per cell | goodput | correct | in budget |")
    print("|---|---:|---:|---:|---:|")
    for kind, r in table.iterrows():
        print(f"| {kind} | {r.queries:.1f} | {r.goodput:+.3f} | {r.correct:+.3f} | "
              f"{r['in budget']:+.3f} |")
    print(f"| total | | {table.goodput.sum():+.3f} | | |")


if __name__ == "__main__":
    main()
