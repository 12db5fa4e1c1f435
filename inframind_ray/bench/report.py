"""Write a sweep's results: results.json, Parquet records, PNG plots, and a rich table."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from rich.table import Table  # noqa: E402

from inframind_ray import assumptions as A  # noqa: E402
from inframind_ray.bench.runner import CellResult  # noqa: E402
from inframind_ray.bench.sweep import SweepSpec  # noqa: E402

ROW_KEYS = ("policy", "scheduling", "controller", "rate_per_min", "load_factor", "n_queries",
            "goodput", "accuracy", "slo_attainment", "latency_mean_s", "latency_p95_s",
            "latency_p99_s", "model_mix", "strategy_mix", "topology_mix")


def results_json(spec: SweepSpec, results: list[CellResult], wall_s: float,
                 capacity: dict | None = None) -> dict:
    """The results document: meta (with the capacity measurement that turned load factors into
    rates, if any) + one row per (scheduling, policy, rate)."""
    rows = []
    for r in results:
        s = r.summary
        rows.append({**{k: s[k] for k in ROW_KEYS},
                     **{k: s[k] for k in s if k not in ROW_KEYS}})
    return {
        "meta": {
            "engine": "twin",
            "pool": spec.pool_source,
            "pool_config": spec.pool.model_dump(),
            "seed": spec.seed,
            "split": spec.split,
            "arrivals": spec.arrivals,
            "scheduling": list(spec.schedulings),
            "controller": list(spec.controllers),
            "checkpoint": spec.checkpoint,  # of 'inframind' (None: the shipped policy)
            "on_deadline": spec.pool.engine.on_deadline,
            "metrics_period_s": spec.metrics_period_s,
            "pool_history": spec.pool_history,
            "deadlines": spec.deadlines,
            "budget_distribution": f"uniform({spec.budget_range_s[0]}, {spec.budget_range_s[1]}) s",
            "queries_per_cell": spec.n_queries,
            "duration_s": spec.duration_s,
            "capacity": capacity,
            "tasks": {t: round(s, 4) for t, s in spec.tasks},
            "wall_s": round(wall_s, 3),
            "simulated_s": round(sum(r.simulated_s for r in results), 3),
            "assumptions": "inframind_ray/assumptions.py",
            "tokens_per_word": A.TOKENS_PER_WORD,
        },
        "rows": rows,
    }


def write_outputs(out: Path, spec: SweepSpec, results: list[CellResult], wall_s: float,
                  capacity: dict | None = None) -> dict:
    """results.json, queries.parquet, calls.parquet, queue.parquet and plots under ``out``; with
    several schedulings also scheduling.png, scheduling.md (tables) and, in results.json, the
    load each sustains at a latency over the first listed one's (``bench.scheduling``); with the
    controller on and off, controller.png and controller.md (``bench.controller_report``)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = results_json(spec, results, wall_s, capacity)
    if len(spec.schedulings) > 1:
        from inframind_ray.bench.scheduling import markdown, plot_schedulings, speedups

        doc["sustained_load"] = speedups(doc, spec.schedulings[0])
        plot_schedulings(out, doc)
        (out / "scheduling.md").write_text(markdown(doc))
    (out / "results.json").write_text(json.dumps(doc, indent=2))  # first: the run is kept
    if {"on", "off"} <= set(spec.controllers):
        from inframind_ray.bench import controller_report

        controller_report.plot(out, doc)
        (out / "controller.md").write_text(controller_report.markdown(doc))
    pq.write_table(pa.Table.from_pylist([q for r in results for q in r.queries]),
                   out / "queries.parquet")
    pq.write_table(pa.Table.from_pylist([c for r in results for c in r.calls]),
                   out / "calls.parquet")
    pq.write_table(pa.Table.from_pylist([
        {"policy": r.spec.policy, "scheduling": r.spec.scheduling,
         "rate_per_min": r.spec.workload.rate_per_min, "model": m,
         "t_s": t, "waiting": w, "running": n}
        for r in results for m, s in r.queue.items() for t, w, n in s]), out / "queue.parquet")
    plot_all(out, doc, results)
    return doc


def series(policy: str, scheduling: str | None, rows: list[dict],
           controller: str | None = None) -> str:
    """A row's line in plots and tables: its policy, and its scheduling (controller) when the
    rows have several."""
    out = f"{policy} · {scheduling}" if len({r["scheduling"] for r in rows}) > 1 else policy
    if len({r.get("controller") for r in rows}) > 1:
        out += f" · controller {controller}"
    return out


def _series(r: dict, rows: list[dict]) -> str:
    return series(r["policy"], r["scheduling"], rows, r.get("controller"))


def plot_all(out: Path, doc: dict, results: list[CellResult]) -> None:
    """goodput.png, latency_cdf.png, queue_depth.png, mix.png."""
    rows = doc["rows"]
    policies = list(dict.fromkeys(_series(r, rows) for r in rows))
    rates = sorted({r["rate_per_min"] for r in rows})
    by_load = all(r.get("load_factor") is not None for r in rows)
    xkey = "load_factor" if by_load else "rate_per_min"

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for p in policies:
        pr = sorted((r for r in rows if _series(r, rows) == p), key=lambda r: r["rate_per_min"])
        x = [r[xkey] for r in pr]
        style = "--" if p == "oracle" else "-"
        axes[0].plot(x, [r["goodput"] for r in pr], style, marker="o", label=p)
        axes[1].plot(x, [r["slo_attainment"] for r in pr], style, marker="o", label=p)
    cap = (doc["meta"].get("capacity") or {}).get("capacity_rpm")
    xlabel = (f"load factor (x capacity {cap:g} req/min)" if by_load
              else "arrival rate (req/min)")
    for ax, t in zip(axes, ("goodput (correct within budget)", "SLO attainment"), strict=True):
        ax.set_xlabel(xlabel)
        ax.set_title(t)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.02)
    axes[1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / "goodput.png", dpi=110)
    plt.close(fig)

    show = [rates[0], rates[-1]] if len(rates) > 1 else rates
    fig, axes = plt.subplots(1, len(show), figsize=(6 * len(show), 4.5), squeeze=False)
    for ax, rate in zip(axes[0], show, strict=True):
        for r in results:
            if r.spec.workload.rate_per_min != rate:
                continue
            lat = np.sort([q["latency_s"] for q in r.queries if q["status"] != "timed_out"])
            if len(lat):
                ax.plot(lat, np.arange(1, len(lat) + 1) / len(r.queries),
                        label=series(r.spec.policy, r.spec.scheduling, rows, r.spec.controller))
        ax.set_xscale("log")
        ax.set_xlabel("query latency (s, log)")
        ax.set_ylabel("fraction of queries")
        ax.set_title(f"latency CDF at {rate:g} req/min")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency_cdf.png", dpi=110)
    plt.close(fig)

    top = rates[-1]
    cells = [r for r in results if r.spec.workload.rate_per_min == top]
    ncol = min(4, len(cells))
    nrow = -(-len(cells) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.5 * ncol, 3.2 * nrow), squeeze=False,
                             sharey=True)
    for ax, r in zip(axes.flat, cells, strict=False):
        for m, s in r.queue.items():
            ax.plot([t for t, _, _ in s], [w for _, w, _ in s], label=m, lw=1)
        ax.set_title(f"{series(r.spec.policy, r.spec.scheduling, rows, r.spec.controller)} "
                     f"@ {top:g} req/min",
                     fontsize=9)
        ax.set_xlabel("simulated time (s)")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(cells):]:
        ax.axis("off")
    axes[0][0].set_ylabel("waiting requests")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "queue_depth.png", dpi=110)
    plt.close(fig)

    keys = ("model_mix", "strategy_mix", "topology_mix")
    palette = plt.get_cmap("tab10").colors
    colors = {key: {c: palette[n % 10] for n, c in enumerate(sorted({k for r in rows
                                                                     for k in r[key]}))}
              for key in keys}
    fig, axes = plt.subplots(len(policies), 3, figsize=(14, 2.2 * len(policies)), squeeze=False)
    for i, p in enumerate(policies):
        pr = sorted((r for r in rows if _series(r, rows) == p), key=lambda r: r["rate_per_min"])
        for j, key in enumerate(keys):
            ax = axes[i][j]
            cats = list(colors[key])
            bottom = np.zeros(len(pr))
            x = np.arange(len(pr))
            for c in cats:
                v = np.array([r[key].get(c, 0.0) for r in pr])
                ax.bar(x, v, bottom=bottom, label=c, color=colors[key][c])
                bottom += v
            ax.set_xticks(x, [f"{r[xkey]:g}" for r in pr], fontsize=7)
            ax.set_ylim(0, 1)
            if i == 0:
                ax.set_title(key.replace("_", " ") + (" per load factor" if by_load
                                                      else " per rate (req/min)"))
            if j == 0:
                ax.set_ylabel(p, fontsize=8)
            if i == 0:
                ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out / "mix.png", dpi=100)
    plt.close(fig)


def task_table(doc: dict) -> Table:
    """Per task family and policy: accuracy at the lowest rate, SLO attainment and goodput at
    the highest (the papers' table shape)."""
    rows = doc["rows"]
    lo = min(r["rate_per_min"] for r in rows)
    hi = max(r["rate_per_min"] for r in rows)
    tasks = list(dict.fromkeys(t for r in rows for t in r.get("by_task", {})))
    t = Table(title=f"per task family: accuracy at {lo:g} req/min | SLO and goodput at {hi:g}")
    t.add_column("policy")
    for name in tasks:
        t.add_column(f"{name} acc", justify="right")
        t.add_column(f"{name} SLO", justify="right")
        t.add_column(f"{name} good", justify="right")
    for p in dict.fromkeys(_series(r, rows) for r in rows):
        low = next(r for r in rows if _series(r, rows) == p and r["rate_per_min"] == lo)
        high = next(r for r in rows if _series(r, rows) == p and r["rate_per_min"] == hi)
        cells = []
        for name in tasks:
            a, b = low["by_task"].get(name), high["by_task"].get(name)
            cells += [f"{a['accuracy']:.3f}" if a else "-",
                      f"{b['slo_attainment']:.3f}" if b else "-",
                      f"{b['goodput']:.3f}" if b else "-"]
        t.add_row(p, *cells)
    return t


def table(doc: dict) -> Table:
    """The printed summary."""
    t = Table(title=f"twin bench: pool={doc['meta']['pool']} split={doc['meta']['split']} "
                    f"seed={doc['meta']['seed']}")
    by_load = any(r.get("load_factor") is not None for r in doc["rows"])
    ctl = len({r.get("controller") for r in doc["rows"]}) > 1
    for col in ("policy", "scheduling", *(("controller",) if ctl else ()), "rate/min",
                *(("load",) if by_load else ()), "queries", "goodput", "accuracy", "SLO",
                "lat mean", "p95", "p99", "calls/q", "timed out"):
        t.add_column(col, justify="right" if col not in ("policy", "scheduling", "controller")
                     else "left")
    for r in doc["rows"]:
        t.add_row(r["policy"], r["scheduling"], *((r["controller"],) if ctl else ()),
                  f"{r['rate_per_min']:g}",
                  *((f"{r['load_factor']:g}",) if by_load else ()), str(r["n_queries"]),
                  f"{r['goodput']:.3f}",
                  f"{r['accuracy']:.3f}", f"{r['slo_attainment']:.3f}",
                  f"{r['latency_mean_s']:.1f}" if r["latency_mean_s"] is not None else "-",
                  f"{r['latency_p95_s']:.1f}", f"{r['latency_p99_s']:.1f}",
                  f"{r['calls_per_query']:.2f}", str(r["timed_out"]))
    return t
