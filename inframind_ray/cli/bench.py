"""Commands of the twin plane: the benchmark sweep, predictors fitted on its telemetry, the
shipped pools, and the item embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.bench.sweep import DEFAULT_POLICIES, DEFAULT_QUERIES, DEFAULT_RATES, SweepSpec
from inframind_ray.cli.common import budget_range, console, floats, listed
from inframind_ray.errors import ConfigError


def bench(
    engine: Annotated[str, typer.Option(help="engine: twin (simulated pool)")] = "twin",
    pool: Annotated[str, typer.Option(help="pool YAML path or shipped pool name")] = "default",
    rates: Annotated[str, typer.Option(help="arrival rates, req/min, comma-separated")] = listed(
        DEFAULT_RATES),
    arrivals: Annotated[str, typer.Option(
        help="poisson, or trace:NAME (azure_conv, azure_code, mooncake_conv)")] = (
        SweepSpec.arrivals),
    policies: Annotated[str, typer.Option(help="comma-separated policy names")] = listed(
        DEFAULT_POLICIES),
    queries: Annotated[int, typer.Option(help="queries per (policy, rate) cell")] = (
        DEFAULT_QUERIES),
    seed: Annotated[int, typer.Option(help="seed of items, budgets and arrivals")] = (
        SweepSpec.seed),
    split: Annotated[str, typer.Option(help="item split: test (default), val, train")] = (
        SweepSpec.split),
    tasks: Annotated[str, typer.Option(
        help="task families, comma-separated (mmlu_pro, gsm8k, math, humaneval, mbpp); equal "
             "shares unless --mix gives them")] = "mmlu_pro",
    mix: Annotated[str | None, typer.Option(
        help="shares of the families, e.g. gsm8k=0.4,mmlu_pro=0.3,math=0.1,humaneval=0.1,"
             "mbpp=0.1 (a family without '=' takes an equal part of the rest); replaces "
             "--tasks")] = None,
    budget: Annotated[str, typer.Option(help="latency budget range MIN,MAX in seconds")] = (
        listed(SweepSpec.budget_range_s)),
    scheduling: Annotated[str, typer.Option(help="pool | edf | fcfs (override the pool)")] = (
        "pool"),
    jobs: Annotated[int, typer.Option(help="parallel processes (0 = all cores)")] = 0,
    checkpoint: Annotated[Path | None, typer.Option(
        help="learned-policy checkpoint for 'inframind' (default: the shipped policy)")] = None,
    metrics_period: Annotated[float, typer.Option(
        help="policies read load snapshots refreshed every this many simulated seconds, as "
             "served (0 = fresh at every decision)")] = SweepSpec.metrics_period_s,
    pool_history: Annotated[bool, typer.Option(
        help="start every model with the latency EWMAs of a past load, as a served pool that "
             "has run before (default: a fresh pool, idle models report zero latency)")] = (
        SweepSpec.pool_history),
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/bench"),
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Compare routing policies on the twin over a sweep of arrival rates.

    Writes OUT/results.json, OUT/queries.parquet, OUT/calls.parquet, OUT/queue.parquet and plots
    (goodput.png, latency_cdf.png, queue_depth.png, mix.png), and prints a table.
    """
    from inframind_ray.bench.report import table, write_outputs
    from inframind_ray.bench.sweep import run_sweep
    from inframind_ray.config import load_pool
    from inframind_ray.policy.baselines import POLICIES
    from inframind_ray.tasks.registry import parse_mix

    if engine != "twin":
        raise ConfigError("engine", f"{engine!r} is not available for bench; use twin")
    rate_vals = floats(rates, "rates")
    bad = [r for r in rate_vals if not r > 0]
    if bad:
        raise ConfigError("rates", f"every rate must be > 0 req/min, got {bad[0]:g}")
    pols = tuple(p.strip() for p in policies.split(",") if p.strip())
    if not pols:
        raise ConfigError("policies", "is empty")
    unknown = [p for p in pols if p not in POLICIES]
    if unknown:
        raise ConfigError("policies", f"unknown policy {unknown[0]!r}; known: "
                          f"{', '.join(POLICIES)}")
    lohi = budget_range(budget)
    if scheduling not in ("pool", "edf", "fcfs"):
        raise ConfigError("scheduling", f"must be pool, edf or fcfs, got {scheduling!r}")
    if not metrics_period >= 0:
        raise ConfigError("metrics-period", f"must be >= 0 seconds, got {metrics_period:g}")
    shares = parse_mix(mix if mix is not None else tasks)
    cfg = load_pool(pool)
    _check_records(cfg, shares)
    if "inframind" in pols:  # fail here, in one line, not inside a worker
        from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
        from inframind_ray.pools.cards import build_pool_info

        LearnedPolicy.load(checkpoint or DEFAULT_CHECKPOINT, build_pool_info(cfg))
    if "inframind-v1" in pols:  # the previous, positional policy: its own pool only
        from inframind_ray.policy.positional import V1_CHECKPOINT, PositionalPolicy
        from inframind_ray.pools.cards import build_pool_info

        PositionalPolicy.load(V1_CHECKPOINT, build_pool_info(cfg))
    spec = SweepSpec(cfg, str(pool), pols, rate_vals, queries, arrivals, split,
                     lohi, seed, None if scheduling == "pool" else scheduling,
                     str(checkpoint) if checkpoint else None, metrics_period, pool_history,
                     tuple(shares.items()))
    results, wall = run_sweep(spec, jobs or None, progress)
    doc = write_outputs(out, spec, results, wall)
    console.print(table(doc))
    if len(shares) > 1:
        from inframind_ray.bench.report import task_table

        console.print(task_table(doc))
    sim = doc["meta"]["simulated_s"]
    console.print(f"wrote {out}/results.json, Parquet records and plots; {len(results)} cells, "
                  f"{sim:.0f} simulated s in {wall:.1f} wall s")


def _check_records(cfg, shares: dict[str, float]) -> None:  # noqa: ANN001 - a PoolConfig
    """Every pool model replays (its own or a stand-in's) records of every family asked for."""
    for t in shares:
        missing = [m.name for m in cfg.models if m.recorded_for(t) is None]
        if missing:
            raise ConfigError("tasks", f"no recorded {t} answers for pool model(s) "
                              f"{', '.join(missing)}; name a stand-in in the pool file "
                              f"(stand_ins: {{{t}: MODEL}})")


def predictors(
    calls: Annotated[Path, typer.Option(help="telemetry to fit on: calls.parquet of an "
                                        "`inframind bench` run (e.g. --split train)")],
    eval_calls: Annotated[Path, typer.Option("--eval", help="held-out telemetry to report the "
                                             "error on (a run on other items, e.g. --split val)")],
    pool: Annotated[str, typer.Option(help="pool YAML path or shipped pool name")] = "default",
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/predictors"),
) -> None:
    """Fit latency and output-length predictors on recorded call telemetry (Parquet) and report
    their error, next to the analytic price list's, on held-out rows.

    Writes OUT/predictors.json (JSON, no pickles) and OUT/report.json, and prints a table.
    """
    import json

    from rich.table import Table

    from inframind_ray.config import load_pool
    from inframind_ray.policy import predictors as P
    from inframind_ray.pools.cards import build_pool_info

    cfg = load_pool(pool)
    info = build_pool_info(cfg)
    train, held = P.read_calls(calls, info), P.read_calls(eval_calls, info)
    pred = P.fit(train, info)
    report = {"fit_rows": len(train), "fit_file": str(calls), "eval_file": str(eval_calls),
              **P.evaluate(pred, held, info)}
    out.mkdir(parents=True, exist_ok=True)
    pred.save(out / "predictors.json")
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    tab = Table(title=f"held-out error |predicted - actual| / actual ({len(held)} calls)")
    for col in ("what", "n", "analytic med", "analytic p90", "fitted med", "fitted p90"):
        tab.add_column(col, justify="left" if col == "what" else "right")
    for kind in ("latency", "length"):
        for name, r in report[kind].items():
            tab.add_row(f"{kind} {name}", str(r["n"]),
                        *(f"{100 * r[w][q]:.1f} %" for w in ("analytic", "fitted")
                          for q in ("median", "p90")))
    console.print(tab)
    console.print(f"wrote {out}/predictors.json and {out}/report.json "
                  f"(fitted on {len(train)} calls)")


def pools() -> None:
    """List the shipped pools and their models."""
    from inframind_ray.config import POOLS_DIR, load_pool
    from inframind_ray.data import TASK_FAMILIES
    from inframind_ray.pools.hardware import derive_hardware

    for path in sorted(POOLS_DIR.glob("*.yaml")):
        cfg = load_pool(path)
        console.print(f"[bold]{path.stem}[/bold]: {cfg.description}")
        for m in cfg.models:
            hw = derive_hardware(m)
            console.print(f"  {m.name:16s} answers={m.recorded:30s} profile={m.profile:22s} "
                          f"{m.replicas}x{m.gpus_per_replica}x{m.gpu} max_num_seqs="
                          f"{m.max_num_seqs} kv={hw.kv_capacity} tokens")
            for fam in TASK_FAMILIES:
                rec = m.recorded_for(fam)
                how = ("none (no stand-in named)" if rec is None else
                       f"{rec} (stand-in)" if fam in m.stand_ins else rec)
                console.print(f"  {'':16s}   {fam:10s} replays {how}")


def embed(
    split: Annotated[str, typer.Option(help="train, val, test or all")] = "test",
) -> None:
    """Compute (once) and cache MiniLM embeddings of MMLU-Pro items."""
    import numpy as np

    from inframind_ray import data
    from inframind_ray.embed import cache_dir, embed_items
    from inframind_ray.tasks.prompts import format_question

    q = data.questions()
    if split not in ("train", "val", "test", "all"):
        raise ConfigError("split", f"must be train, val, test or all, got {split!r}")
    sel = np.ones(len(q["question_id"]), bool) if split == "all" else q["split"] == split
    idx = np.flatnonzero(sel)
    texts = [format_question(q["question"][i], q["options"][i]) for i in idx]
    with console.status(f"embedding {len(idx)} items"):
        emb = embed_items(q["question_id"][idx], texts)
    console.print(f"{emb.shape[0]} embeddings of dim {emb.shape[1]} cached in {cache_dir()}")
