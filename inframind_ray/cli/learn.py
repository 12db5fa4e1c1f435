"""Commands of the learning plane: ``inframind train`` (in the twin), ``inframind learn`` (from
the served pool's live rollouts), ``train-speed``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.cli.common import console
from inframind_ray.errors import ConfigError


def train(
    config: Annotated[Path, typer.Option("-c", "--config", help="training YAML "
                                         "(see rllib_configs/)")],
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/train"),
    resume: Annotated[bool, typer.Option(help="continue from OUT/rllib")] = False,
    seed: Annotated[int | None, typer.Option(help="the run's seed instead of the config's "
                                             "`seed` (one run per seed of a paired "
                                             "comparison)")] = None,
    progress: Annotated[bool, typer.Option(help="show progress")] = True,
) -> None:
    """Train the hierarchical constrained policy with RLlib PPO in the twin.

    Writes OUT/metrics.jsonl (one row per iteration: returns, lambda, cost, and every few
    iterations validation goodput and model/strategy/topology mix per rate),
    OUT/checkpoints/iter_N, OUT/rllib (for --resume), OUT/policy (best on the validation split)
    and OUT/summary.json. Use the result with `inframind bench --checkpoint OUT/policy`.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from inframind_ray.learning.train import train as run_training
    from inframind_ray.learning.train_config import load_train_config

    cfg = load_train_config(config)
    if seed is not None:
        cfg = cfg.model_copy(update={"seed": seed})
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
            if cfg.lagrangian.accuracy_floor is not None and row.get("mu") is not None:
                parts.append(f"acc {row.get('train_accuracy') or 0:.3f} "
                             f"(floor {cfg.lagrangian.accuracy_floor:g}) mu {row['mu']:.3f}")
            if row.get("decisions_per_s") is not None:
                parts.append(f"{row['decisions_per_s']:.0f} dec/s")
            ex = row.get("diagnostics", {}).get("executor") or {}
            if ex.get("approx_kl") is not None:
                parts.append(f"exec kl {ex['approx_kl']:.4f} clip {ex['clip_fraction'] or 0:.3f} "
                             f"ev {ex['explained_variance'] or 0:.2f} "
                             f"ent {ex['entropy'] or 0:.2f}")
            for e in row.get("eval", []):
                top = max(e["model_mix"].items(), key=lambda kv: kv[1], default=("-", 0))
                where = f"{e['pool']}@" if len(cfg.eval.pools or []) + cfg.eval.sampled_pools > 1 \
                    else ""
                parts.append(f"val {where}{e['rate_per_min']:g} {e['goodput']:.3f} "
                             f"({top[0]} {top[1]:.0%})")
            bar.console.print("  ".join(parts))
            bar.update(task, completed=row["iteration"] if row["phase"] == "ppo" else 0)

        summary = run_training(cfg, out, resume=resume, on_row=show, progress=progress)
    console.print(f"validation goodput (mean over rates): untrained "
                  f"{summary['untrained_val_goodput']:.3f} -> best "
                  f"{summary['best_val_goodput']:.3f} (iteration {summary['best_iteration']}); "
                  f"final lambda {summary['final_lambda']}")
    by_pool = summary["best_val_goodput_by_pool"]
    if len(by_pool) > 1:
        start = summary["start_val_goodput_by_pool"]
        console.print("per validation pool (best vs " + summary["start_phase"] + "): " + ", ".join(
            f"{p} {start.get(p, float('nan')):.3f} -> {g:.3f}" for p, g in by_pool.items()))
    if "report" in summary:
        rep = summary["report"]
        console.print(f"report (validation seed {rep['seed']}, not used for selection): kept "
                      f"{rep['kept_mean']:.3f} vs {rep['start_phase']} {rep['start_mean']:.3f} "
                      f"({rep['kept_minus_start']:+.3f})")
    for pool, flag in summary["collapse"].items():
        console.print(f"[yellow]collapse guard ({pool}): {flag}[/yellow]")
    console.print(f"wrote {out}/policy, {out}/metrics.jsonl, {out}/summary.json")


def train_speed(
    config: Annotated[Path, typer.Option("-c", "--config", help="training YAML "
                                         "(see rllib_configs/)")],
    variants: Annotated[str, typer.Option(
        help="comma-separated SAMPLER:SIMS[:RUNNERS[:overlap]][@THREADS], each measured in "
             "turn; SAMPLER 'rllib' (RLlib's MultiAgentEnvRunner) or 'decisions' "
             "(DecisionEnvRunner), SIMS sub-simulations per env, RUNNERS remote env runners "
             "(default 0: sampling in this process), 'overlap': the next batch sampled "
             "while the learner updates (decisions, 1 runner; ppo.overlap), THREADS the "
             "learner's torch threads (default: the config's ppo.torch_threads)"
    )] = "rllib:1,decisions:1,decisions:16",
    decisions: Annotated[int, typer.Option(min=1, help="decisions of the raw and sampling "
                                           "phases")] = 2000,
    iterations: Annotated[int, typer.Option(min=0, help="PPO iterations per variant (the "
                                            "config's train_batch_size each)")] = 2,
    out: Annotated[Path | None, typer.Option(help="also write the rows as JSON here")] = None,
) -> None:
    """Measure training throughput in environment decisions per second.

    Per variant, on the config's env and modules: the env alone with a uniform valid policy
    (raw), RLlib sampling with the real modules (sampling), and whole PPO iterations (ppo:
    sampling and learning; decisions answered and decisions trained, which differ while the
    queries in flight build up). Prints wall-clock and CPU-time rates and the 1-minute load
    average, since a shared machine's load moves the wall-clock numbers.
    """
    import json
    import logging
    import warnings

    from rich.progress import Progress
    from rich.table import Table

    from inframind_ray.learning.throughput import PHASES, Variant, measure
    from inframind_ray.learning.train import start_ray
    from inframind_ray.learning.train_config import load_train_config

    cfg = load_train_config(config)
    vs = [Variant.parse(v.strip()) for v in variants.split(",") if v.strip()]
    if not vs:
        raise ConfigError("variants", "no variant given")
    warnings.filterwarnings("ignore")
    for name in ("ray.rllib", "ray.tune", "ray._private.worker"):
        logging.getLogger(name).setLevel(logging.ERROR)
    start_ray()
    table = Table("sampler", "sims", "runners", "threads", "phase", "decisions", "wall s",
                  "cpu s", "dec/s", "dec/cpu-s", "trained", "trained/s", "load (1 min)")
    with Progress(console=console) as bar:
        task = bar.add_task("measuring", total=sum(
            (2 if v.overlap or not v.runners else 1) + iterations for v in vs))

        def show(row) -> None:
            table.add_row(row.sampler, str(row.num_sims),
                          f"{row.runners}{' overlap' if row.overlap else ''}",
                          str(row.threads), row.phase,
                          str(row.decisions),
                          f"{row.wall_s:.1f}", f"{row.cpu_s:.1f}", f"{row.per_s:.0f}",
                          f"{row.per_cpu_s:.0f}",
                          "" if row.trained is None else str(row.trained),
                          "" if row.trained_per_s is None else f"{row.trained_per_s:.0f}",
                          f"{row.load_before:.1f} -> {row.load_after:.1f}")
            bar.advance(task)

        rows = measure(cfg, vs, decisions, iterations, on_row=show)
    console.print(table)
    assert all(r.phase in PHASES for r in rows)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([r.as_dict() for r in rows], indent=2))
        console.print(f"wrote {out}")


def learn(
    config: Annotated[Path, typer.Option("-c", "--config", help="continual YAML "
                                         "(rllib_configs/continual.yaml)")],
    out: Annotated[Path, typer.Option(help="output folder (ledger, checkpoints, metrics; "
                                      "a restart resumes from it)")] = Path("runs/continual"),
    iterations: Annotated[int | None, typer.Option(
        min=0, help="PPO iterations (default: the config's; 0 until stopped)")] = None,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster to join ('auto' on a `ray up` node; default: a local Ray of this "
        "process); ppo.num_learners places the update there")] = None,
) -> None:
    """Learn from the served pool's live rollouts (RLlib PPO, skeleton of docs/continual.md):
    each iteration's nets become a candidate version in the pool's registry; nothing is
    promoted."""
    from inframind_ray.learning.continual import learn as run
    from inframind_ray.learning.continual import load_continual_config

    cfg = load_continual_config(config)

    def show(row: dict) -> None:
        console.print(f"iteration {row['iteration']}: candidate {row['candidate']} from "
                      f"{row['rollouts']} rollouts ({row['acknowledged']} acknowledged), "
                      f"lambda {row['lambda']:.3f}, skipped {row['skipped']}")

    with console.status("waiting for rollouts and training"):
        run(cfg, out, iterations, on_row=show, address=address)
