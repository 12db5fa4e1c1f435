"""The ``inframind`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from inframind_ray.errors import ConfigError, InframindError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="InfraMind on Ray: infrastructure-aware multi-agent LLM orchestration.")
console = Console(width=None if sys.stdout.isatty() else 160)

from inframind_ray.fidelity.cli import twin_app  # noqa: E402

app.add_typer(twin_app, name="twin")

ALL_POLICIES = ("inframind,always-strongest,static-task,moa,random,round-robin,least-loaded,"
                "infra-heuristic,oracle")


def _floats(text: str, field: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise ConfigError(field, "is empty")
    return vals


@app.command()
def bench(
    engine: Annotated[str, typer.Option(help="engine: twin (simulated pool)")] = "twin",
    pool: Annotated[str, typer.Option(help="pool YAML path or shipped pool name")] = "default",
    rates: Annotated[str, typer.Option(help="arrival rates, req/min, comma-separated")] = (
        "10,30,50,100,150,200,300"),
    arrivals: Annotated[str, typer.Option(
        help="poisson, or trace:NAME (azure_conv, azure_code, mooncake_conv)")] = "poisson",
    policies: Annotated[str, typer.Option(help="comma-separated policy names")] = ALL_POLICIES,
    queries: Annotated[int, typer.Option(help="queries per (policy, rate) cell")] = 500,
    seed: Annotated[int, typer.Option(help="seed of items, budgets and arrivals")] = 0,
    split: Annotated[str, typer.Option(help="item split: test (default), val, train")] = "test",
    budget: Annotated[str, typer.Option(help="latency budget range MIN,MAX in seconds")] = (
        "20,90"),
    scheduling: Annotated[str, typer.Option(help="pool | edf | fcfs (override the pool)")] = (
        "pool"),
    jobs: Annotated[int, typer.Option(help="parallel processes (0 = all cores)")] = 0,
    checkpoint: Annotated[Path | None, typer.Option(
        help="learned-policy checkpoint for 'inframind' (default: the shipped policy)")] = None,
    metrics_period: Annotated[float, typer.Option(
        help="policies read load snapshots refreshed every this many simulated seconds, as "
             "served (0 = fresh at every decision)")] = 0.0,
    pool_history: Annotated[bool, typer.Option(
        help="start every model with the latency EWMAs of a past load, as a served pool that "
             "has run before (default: a fresh pool, idle models report zero latency)")] = False,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/bench"),
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Compare routing policies on the twin over a sweep of arrival rates.

    Writes OUT/results.json, OUT/queries.parquet, OUT/calls.parquet, OUT/queue.parquet and plots
    (goodput.png, latency_cdf.png, queue_depth.png, mix.png), and prints a table.
    """
    from inframind_ray.bench.report import table, write_outputs
    from inframind_ray.bench.sweep import SweepSpec, run_sweep
    from inframind_ray.config import load_pool
    from inframind_ray.policy.baselines import POLICIES

    if engine != "twin":
        raise ConfigError("engine", f"{engine!r} is not available for bench; use twin")
    rate_vals = _floats(rates, "rates")
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
    lohi = _floats(budget, "budget")
    if len(lohi) != 2:
        raise ConfigError("budget", f"expected MIN,MAX, got {budget!r}")
    if scheduling not in ("pool", "edf", "fcfs"):
        raise ConfigError("scheduling", f"must be pool, edf or fcfs, got {scheduling!r}")
    if not metrics_period >= 0:
        raise ConfigError("metrics-period", f"must be >= 0 seconds, got {metrics_period:g}")
    cfg = load_pool(pool)
    if "inframind" in pols:  # fail here, in one line, not inside a worker
        from inframind_ray.bench.runner import outcome_for
        from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
        from inframind_ray.pools.cards import build_pool_info

        LearnedPolicy.load(checkpoint or DEFAULT_CHECKPOINT,
                           build_pool_info(cfg, outcome_for(cfg, seed)))
    spec = SweepSpec(cfg, str(pool), pols, rate_vals, queries, arrivals, split,
                     (lohi[0], lohi[1]), seed, None if scheduling == "pool" else scheduling,
                     str(checkpoint) if checkpoint else None, metrics_period, pool_history)
    results, wall = run_sweep(spec, jobs or None, progress)
    doc = write_outputs(out, spec, results, wall)
    console.print(table(doc))
    sim = doc["meta"]["simulated_s"]
    console.print(f"wrote {out}/results.json, Parquet records and plots; {len(results)} cells, "
                  f"{sim:.0f} simulated s in {wall:.1f} wall s")


@app.command()
def train(
    config: Annotated[Path, typer.Option("-c", "--config", help="training YAML "
                                         "(see rllib_configs/)")],
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/train"),
    resume: Annotated[bool, typer.Option(help="continue from OUT/rllib")] = False,
    progress: Annotated[bool, typer.Option(help="show progress")] = True,
) -> None:
    """Train the hierarchical constrained policy with RLlib PPO in the twin.

    Writes OUT/metrics.jsonl (one row per iteration: returns, lambda, cost, and every few
    iterations validation goodput and model/strategy/topology mix per rate),
    OUT/checkpoints/iter_N, OUT/rllib (for --resume), OUT/policy (best on the validation split)
    and OUT/summary.json. Use the result with `inframind bench --checkpoint OUT/policy`.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from inframind_ray.learning.train import load_train_config
    from inframind_ray.learning.train import train as run_training

    cfg = load_train_config(config)
    if resume and not (out / "rllib" / "done_iterations").exists():
        raise ConfigError("resume", f"nothing to resume in {out} (no {out}/rllib)")

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress) as bar:
        task = bar.add_task("PPO iterations", total=cfg.ppo.iterations)

        def show(row: dict) -> None:
            parts = [f"iter {row['iteration']:3d} {row['phase']:10s}"]
            if row.get("train_goodput") is not None:
                parts.append(f"train goodput {row['train_goodput']:.3f}")
            if row.get("lambda") is not None:
                parts.append(f"lambda {row['lambda']:.3f}")
            if row.get("mean_cost") is not None:
                parts.append(f"cost {row['mean_cost']:.3f}")
            for e in row.get("eval", []):
                top = max(e["model_mix"].items(), key=lambda kv: kv[1], default=("-", 0))
                parts.append(f"val@{e['rate_per_min']:g} {e['goodput']:.3f} "
                             f"({top[0]} {top[1]:.0%})")
            bar.console.print("  ".join(parts))
            bar.update(task, completed=row["iteration"] if row["phase"] == "ppo" else 0)

        summary = run_training(cfg, out, resume=resume, on_row=show, progress=progress)
    console.print(f"validation goodput (mean over rates): untrained "
                  f"{summary['untrained_val_goodput']:.3f} -> best "
                  f"{summary['best_val_goodput']:.3f} (iteration {summary['best_iteration']}); "
                  f"final lambda {summary['final_lambda']}")
    if summary["collapse"]:
        console.print(f"[yellow]collapse guard: {summary['collapse']}[/yellow]")
    console.print(f"wrote {out}/policy, {out}/metrics.jsonl, {out}/summary.json")


@app.command()
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

    from inframind_ray.bench.runner import outcome_for
    from inframind_ray.config import load_pool
    from inframind_ray.policy import predictors as P
    from inframind_ray.pools.cards import build_pool_info

    cfg = load_pool(pool)
    info = build_pool_info(cfg, outcome_for(cfg, 0))
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


@app.command()
def pools() -> None:
    """List the shipped pools and their models."""
    from inframind_ray.config import POOLS_DIR, load_pool
    from inframind_ray.pools.hardware import derive_hardware

    for path in sorted(POOLS_DIR.glob("*.yaml")):
        cfg = load_pool(path)
        console.print(f"[bold]{path.stem}[/bold]: {cfg.description}")
        for m in cfg.models:
            hw = derive_hardware(m)
            console.print(f"  {m.name:16s} answers={m.recorded:30s} profile={m.profile:22s} "
                          f"{m.replicas}x{m.gpus_per_replica}x{m.gpu} max_num_seqs="
                          f"{m.max_num_seqs} kv={hw.kv_capacity} tokens")


@app.command()
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


DEFAULT_URL = "http://127.0.0.1:8000"


def _serving_cfg(config: Path):  # noqa: ANN202
    from inframind_ray.config import load_pool

    return load_pool(config)


@app.command()
def serve(
    config: Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")] = Path(
        "deployments/twin_pool.yaml"),
    address: Annotated[str | None, typer.Option(help="Ray address (default: start local)")] = None,
) -> None:
    """Serve a pool on Ray Serve (orchestrator actor + one deployment per model + HTTP API)."""
    import signal
    import threading

    from inframind_ray.serving.app import start

    cfg = _serving_cfg(config)
    with console.status("starting Ray, the orchestrator and the model deployments"):
        session = start(cfg, address=address)
    console.print(f"serving {cfg.name} ({len(cfg.models)} models) at {session.url}  "
                  "(POST /v1/queries, POST /v1/chat/completions, GET /v1/state); Ctrl-C stops")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    with console.status("stopping"):
        session.stop()


def _post(url: str, path: str, body: dict, api_key: str | None) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, json.dumps(body).encode(), headers)

    def parse(code: int, raw: bytes) -> tuple[int, dict]:
        try:
            return code, json.loads(raw or b"{}")
        except json.JSONDecodeError:
            text = raw[:200].decode(errors="replace").replace("\n", " ")
            raise InframindError(f"HTTP {code}: not a JSON reply: {text!r}") from None

    try:
        with urllib.request.urlopen(req, timeout=body.get("budget_s", 60) + 30) as r:
            return parse(r.status, r.read())
    except urllib.error.HTTPError as e:
        return parse(e.code, e.read())
    except urllib.error.URLError as e:
        raise ConfigError("url", f"cannot reach {url}: {e.reason}") from None


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="the query (may be empty with --item-id)")] = "",
    item_id: Annotated[int | None, typer.Option(help="MMLU-Pro question id (graded)")] = None,
    budget: Annotated[float, typer.Option(help="latency budget, seconds")] = 60.0,
    policy: Annotated[str | None, typer.Option(help="policy for this query")] = None,
    url: Annotated[str, typer.Option(help="API base URL")] = DEFAULT_URL,
    api_key: Annotated[str | None, typer.Option(envvar="INFRAMIND_API_KEY")] = None,
) -> None:
    """Send one query to a running service and show the answer and its per-step trace."""
    body = {"query": text or None, "item_id": item_id, "budget_s": budget}
    if policy:
        body["policy"] = policy
    status, out = _post(url, "/v1/queries", body, api_key)
    if status != 200:
        raise InframindError(f"HTTP {status}: {out.get('error', out)}")
    console.print(f"[bold]{out['answer'] or '-'}[/bold]  correct={out['correct']}  "
                  f"latency={out['latency_s']:.2f}s / budget {out['budget_s']:.0f}s  "
                  f"plan={out['plan']['topology']} k={out['plan']['k']}  policy={out['policy']}")
    for s in out["steps"]:
        console.print(f"  node {s['node']} {s['role']:10s} {s['model']:16s} {s['strategy']:9s} "
                      f"{s['status']:8s} {s['start_s']:7.2f}s -> {s['end_s']:7.2f}s")


@app.command()
def load(
    rate: Annotated[float, typer.Option(help="arrival rate, req/min (Poisson)")] = 30.0,
    duration: Annotated[float, typer.Option(help="seconds of arrivals")] = 60.0,
    policy: Annotated[str | None, typer.Option(help="policy to request")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    url: Annotated[str, typer.Option(help="API base URL (loopback only)")] = DEFAULT_URL,
    out: Annotated[Path | None, typer.Option(help="write the summary JSON here")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="INFRAMIND_API_KEY")] = None,
) -> None:
    """Bounded Poisson load of test-split MMLU-Pro items against the HTTP API (loopback only)."""
    import asyncio
    import json

    from inframind_ray.serving.loadgen import run_load

    with console.status(f"{rate:g} req/min for {duration:g} s"):
        res = asyncio.run(run_load(url, rate, duration, seed=seed, policy=policy,
                                   api_key=api_key))
    summary = res.summary()
    console.print(summary)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "records": res.records}, indent=1,
                                  default=float))


@app.command()
def demo(
    config: Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")] = Path(
        "deployments/twin_pool.yaml"),
    low: Annotated[float, typer.Option(help="low rate, req/min")] = 30.0,
    high: Annotated[float, typer.Option(help="high rate, req/min")] = 300.0,
    low_duration: Annotated[float, typer.Option(help="seconds of arrivals, low rate")] = 40.0,
    high_duration: Annotated[float, typer.Option(help="seconds of arrivals, high rate")] = 75.0,
    policies: Annotated[str, typer.Option(help="comma-separated policies to compare")] = (
        "inframind,infra-heuristic,always-strongest"),
    budget: Annotated[str, typer.Option(help="latency budget range MIN,MAX seconds")] = "15,45",
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/demo-serve"),
) -> None:
    """Start local Ray, serve the twin pool, load it at a low and a high rate through the HTTP
    API for each policy, print the comparison, shut down."""
    import asyncio
    import json

    from rich.table import Table

    from inframind_ray.serving.app import start
    from inframind_ray.serving.loadgen import run_load

    lohi = _floats(budget, "budget")
    if len(lohi) != 2 or not 0 < lohi[0] <= lohi[1]:
        raise ConfigError("budget", f"expected MIN,MAX with 0 < MIN <= MAX, got {budget!r}")
    cfg = _serving_cfg(config)
    with console.status("starting Ray, the orchestrator and the model deployments"):
        session = start(cfg)
    rows = []
    try:
        for rate, duration in ((low, low_duration), (high, high_duration)):
            for pol in policies.split(","):
                with console.status(f"{pol}: {rate:g} req/min for {duration:g} s"):
                    res = asyncio.run(run_load(session.url, rate, duration, policy=pol,
                                               budget_range_s=(lohi[0], lohi[1])))
                rows.append(res.summary())
                console.print(f"  done: {pol} @ {rate:g} req/min -> goodput "
                              f"{rows[-1]['goodput']:.3f}, SLO {rows[-1]['slo_attainment']:.3f}")
    finally:
        with console.status("stopping"):
            session.stop()
    t = Table(title=f"demo: {cfg.name} on Ray Serve (wall clock, HTTP API, budgets "
                    f"{lohi[0]:g}-{lohi[1]:g} s)")
    for c in ("policy", "rate/min", "sent", "200", "429/503", "goodput", "SLO", "accuracy",
              "p50 s", "p95 s", "calls/q"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["policy"], f"{r['rate_per_min']:g}", str(r["sent"]), str(r["http_200"]),
                  f"{r['http_429']}/{r['http_503']}", f"{r['goodput']:.3f}",
                  f"{r['slo_attainment']:.3f}", f"{r['accuracy']:.3f}",
                  f"{r['latency_p50_s']:.2f}", f"{r['latency_p95_s']:.2f}",
                  f"{r['calls_per_query']:.2f}")
    console.print(t)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(rows, indent=2))
    console.print(f"wrote {out}/demo.json")


@app.command()
def overhead(
    config: Annotated[Path, typer.Option("-c", "--config", help="zero-latency pool YAML")] = Path(
        "deployments/echo_pool.yaml"),
    n: Annotated[int, typer.Option(help="measured pairs (after 20 warm-up)")] = 300,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/overhead"),
) -> None:
    """Side by side: a bare deployment-handle hop vs an orchestrated agent step (zero-latency
    engine); writes OUT/overhead.json."""
    import json

    import ray

    from inframind_ray.serving.app import start

    cfg = _serving_cfg(config)
    if n < 10:
        raise ConfigError("n", "must be >= 10")
    with console.status("starting the echo pool"):
        session = start(cfg)
    try:
        with console.status(f"measuring {n} hop/step pairs"):
            res = ray.get(session.orchestrator.measure_overhead.remote(n, cfg.models[0].name))
    finally:
        session.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(res, indent=2))
    console.print(res)
    console.print(f"wrote {out}/overhead.json")


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        app(standalone_mode=False)
    except InframindError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # usage errors (click's, or the copy of click that typer vendors)
        if isinstance(e, _usage_errors()):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, _exit_types()):
            sys.exit(e.exit_code)
        raise


def _classes(attr: str, *modules: str) -> tuple[type, ...]:
    """``attr`` of every importable module among ``modules``."""
    import contextlib
    import importlib

    out = []
    for name in modules:
        with contextlib.suppress(ImportError, AttributeError):
            out.append(getattr(importlib.import_module(name), attr))
    return tuple(out)


def _usage_errors() -> tuple[type, ...]:
    return _classes("ClickException", "typer._click.exceptions", "click.exceptions")


def _exit_types() -> tuple[type, ...]:
    return _classes("Exit", "typer.exceptions", "typer._click.exceptions", "click.exceptions")

if __name__ == "__main__":
    main()
