"""Markdown tables of docs/pools.md: each pool's capacity (from `inframind capacity --out` files)
and a load-factor bench (results.json of `inframind bench --load-factors`).

    .venv/bin/python experiments/pools_report.py capacity docs/pools/capacity/*.json
    .venv/bin/python experiments/pools_report.py bench docs/pools/bench-default/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def capacity_table(paths: list[Path]) -> str:
    """One row per (pool, workload): capacity, bracket, probes, best baseline at the bracket."""
    rows = ["| pool | workload | cell s | capacity req/min | bracket | probes | at the low end | "
            "at the high end |", "|---|---|---:|---:|---|---:|---|---|"]
    for p in sorted(paths):
        d = json.loads(p.read_text())
        lo, hi = d["bracket_rpm"]
        at = {round(x["rate_per_min"], 3): x for x in d["probes"]}

        def best(rate: float, at=at) -> str:
            x = at[round(rate, 3)]["slo_attainment"]
            k = max(x, key=x.get)
            return f"{k} {x[k]:.3f}"

        work = "MMLU-Pro" if list(d["tasks"]) == ["mmlu_pro"] else "mixed"
        rows.append(f"| {d['pool']} | {work} | {d['duration_s']:g} | {d['capacity_rpm']:.0f} | "
                    f"{lo:.0f}-{hi:.0f} | {len(d['probes'])} | {best(lo)} | {best(hi)} |")
    return "\n".join(rows)


def bench_table(path: Path) -> str:
    """Goodput, SLO attainment, accuracy and model mix per (policy, load factor)."""
    d = json.loads(path.read_text())
    rows = d["rows"]
    factors = sorted({r["load_factor"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    get = {(r["policy"], r["load_factor"]): r for r in rows}
    cap = d["meta"]["capacity"]["capacity_rpm"]
    rates = {f: next(r["rate_per_min"] for r in rows if r["load_factor"] == f) for f in factors}
    head = ("| policy | " + " | ".join(f"x{f:g} ({rates[f]:.0f}/min)" for f in factors) + " |")
    out = [f"capacity {cap:g} req/min, {d['meta']['duration_s']:g} s cells, seed "
           f"{d['meta']['seed']}; goodput (SLO attainment)", "", head,
           "|---|" + "---:|" * len(factors)]
    for p in policies:
        out.append(f"| {p} | " + " | ".join(
            f"{get[p, f]['goodput']:.3f} ({get[p, f]['slo_attainment']:.2f})" for f in factors)
            + " |")
    out += ["", "model mix of the calls (share of the largest model; models used >= 5 %)", "",
            head, "|---|" + "---:|" * len(factors)]
    for p in policies:
        cells = []
        for f in factors:
            mix = get[p, f]["model_mix"]
            cells.append(", ".join(f"{m} {v:.2f}" for m, v in sorted(mix.items(),
                                                                     key=lambda kv: -kv[1])
                                   if v >= 0.05))
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("what", choices=("capacity", "bench"))
    ap.add_argument("paths", nargs="+", type=Path)
    a = ap.parse_args()
    print(capacity_table(a.paths) if a.what == "capacity" else bench_table(a.paths[0]))


if __name__ == "__main__":
    main()
