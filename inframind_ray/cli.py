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

ALL_POLICIES = ("always-strongest,static-task,moa,random,round-robin,least-loaded,"
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
    cfg = load_pool(pool)
    spec = SweepSpec(cfg, str(pool), pols, rate_vals, queries, arrivals, split,
                     (lohi[0], lohi[1]), seed, None if scheduling == "pool" else scheduling)
    results, wall = run_sweep(spec, jobs or None, progress)
    doc = write_outputs(out, spec, results, wall)
    console.print(table(doc))
    sim = doc["meta"]["simulated_s"]
    console.print(f"wrote {out}/results.json, Parquet records and plots; {len(results)} cells, "
                  f"{sim:.0f} simulated s in {wall:.1f} wall s")


@app.command()
def pools() -> None:
    """List the shipped pools and their models."""
    from inframind_ray.config import POOLS_DIR, load_pool
    from inframind_ray.twin.pool import derive_hardware

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
    from inframind_ray.workflow.prompts import format_question

    q = data.questions()
    if split not in ("train", "val", "test", "all"):
        raise ConfigError("split", f"must be train, val, test or all, got {split!r}")
    sel = np.ones(len(q["question_id"]), bool) if split == "all" else q["split"] == split
    idx = np.flatnonzero(sel)
    texts = [format_question(q["question"][i], q["options"][i]) for i in idx]
    with console.status(f"embedding {len(idx)} items"):
        emb = embed_items(q["question_id"][idx], texts)
    console.print(f"{emb.shape[0]} embeddings of dim {emb.shape[1]} cached in {cache_dir()}")


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
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
