"""Markdown tables of docs/pools.md: each pool's capacity (from `inframind capacity --out` files)
and a load-factor bench (results.json of `inframind bench --load-factors`).

    .venv/bin/python experiments/pools_report.py capacity docs/pools/capacity/*.json
    .venv/bin/python experiments/pools_report.py bench docs/pools/bench-default/results.json
    .venv/bin/python experiments/pools_report.py bench A/results.json B/results.json  # joined

Several bench files are joined row by row (the same pool, capacity, cell duration and seed:
cells are independent seeded simulations, so a policy run in a second command gets the very
cells it would have got in the first); ``inframind`` rows of a run with ``--checkpoint`` are
labelled ``inframind[<checkpoint folder>]``. The ``targets`` lines check issue 19's per-policy
targets for every learned or teacher policy against the baselines in the table.
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


TASK_ONLY = ("always-strongest", "static-task", "moa")
BASELINES = (*TASK_ONLY, "infra-heuristic")


def _rows(paths: list[Path]) -> tuple[list[dict], dict]:
    """Rows of several bench results (labelled by checkpoint) and the first one's meta."""
    rows, meta = [], None
    for path in paths:
        d = json.loads(path.read_text())
        m = d["meta"]
        if meta is not None and (m["capacity"]["capacity_rpm"], m["duration_s"], m["seed"],
                                 m.get("pool")) != (meta["capacity"]["capacity_rpm"],
                                                    meta["duration_s"], meta["seed"],
                                                    meta.get("pool")):
            raise SystemExit(f"error: {path}: another pool, capacity, duration or seed")
        meta = meta or m
        ckpt = m.get("checkpoint")
        for r in d["rows"]:
            if r["policy"] == "inframind" and ckpt:
                r = {**r, "policy": f"inframind[{Path(ckpt).parent.name or ckpt}]"}
            rows.append(r)
    return rows, meta


def targets(rows: list[dict], policy: str) -> list[str]:
    """Issue 19's targets for ``policy`` against the baselines present."""
    get = {(r["policy"], r["load_factor"]): r for r in rows}
    factors = sorted({r["load_factor"] for r in rows})
    base = [b for b in BASELINES if (b, factors[0]) in get]
    out = []
    worse = [(f, b) for f in factors for b in base
             if get[policy, f]["goodput"] < get[b, f]["goodput"]]
    out.append("goodput >= every baseline at every load: "
               + ("holds" if not worse else "misses at " + ", ".join(
                   f"x{f:.3g} ({b} {get[b, f]['goodput']:.3f} > {get[policy, f]['goodput']:.3f})"
                   for f, b in worse)))
    ratios = []
    for f in factors:
        best = max((b for b in TASK_ONLY if (b, f) in get), key=lambda b: get[b, f]["goodput"])
        fallen = [f2 for f2 in factors if f2 <= f
                  and get[best, f2]["slo_attainment"] < 0.5]
        if fallen:
            g = get[best, f]["goodput"]
            ratios.append(f"x{f:.3g} {get[policy, f]['goodput'] / g if g else float('inf'):.2f}x "
                          f"{best}")
    out.append(">= 1.5x the best task-only baseline once it is below 50 % SLO: "
               + ("; ".join(ratios) or "no load where it is"))
    idle = factors[0]
    gap = get["always-strongest", idle]["accuracy"] - get[policy, idle]["accuracy"]
    out.append(f"accuracy at x{idle:.3g}: {get[policy, idle]['accuracy']:.3f} against "
               f"always-strongest {get['always-strongest', idle]['accuracy']:.3f} "
               f"({-gap * 100:+.1f} pp)")
    used = [f"x{f:.3g} {sum(v >= 0.05 for v in get[policy, f]['model_mix'].values())}"
            for f in factors]
    out.append("models used >= 5 % of calls: " + ", ".join(used))
    return out


def bench_table(paths: list[Path]) -> str:
    """Goodput, SLO attainment and model mix per (policy, load factor), then the targets."""
    rows, meta = _rows(paths)
    factors = sorted({r["load_factor"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    get = {(r["policy"], r["load_factor"]): r for r in rows}
    cap = meta["capacity"]["capacity_rpm"]
    rates = {f: next(r["rate_per_min"] for r in rows if r["load_factor"] == f) for f in factors}
    head = ("| policy | " + " | ".join(f"x{f:.3g} ({rates[f]:.0f}/min)" for f in factors) + " |")
    out = [f"capacity {cap:g} req/min, {meta['duration_s']:g} s cells, seed "
           f"{meta['seed']}; goodput (SLO attainment)", "", head,
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
    if all(("always-strongest", f) in get for f in factors):
        for p in policies:
            if p.startswith(("inframind", "priced-topology")):
                out += ["", f"targets, {p}:", *(f"- {t}" for t in targets(rows, p))]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("what", choices=("capacity", "bench"))
    ap.add_argument("paths", nargs="+", type=Path)
    a = ap.parse_args()
    print(capacity_table(a.paths) if a.what == "capacity" else bench_table(a.paths))


if __name__ == "__main__":
    main()
