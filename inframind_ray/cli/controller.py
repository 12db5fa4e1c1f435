"""``inframind controller``: fit LAMaS's run-time execution controller on twin traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.cli.common import console, floats
from inframind_ray.errors import ConfigError

controller_app = typer.Typer(add_completion=False, no_args_is_help=True,
                             help="LAMaS's run-time execution controller (docs/controller.md).")


@controller_app.command()
def fit(
    pool: Annotated[str, typer.Option(
        "-c", "--pool", help="pool YAML path or shipped pool name")] = "constrained",
    policies: Annotated[str, typer.Option(
        help="policies whose full multi-agent executions are traced, comma-separated")] = (
        "moa,infra-topology,inframind,random"),
    rates: Annotated[str, typer.Option(
        help="arrival rates (req/min) of the traced cells, comma-separated (the constrained "
             "pool's capacity on the mixed workload is 189 req/min, docs/pools.md)")] = (
        "10,20,30,60,100,150,190"),
    duration: Annotated[float | None, typer.Option(
        help="simulated seconds of arrivals per traced cell: rate x duration queries, so the "
             "high rates give most traces [default: 120 unless --queries is given]")] = None,
    queries: Annotated[int | None, typer.Option(
        help="instead of --duration: this many queries per traced cell at every rate (each "
             "load level weighs the same; docs/controller.md compares the two)")] = None,
    epochs: Annotated[int, typer.Option(
        help="most training epochs (Adam, MSE, minibatch 512; stops early once the MSE on 20 % "
             "of the TRAIN queries held out stops falling for 20 epochs)")] = 300,
    hidden: Annotated[int, typer.Option(help="width of the MLP's two hidden layers")] = 64,
    mu: Annotated[float, typer.Option(
        help="time-use weight of the reward: R = quality - lam * lateness - mu * latency / "
             "budget (0: the learning room's reward exactly)")] = 0.1,
    lam: Annotated[float, typer.Option(help="lateness weight lambda of the reward")] = 1.0,
    members: Annotated[int, typer.Option(
        help="ensemble members (MLPs with seeds seed, seed+1, ..., each with its own held-out "
             "20 % of the TRAIN queries)")] = 5,
    rule: Annotated[str, typer.Option(
        help="decision rule: all (stop only when every member predicts delta > 0, the "
             "ensemble's lower bound) or mean (their mean > 0)")] = "all",
    seed: Annotated[int, typer.Option(help="seed of the train-split traces and the fit "
                                      "(validation traces use seed + 1)")] = 0,
    jobs: Annotated[int, typer.Option(help="parallel processes (0 = all cores)")] = 0,
    out: Annotated[Path, typer.Option(help="checkpoint folder")] = Path("runs/controller"),
    traces: Annotated[str | None, typer.Option(
        help="fit on the traces previous runs wrote (TRACES/traces_train.jsonl and "
             "traces_val.jsonl; several folders comma-separated, e.g. extra low-load traces) "
             "instead of collecting them; otherwise they are written to OUT/traces")] = None,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
) -> None:
    """Trace full-graph executions in the twin on the TRAIN split of the mixed workload
    (gsm8k=0.4, mmlu_pro=0.3, math=0.1, humaneval=0.1, mbpp=0.1), one cell per policy and
    rate;
    at every finished-node prefix of a multi-agent query compute the realised control advantage
    (reward of stopping there with the vote over the finished answers minus that of the full
    execution); fit a small MLP to it by MSE regression, and report its error on traces of the
    VALIDATION split.

    Writes OUT/controller.safetensors, OUT/spec.json (features, layers, reward) and
    OUT/report.json, and prints the regression error."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from inframind_ray.bench.controller_fit import (
        FitSpec,
        arrays,
        collect,
        fit_ensemble,
        load_traces,
        query_key,
        report,
        save_traces,
    )
    from inframind_ray.bench.controller_fit import fit as fit_mlp
    from inframind_ray.config import load_pool
    from inframind_ray.orchestration.controller import (
        BASE_FEATURES,
        RULES,
        ControllerReward,
    )
    from inframind_ray.policy.baselines import POLICIES

    pols = tuple(p.strip() for p in policies.split(",") if p.strip())
    unknown = [p for p in pols if p not in POLICIES]
    if not pols or unknown:
        raise ConfigError("policies", f"unknown policy {unknown[0] if unknown else 'empty'!r}")
    rate_vals = floats(rates, "rates")
    if not all(r > 0 for r in rate_vals):
        raise ConfigError("rates", "every rate must be > 0 req/min")
    if queries is not None and duration is not None:
        raise ConfigError("duration", "give --queries or --duration, not both")
    if duration is None and queries is None:
        duration = 120.0
    if duration is not None and not duration > 0:
        raise ConfigError("duration", f"must be > 0 seconds, got {duration:g}")
    if queries is not None and queries < 1:
        raise ConfigError("queries", f"must be >= 1, got {queries}")
    if epochs < 1 or hidden < 1:
        raise ConfigError("epochs" if epochs < 1 else "hidden", "must be >= 1")
    if mu < 0 or lam < 0:
        raise ConfigError("mu" if mu < 0 else "lam", "must be >= 0")
    if members < 1:
        raise ConfigError("members", f"must be >= 1, got {members}")
    if rule not in RULES:
        raise ConfigError("rule", f"unknown {rule!r}; expected one of {', '.join(RULES)}")
    spec = FitSpec(load_pool(pool), pool, pols, rate_vals, queries, duration, seed=seed,
                   val_seed=seed + 1, hidden=hidden, epochs=epochs,
                   reward=ControllerReward(lam, mu), members=members, rule=rule)
    import time

    import numpy as np

    t0 = time.perf_counter()
    if traces is not None:
        try:
            train, val = load_traces([Path(t.strip()) for t in traces.split(",") if t.strip()])
        except (OSError, ValueError) as e:
            raise ConfigError("traces", f"cannot read traces under {traces}: {e}") from None
    else:
        train = collect(spec, "train", spec.seed, jobs or None, progress)
        val = collect(spec, "val", spec.val_seed, jobs or None, progress)
        save_traces(out / "traces", train, val)
    if not train or not val:
        raise ConfigError("policies", "planned no multi-agent query: nothing to fit on")
    x, y = arrays(train)
    groups = np.asarray([query_key(r) for r in train])
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), disable=not progress) as bar:
        task = bar.add_task("fitting", total=epochs)
        model = fit_ensemble(x, y, spec, groups=groups, on_epoch=lambda j, e, loss: bar.update(
            task, completed=e + 1,
            description=f"fitting member {j + 1}/{members} (held-out MSE {loss:.4f})"))
        # the previous recipe on the same traces, for comparison: one MLP, no prior features
        base = fit_mlp(x[:, :BASE_FEATURES], y, spec, groups=groups)
    doc = report(spec, model, train, val, time.perf_counter() - t0, (base, BASE_FEATURES))
    if traces is not None:
        doc = {"traces": traces, **doc}
    model.save(out, {"report": "report.json", "pool": pool, "policies": list(pols),
                     "rates": list(rate_vals), "queries_per_cell": queries,
                     "duration_s": duration, "seed": seed})
    (out / "report.json").write_text(json.dumps(doc, indent=1) + "\n")
    rows = [(n, doc[n]) for n in ("train", "validation")] + [
        (f"baseline {n}", doc["baseline"][n]) for n in ("train", "validation")]
    for name, r in rows:
        console.print(f"{name:19s} {r['rows']:6d} prefixes of {r['queries']:5d} queries: MSE "
                      f"{r['mse']:.4f} (predicting the mean: {r['mse_predict_mean']:.4f}), MAE "
                      f"{r['mae']:.4f}, R2 {r['r2']:.3f}, sign agreement "
                      f"{100 * r['sign_agreement']:.1f} %; the rule stops "
                      f"{100 * r['stopped_queries']:.1f} % of queries, gain per query "
                      f"{r['gain_per_query']:+.4f}, accuracy lost {r['accuracy_lost_pp']:+.2f} "
                      f"pp (low load {r.get('low_load', {}).get('accuracy_lost_pp', 0):+.2f})")
    console.print(f"wrote {out}/controller.safetensors, spec.json, report.json "
                  f"({doc['wall_s']:.0f} s)")
