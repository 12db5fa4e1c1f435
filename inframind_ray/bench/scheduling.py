"""Queue orders side by side (``bench --scheduling fcfs,edf,plas,atlas``): per policy, goodput,
SLO attainment and mean / p99 query latency against the offered load, one line per scheduling
(``scheduling.png``), and the load each order sustains at a given latency, over a baseline order's
(the shape of Autellix's "throughput at the same latency")."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.table import Table  # noqa: E402

PANELS = (("goodput", "goodput"), ("slo_attainment", "SLO attainment"),
          ("latency_mean_s", "mean latency (s)"), ("latency_p99_s", "p99 latency (s)"))
LATENCY_MULTIPLES = (2.0, 5.0)
"""Latency targets of the sustained-load comparison: these multiples of the baseline order's
mean latency at the lowest load of the sweep."""


def _x(rows: list[dict]) -> str:
    return "load_factor" if all(r.get("load_factor") is not None for r in rows) else (
        "rate_per_min")


def plot_schedulings(out: Path, doc: dict) -> None:
    """scheduling.png: a row of four panels per policy, a line per scheduling."""
    rows = doc["rows"]
    xkey = _x(rows)
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    scheds = list(dict.fromkeys(r["scheduling"] for r in rows))
    fig, axes = plt.subplots(len(policies), 4, figsize=(17, 3.6 * len(policies)), squeeze=False)
    for i, p in enumerate(policies):
        for s in scheds:
            pr = sorted((r for r in rows if r["policy"] == p and r["scheduling"] == s),
                        key=lambda r: r["rate_per_min"])
            x = [r[xkey] for r in pr]
            for j, (key, _) in enumerate(PANELS):
                y = [math.nan if r[key] is None or not math.isfinite(r[key]) else r[key]
                     for r in pr]
                axes[i][j].plot(x, y, marker="o", label=s)
        for j, (key, title) in enumerate(PANELS):
            ax = axes[i][j]
            ax.set_title(f"{p}: {title}", fontsize=10)
            ax.set_xlabel("load (x capacity)" if xkey == "load_factor" else "req/min")
            ax.grid(alpha=0.3)
            if key.startswith("latency"):
                ax.set_yscale("log")
            else:
                ax.set_ylim(0, 1.02)
        axes[i][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scheduling.png", dpi=100)
    plt.close(fig)


def sustained_load(rows: list[dict], target_s: float, key: str = "latency_mean_s"
                   ) -> float | None:
    """The highest load (the rows' x) whose ``key`` latency stays within ``target_s``,
    interpolated linearly between the last load within it and the next; None if even the lowest
    exceeds it; the highest load of the sweep if none does (a lower bound)."""
    xkey = _x(rows)
    pts = sorted((r[xkey], r[key]) for r in rows)
    prev = None
    for x, y in pts:
        y = math.inf if y is None else y
        if y > target_s:
            if prev is None:
                return None
            (x0, y0) = prev
            return x0 + (x - x0) * (target_s - y0) / (y - y0) if math.isfinite(y) else x0
        prev = (x, y)
    return pts[-1][0]


def speedups(doc: dict, baseline: str = "fcfs", key: str = "latency_mean_s") -> list[dict]:
    """Per policy, scheduling and latency target (``LATENCY_MULTIPLES`` x the baseline's latency
    at the lowest load): the load sustained within it, and its ratio to the baseline's."""
    rows, out = doc["rows"], []
    for p in dict.fromkeys(r["policy"] for r in rows):
        base = [r for r in rows if r["policy"] == p and r["scheduling"] == baseline]
        if not base:
            continue
        lowest = min(base, key=lambda r: r["rate_per_min"])[key]
        for m in LATENCY_MULTIPLES:
            target = m * lowest
            ref = sustained_load(base, target, key)
            for s in dict.fromkeys(r["scheduling"] for r in rows):
                got = sustained_load([r for r in rows if r["policy"] == p
                                      and r["scheduling"] == s], target, key)
                out.append({"policy": p, "scheduling": s, "latency": key, "target_s": target,
                            "sustained": got, "ratio": None if not (got and ref) else got / ref})
    return out


def speedup_table(items: list[dict], baseline: str = "fcfs") -> Table:
    """The printed sustained-load comparison."""
    t = Table(title=f"load sustained within a mean-latency target, over {baseline}'s")
    for c in ("policy", "scheduling", "target s", "sustained", "ratio"):
        t.add_column(c, justify="left" if c in ("policy", "scheduling") else "right")
    for it in items:
        t.add_row(it["policy"], it["scheduling"], f"{it['target_s']:.1f}",
                  "-" if it["sustained"] is None else f"{it['sustained']:.3g}",
                  "-" if it["ratio"] is None else f"{it['ratio']:.2f}x")
    return t


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, fmt)


def markdown(doc: dict) -> str:
    """scheduling.md: per policy, a row per (load, scheduling) with goodput, SLO attainment,
    mean / p99 latency and calls per query; then the sustained-load comparison."""
    rows, xkey = doc["rows"], _x(doc["rows"])
    lines = []
    for p in dict.fromkeys(r["policy"] for r in rows):
        lines += [f"**{p}**", "",
                  "| load | req/min | scheduling | goodput | SLO | mean s | p99 s | calls/q |"
                  " timed out |", "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted((r for r in rows if r["policy"] == p),
                        key=lambda r: (r["rate_per_min"], 0)):
            load = _f(r.get("load_factor"), "g") if xkey == "load_factor" else "-"
            lines.append(f"| {load} | {r['rate_per_min']:g} | {r['scheduling']} | "
                         f"{r['goodput']:.3f} | {r['slo_attainment']:.3f} | "
                         f"{_f(r['latency_mean_s'], '.1f')} | {_f(r['latency_p99_s'], '.1f')} | "
                         f"{r['calls_per_query']:.2f} | {r['timed_out']} |")
        lines.append("")
    if doc.get("sustained_load"):
        lines += ["| policy | scheduling | mean-latency target s | load sustained | ratio |",
                  "|---|---|---|---|---|"]
        for it in doc["sustained_load"]:
            lines.append(f"| {it['policy']} | {it['scheduling']} | {it['target_s']:.1f} | "
                         f"{_f(it['sustained'], '.3g')} | "
                         f"{'-' if it['ratio'] is None else format(it['ratio'], '.2f') + 'x'} |")
        lines.append("")
    return "\n".join(lines)


def rewrite(results_json: Path) -> None:
    """Redo scheduling.png, scheduling.md and the sustained-load rows of a results.json in its
    folder (a sweep written before they existed, or re-plotting without re-running), with its
    first scheduling as the baseline."""
    import json

    doc = json.loads(results_json.read_text())
    scheds = list(dict.fromkeys(r["scheduling"] for r in doc["rows"]))
    doc["sustained_load"] = speedups(doc, scheds[0])
    plot_schedulings(results_json.parent, doc)
    (results_json.parent / "scheduling.md").write_text(markdown(doc))
    results_json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        rewrite(Path(arg))
