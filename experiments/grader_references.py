"""The graders on their own references and on ZeroEval's recorded outputs (inframind_ray.grading):

* GSM8K: every worked solution ("... #### N") graded against its reference number;
* HumanEval: every canonical solution (prompt + completion) and a wrong one (``return None``)
  run in the sandbox;
* MBPP: every reference program against its ``test_list``; every failure listed;
* MATH: every reference solution graded against its own last ``\\boxed{}`` answer; every
  failure and math-verify exception listed;
* recorded outputs (GSM8K, MATH level 5): our grade of every shipped ZeroEval output against
  the ``correct`` of ZeroEval's own scorer (first number of the JSON answer field), per model,
  as a markdown table;
* the sandbox's cost of one trivial sample.

    .venv/bin/python experiments/grader_references.py            # ~3 min on 2 cores
    .venv/bin/python experiments/grader_references.py --quick    # no MATH recorded outputs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

import inframind_ray
from inframind_ray.grading import grade, isolation, run_python
from inframind_ray.grading.final_answer import boxed_contents

TASKS = Path(inframind_ray.__file__).parent / "data" / "tasks"


def rows(family: str, name: str = "items") -> list[dict]:
    """The rows of one shipped task file."""
    return pq.read_table(TASKS / family / f"{name}.parquet").to_pylist()


def run_all(family: str, pairs: list[tuple[str, dict]], workers: int) -> list:
    """Grades of (response, item) pairs, ``workers`` at a time."""
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda p: grade(family, p[0], p[1]), pairs))


def agreement_table(family: str, every: int) -> str:
    """Markdown: per model, our accuracy, ZeroEval's, and how often the two agree."""
    ref = {r["item_id"]: r for r in rows(family)}
    recorded = [r for r in rows(family, "recorded_outputs") if r["item_id"] % every == 0]
    per: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for r in recorded:
        ours = grade(family, r["output"], ref[r["item_id"]]).correct
        per[r["model"]].append((ours, bool(r["correct"])))
    lines = [f"{family}: {len(recorded)} recorded outputs"
             + (f" (items with id % {every} == 0)" if every > 1 else ""),
             "", "| model | outputs | ZeroEval acc | our acc | agreement | only ours correct "
             "| only ZeroEval correct |", "|---|---:|---:|---:|---:|---:|---:|"]
    for model in sorted(per):
        v = per[model]
        n = len(v)
        lines.append(
            f"| {model} | {n} | {sum(z for _, z in v) / n:.3f} | {sum(o for o, _ in v) / n:.3f} "
            f"| {sum(o == z for o, z in v) / n:.4f} | {sum(o and not z for o, z in v)} "
            f"| {sum(z and not o for o, z in v)} |")
    agree = [sum(o == z for o, z in v) / len(v) for v in per.values()]
    lines.append(f"\nlowest per-model agreement: {min(agree):.4f}")
    return "\n".join(lines)


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="sandbox runs at a time")
    ap.add_argument("--quick", action="store_true", help="skip the MATH recorded outputs")
    args = ap.parse_args()
    print(f"sandbox isolation: {isolation()}")
    cost = []
    for _ in range(20):
        t = time.perf_counter()
        run_python("pass\n")
        cost.append(time.perf_counter() - t)
    print(f"sandbox: one trivial sample takes {statistics.median(cost) * 1e3:.0f} ms "
          f"(median of 20; min {min(cost) * 1e3:.0f} ms)\n")

    gsm = rows("gsm8k")
    g = [grade("gsm8k", r["solution"], r) for r in gsm]
    print(f"GSM8K: {sum(x.correct for x in g)}/{len(gsm)} reference solutions grade correct")
    for r, x in zip(gsm, g, strict=True):
        if not x.correct:
            print(f"  item {r['item_id']}: {x.detail}")

    for family, wrong in (("humaneval", "    return None\n"), ("mbpp", None)):
        items = rows(family)
        t = time.monotonic()
        res = run_all(family, [(r["reference"], r) for r in items], args.workers)
        took = time.monotonic() - t
        fails = [(r["item_id"], x.detail) for r, x in zip(items, res, strict=True)
                 if not x.correct]
        print(f"{family}: {len(items) - len(fails)}/{len(items)} reference programs pass "
              f"({took:.1f} s, {args.workers} workers); failing: {[i for i, _ in fails]}")
        for i, why in fails:
            print(f"  item {i}: {why}")
        if wrong:
            bad = run_all(family, [(wrong, r) for r in items], args.workers)
            print(f"{family}: {sum(x.correct for x in bad)}/{len(items)} pass with the body "
                  f"{wrong.strip()!r}")

    sols = rows("math", "reference_solutions")
    t = time.monotonic()
    fails = []
    for r in sols:
        boxed = boxed_contents(r["solution"])
        if not boxed:
            fails.append((r["ref_id"], "no \\boxed{} in the solution"))
            continue
        x = grade("math", r["solution"], {"reference": boxed[-1][1]})
        if not x.correct:
            fails.append((r["ref_id"], x.detail))
    ok = len(sols) - len(fails)
    print(f"\nMATH: {ok}/{len(sols)} = {ok / len(sols):.4f} reference solutions grade correct "
          f"against their own last \\boxed{{}} ({time.monotonic() - t:.1f} s); failures and "
          f"exceptions: {fails or 'none'}\n")

    print(agreement_table("gsm8k", 1) + "\n")
    if not args.quick:
        print(agreement_table("math", 1))


if __name__ == "__main__":
    main()
