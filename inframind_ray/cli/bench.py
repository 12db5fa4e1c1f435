"""Commands of the twin plane: the benchmark sweep, predictors fitted on its telemetry, the
shipped pools, and the item embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.bench.sweep import (
    DEFAULT_DURATION_S,
    DEFAULT_POLICIES,
    DEFAULT_RATES,
    SweepSpec,
    rates_for,
)
from inframind_ray.cli.common import budget_range, console, floats, listed
from inframind_ray.errors import ConfigError

MAX_CELL_QUERIES = 200_000
"""The most queries one --duration cell may hold (a typo in --duration or --rates, not a run)."""
CAPACITY_HELP = ("the pool's capacity: the arrival rate (req/min) at which the best task-only "
                 "baseline (always-strongest, static-task, moa) falls below 50 % SLO attainment "
                 "in twin cells of --duration simulated seconds (rate x duration queries, "
                 "seed --seed), found by a geometric bisection to 5 %")


def bench(
    engine: Annotated[str, typer.Option(help="engine: twin (simulated pool)")] = "twin",
    pool: Annotated[str, typer.Option(
        "-c", "--pool", help="pool YAML path or shipped pool name (`inframind pools`); "
        "`constrained` reproduces figures made before issue 19")] = "default",
    rates: Annotated[str | None, typer.Option(
        help=f"arrival rates, req/min, comma-separated [default: {listed(DEFAULT_RATES)}]")] = None,
    load_factors: Annotated[str | None, typer.Option(
        help="offered load as multiples of the pool's capacity, e.g. 0.1,0.5,1,2,3 (replaces "
             "--rates; the capacity is measured first unless --capacity gives it). Capacity = "
             + CAPACITY_HELP)] = None,
    capacity: Annotated[float | None, typer.Option(
        help="the pool's capacity in req/min for --load-factors (skips measuring it)")] = None,
    arrivals: Annotated[str, typer.Option(
        help="poisson, or trace:NAME (azure_conv, azure_code, mooncake_conv)")] = (
        SweepSpec.arrivals),
    policies: Annotated[str, typer.Option(help="comma-separated policy names")] = listed(
        DEFAULT_POLICIES),
    duration: Annotated[float | None, typer.Option(
        help="simulated seconds of arrivals per (policy, rate) cell: each cell gets rate x "
             f"duration queries [default: {DEFAULT_DURATION_S:g} unless --queries is given]")
    ] = None,
    queries: Annotated[int | None, typer.Option(
        help="a fixed number of queries per (policy, rate) cell instead of --duration (the "
             "pre-issue-19 default was 500)")] = None,
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
    scheduling: Annotated[str, typer.Option(
        help="queue orders, comma-separated: edf, fcfs, plas, atlas (Autellix's program-level "
             "attained service / along the critical path), or pool; every listed one runs for "
             "every policy, rows carry it")] = "pool",
    controller: Annotated[str, typer.Option(
        help="LAMaS's run-time execution controller: off, on, or on,off (both variants of "
             "every policy in one run, rows carry it; writes controller.md / controller.png). "
             "On: after each finished node of a multi-agent plan it predicts whether stopping "
             "now pays, and if so cancels the pending calls and answers with the vote over the "
             "finished answers; single-agent plans are unaffected")] = "off",
    controller_checkpoint: Annotated[Path | None, typer.Option(
        help="controller checkpoint for --controller on (default: the shipped one, "
             "`inframind controller fit`)")] = None,
    on_deadline: Annotated[str, typer.Option(
        help="what an agent call does at its query's deadline: abort, continue, or degrade "
             "(given up when only a reserve for the fastest answer is left, and that answer "
             "sent instead); pool: the pool's engine.on_deadline")] = "pool",
    deadlines: Annotated[bool, typer.Option(
        help="agent calls carry their query's deadline (queues shed, calls abort); "
             "--no-deadlines: a budget-free, latency-only workload (policies still read the "
             "budget)")] = SweepSpec.deadlines,
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
    """Compare routing policies (and, with --scheduling, queue orders) on the twin over a sweep
    of offered loads (req/min, or load factors over the pool's measured capacity); each cell is a
    window of --duration simulated seconds of arrivals (rate x duration queries) unless --queries
    fixes its size.

    Writes OUT/results.json, OUT/queries.parquet, OUT/calls.parquet, OUT/queue.parquet and plots
    (goodput.png, latency_cdf.png, queue_depth.png, mix.png; with several --scheduling also
    scheduling.png and the load each sustains within a latency over the first's; with
    --controller on,off also controller.png and controller.md), and prints a table.
    """
    from inframind_ray.bench.report import table, write_outputs
    from inframind_ray.bench.sweep import run_sweep
    from inframind_ray.config import load_pool
    from inframind_ray.policy.baselines import POLICIES
    from inframind_ray.tasks.registry import parse_mix

    if engine != "twin":
        raise ConfigError("engine", f"{engine!r} is not available for bench; use twin")
    if rates is not None and load_factors is not None:
        raise ConfigError("load-factors", "give --rates or --load-factors, not both")
    if capacity is not None and load_factors is None:
        raise ConfigError("capacity", "only applies with --load-factors")
    if capacity is not None and not capacity > 0:
        raise ConfigError("capacity", f"must be > 0 req/min, got {capacity:g}")
    if queries is not None and duration is not None:
        raise ConfigError("duration", "give --duration or --queries, not both")
    if queries is not None and queries < 1:
        raise ConfigError("queries", f"must be >= 1, got {queries}")
    if duration is None and queries is None:
        duration = DEFAULT_DURATION_S
    if duration is not None and not duration > 0:
        raise ConfigError("duration", f"must be > 0 seconds, got {duration:g}")
    factors = floats(load_factors, "load-factors") if load_factors is not None else None
    if factors is not None and not all(f > 0 for f in factors):
        raise ConfigError("load-factors", "every load factor must be > 0")
    rate_vals = floats(rates, "rates") if rates is not None else DEFAULT_RATES
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
    scheds = _schedulings(scheduling)
    ctls = _controllers(controller)
    if "on" in ctls:  # fail here, in one line, not inside a worker
        from inframind_ray.orchestration.controller import ExecutionController

        ExecutionController.load(controller_checkpoint)
    if not metrics_period >= 0:
        raise ConfigError("metrics-period", f"must be >= 0 seconds, got {metrics_period:g}")
    shares = parse_mix(mix if mix is not None else tasks)
    if queries is not None and list(shares) == ["mmlu_pro"]:
        from inframind_ray.tasks.workload import split_items

        have = len(split_items(split)) if split in ("train", "val", "test") else queries
        if queries > have:  # a fixed count draws distinct items; --duration cells may repeat
            raise ConfigError("queries", f"{queries} exceeds the {have} items of split "
                              f"{split!r} (--duration cells repeat items instead)")
    cfg = load_pool(pool)
    if on_deadline != "pool":
        from inframind_ray.config.engine import EngineConfig

        try:
            cfg = cfg.model_copy(update={"engine": EngineConfig.model_validate(
                {**cfg.engine.model_dump(), "on_deadline": on_deadline})})
        except ValueError:
            raise ConfigError("on-deadline", f"unknown {on_deadline!r}; expected abort, "
                              "continue, degrade or pool") from None
    _check_records(cfg, shares)
    if "inframind" in pols:  # fail here, in one line, not inside a worker
        from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
        from inframind_ray.pools.cards import build_pool_info

        LearnedPolicy.load(checkpoint or DEFAULT_CHECKPOINT, build_pool_info(cfg))
    if "inframind-v1" in pols:  # the previous, positional policy: its own pool only
        from inframind_ray.policy.positional import V1_CHECKPOINT, PositionalPolicy
        from inframind_ray.pools.cards import build_pool_info

        PositionalPolicy.load(V1_CHECKPOINT, build_pool_info(cfg))
    scheds = tuple(dict.fromkeys(cfg.engine.scheduling if n == "pool" else n for n in scheds))
    sched = scheds[0] if len(scheds) == 1 else None  # capacity: under the pool's when several
    cap_doc = None
    if factors is not None:
        if capacity is None:
            from inframind_ray.bench.capacity import CapacitySpec, capacity_doc

            cspec = CapacitySpec(cfg, tuple(shares.items()),
                                 duration if queries is None else DEFAULT_DURATION_S, seed,
                                 split, arrivals, lohi, sched)
            res = _measure(cspec, progress)
            cap_doc = capacity_doc(cspec, res, str(pool))
            capacity = res.capacity_rpm
            console.print(f"capacity of {pool}: {capacity:.1f} req/min (bracket "
                          f"{res.lo:.1f}-{res.hi:.1f}, {len(res.probes)} probes)")
        else:
            cap_doc = {"pool": str(pool), "capacity_rpm": capacity, "given": True}
            console.print(f"capacity of {pool}: {capacity:g} req/min (given by --capacity)")
        rate_vals = rates_for(factors, capacity)
    spec = SweepSpec(cfg, str(pool), pols, rate_vals, queries, arrivals, split,
                     lohi, seed, scheds,
                     str(checkpoint) if checkpoint else None, metrics_period, pool_history,
                     tuple(shares.items()), deadlines, duration if queries is None else None,
                     capacity if factors is not None else None, ctls,
                     str(controller_checkpoint) if controller_checkpoint else None)
    if queries is None:
        most = spec.queries_at(max(rate_vals))
        if most > MAX_CELL_QUERIES:
            raise ConfigError("duration", f"{max(rate_vals):g} req/min x {duration:g} s = {most} "
                              f"queries in one cell, more than {MAX_CELL_QUERIES}")
        console.print("cells of " + f"{duration:g} simulated s: " + ", ".join(
            f"{r:g} req/min x {duration:g} s = {spec.queries_at(r)} queries"
            for r in sorted(rate_vals)))
    results, wall = run_sweep(spec, jobs or None, progress)
    doc = write_outputs(out, spec, results, wall, cap_doc)
    console.print(table(doc))
    if "sustained_load" in doc:
        from inframind_ray.bench.scheduling import speedup_table

        console.print(speedup_table(doc["sustained_load"], spec.schedulings[0]))
    if len(shares) > 1:
        from inframind_ray.bench.report import task_table

        console.print(task_table(doc))
    sim = doc["meta"]["simulated_s"]
    console.print(f"wrote {out}/results.json, Parquet records and plots; {len(results)} cells, "
                  f"{sim:.0f} simulated s in {wall:.1f} wall s")


def _schedulings(text: str) -> tuple[str, ...]:
    """'fcfs,edf' -> ('fcfs', 'edf') ('pool': the pool file's); ConfigError otherwise."""
    from inframind_ray.core.request_queue import SchedulingPolicy

    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    known = ("pool", *(p.value for p in SchedulingPolicy))
    bad = [n for n in names if n not in known]
    if not names or bad:
        raise ConfigError("scheduling", f"unknown {bad[0] if bad else 'empty'!r}; expected a "
                          f"comma-separated list of {', '.join(known)}")
    return names


def _controllers(text: str) -> tuple[str, ...]:
    """'on,off' -> ('on', 'off'); ConfigError otherwise."""
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in ("on", "off")]
    if not names or bad:
        raise ConfigError("controller", f"unknown {bad[0] if bad else 'empty'!r}; expected on, "
                          "off or on,off")
    return names


def _measure(cspec, progress: bool):  # noqa: ANN001, ANN202 - CapacitySpec -> CapacityResult
    """Measure capacity, one line per probe on the console (a status spinner while running)."""
    from inframind_ray.bench.capacity import measure_capacity

    def show(p) -> None:  # noqa: ANN001 - a Probe
        runs = ", ".join(f"{k} {v:.3f}" for k, v in p.attainment.items())
        console.print(f"  probe {p.rate_per_min:9.1f} req/min ({p.n_queries} queries): "
                      f"SLO attainment {runs}")

    with console.status("measuring capacity (bisection of twin runs)", spinner="dots") if (
            progress) else _nullcontext():
        return measure_capacity(cspec, on_probe=show)


def _nullcontext():  # noqa: ANN202
    import contextlib

    return contextlib.nullcontext()


def capacity(
    pool: Annotated[str, typer.Option(
        "-c", "--pool", help="pool YAML path or shipped pool name")] = "default",
    tasks: Annotated[str, typer.Option(
        help="task families, comma-separated; equal shares unless --mix gives them")] = (
        "mmlu_pro"),
    mix: Annotated[str | None, typer.Option(
        help="shares of the families, e.g. gsm8k=0.4,mmlu_pro=0.3,math=0.1,humaneval=0.1,"
             "mbpp=0.1; replaces --tasks")] = None,
    duration: Annotated[float, typer.Option(
        help="simulated seconds of arrivals per probe cell (as bench --duration)")] = (
        DEFAULT_DURATION_S),
    seed: Annotated[int, typer.Option(help="seed of items, budgets and arrivals")] = 0,
    split: Annotated[str, typer.Option(help="item split: test (default), val, train")] = "test",
    arrivals: Annotated[str, typer.Option(help="poisson, or trace:NAME")] = "poisson",
    budget: Annotated[str, typer.Option(help="latency budget range MIN,MAX in seconds")] = (
        listed(SweepSpec.budget_range_s)),
    out: Annotated[Path | None, typer.Option(help="also write the measurement as JSON")] = None,
    progress: Annotated[bool, typer.Option(help="show a spinner while probing")] = True,
) -> None:
    """Measure and print the pool's capacity: the arrival rate (req/min) at which the best
    task-only baseline (always-strongest, static-task, moa) falls below 50 % SLO attainment in
    twin cells of --duration simulated seconds (rate x duration queries, fixed seed), found by
    doubling from 60 req/min and then a geometric bisection to 5 %. A probe runs the baselines
    cheapest first, stops at the first at or above 50 %, and skips one already below 50 % at a
    lower rate (the first probe runs all three). Every probe is printed."""
    import json

    from inframind_ray.bench.capacity import CapacitySpec, capacity_doc
    from inframind_ray.config import load_pool
    from inframind_ray.tasks.registry import parse_mix

    shares = parse_mix(mix if mix is not None else tasks)
    cfg = load_pool(pool)
    _check_records(cfg, shares)
    cspec = CapacitySpec(cfg, tuple(shares.items()), duration, seed, split, arrivals,
                         budget_range(budget))
    res = _measure(cspec, progress)
    doc = capacity_doc(cspec, res, pool)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(f"capacity of {pool}: {res.capacity_rpm:.1f} req/min (best task-only "
                  f"baseline at 50 % SLO; bracket {res.lo:.1f}-{res.hi:.1f} req/min, "
                  f"{len(res.probes)} probes of {duration:g} simulated s)")


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
    """List the shipped pools (held-out ones under heldout/) and their models: hardware, memory
    share, KV tokens, and what each replays per task family."""
    from inframind_ray.config import load_pool, shipped_pools
    from inframind_ray.data import TASK_FAMILIES
    from inframind_ray.pools.hardware import derive_hardware

    for name in shipped_pools():
        cfg = load_pool(name)
        tag = " (held out of training pools)" if name.startswith("heldout/") else ""
        console.print(f"[bold]{name}[/bold]{tag}: {cfg.description}")
        for m in cfg.models:
            hw = derive_hardware(m)
            share = (f" gpu_memory_utilization={m.memory_share:g}"
                     if m.gpu_memory_utilization is not None else "")
            gpus = f" gpu_ids={m.gpu_ids}" if m.gpu_ids is not None else ""
            console.print(f"  {m.name:16s} answers={m.recorded:30s} profile={m.profile:22s} "
                          f"{m.replicas}x{m.gpus_per_replica}x{m.gpu} max_num_seqs="
                          f"{m.max_num_seqs} kv={hw.kv_capacity} tokens{share}{gpus}")
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
