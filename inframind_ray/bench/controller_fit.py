"""Fit LAMaS's execution controller: an MLP regressing the realised control advantage of every
finished-node prefix of full-graph twin executions (``bench/controller_traces.py``), by MSE.

Traces come from ``record`` cells of the benchmark runner (controller that never stops) on the
TRAIN split; the error is reported on traces of the VALIDATION split (other items, other seed).
Besides the regression error the report says what the decision rule ``stop iff delta_hat > 0``
would have done on the validation traces: how often it stops, the realised delta of those stops,
and how often it stops where stopping loses (a realised delta < 0)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from inframind_ray.bench.sweep import SweepSpec, run_sweep
from inframind_ray.config import PoolConfig
from inframind_ray.orchestration.controller import (
    FEATURE_NAMES,
    ControllerModel,
    ControllerReward,
)

MIXED = (("gsm8k", 0.4), ("mmlu_pro", 0.3), ("math", 0.1), ("humaneval", 0.1), ("mbpp", 0.1))
"""The mixed workload of docs/tasks.md and the training room."""


@dataclass(frozen=True)
class FitSpec:
    """What to collect and how to fit (the defaults made the shipped controller)."""

    pool: PoolConfig
    pool_source: str = "constrained"
    policies: tuple[str, ...] = ("moa", "infra-topology", "inframind", "random")
    rates: tuple[float, ...] = (10.0, 20.0, 30.0, 60.0, 100.0, 150.0, 190.0)
    queries: int | None = None  # per cell, the same at every rate (None: rate x duration)
    duration_s: float | None = 120.0  # simulated seconds of arrivals per cell
    tasks: tuple[tuple[str, float], ...] = MIXED
    seed: int = 0
    val_seed: int = 1
    hidden: int = 64
    epochs: int = 300  # at most: training stops once the held-out part of TRAIN stops improving
    patience: int = 20
    holdout: float = 0.2  # share of the TRAIN queries held out for early stopping
    lr: float = 1e-3
    weight_decay: float = 1e-3
    reward: ControllerReward = ControllerReward()
    members: int = 5  # ensemble members: seeds seed, seed+1, ... (each its own held-out part)
    rule: str = "all"  # stop iff every member's delta > 0 ("mean": their mean > 0)


def collect(spec: FitSpec, split: str, seed: int, jobs: int | None, progress: bool
            ) -> list[dict]:
    """Trace rows of ``record`` cells on one split."""
    sweep = SweepSpec(spec.pool, spec.pool_source, spec.policies, spec.rates, spec.queries,
                      split=split, seed=seed, tasks=spec.tasks, duration_s=spec.duration_s,
                      controllers=("record",))
    results, _ = run_sweep(sweep, jobs, progress)
    return [row for r in results for row in r.traces]


def save_traces(path, train: list[dict], val: list[dict]) -> None:  # noqa: ANN001 - a Path
    """Both splits' trace rows as one JSON-lines file per split (refits skip the collection)."""
    import json
    from pathlib import Path

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("val", val)):
        with open(path / f"traces_{name}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def load_traces(path) -> tuple[list[dict], list[dict]]:  # noqa: ANN001 - a Path or several
    """(train, val) trace rows written by :func:`save_traces`; from several folders (a list),
    their rows together, each tagged with its folder's index (``trace_set``)."""
    import json
    from pathlib import Path

    paths = path if isinstance(path, list | tuple) else [path]
    out: list[list[dict]] = [[], []]
    for k, p in enumerate(paths):
        for j, name in enumerate(("train", "val")):
            with open(Path(p) / f"traces_{name}.jsonl") as f:
                out[j] += [{**json.loads(line), **({"trace_set": k} if k else {})}
                           for line in f]
    return out[0], out[1]


def query_key(row: dict) -> str:
    """A trace row's query across cells (query ids repeat from cell to cell, and from one
    trace folder to the next)."""
    return (f"{row.get('trace_set', 0)}/{row.get('policy')}/{row.get('rate_per_min')}/"
            f"{row['query_id']}")


def arrays(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(features, realised delta) of trace rows."""
    x = np.asarray([r["x"] for r in rows], np.float32).reshape(-1, len(FEATURE_NAMES))
    y = np.asarray([r["delta"] for r in rows], np.float32)
    return x, y


def fit_ensemble(x: np.ndarray, y: np.ndarray, spec: FitSpec,
                 on_epoch: Callable[[int, int, float], None] | None = None,
                 groups: np.ndarray | None = None) -> ControllerModel:
    """``spec.members`` MLPs (:func:`fit`), member j with seed ``spec.seed + j``: its own
    initialisation, minibatch order and held-out 20 % of the TRAIN queries, so each learns
    from another 80 %. One input standardisation (all TRAIN rows) for all; ``spec.rule``."""
    mean = x.mean(0).astype(np.float32)
    std = np.where(x.std(0) > 1e-6, x.std(0), 1.0).astype(np.float32)
    nets = []
    for j in range(spec.members):
        m = fit(x, y, replace(spec, seed=spec.seed + j),
                None if on_epoch is None else (lambda e, loss, j=j: on_epoch(j, e, loss)),
                groups, (mean, std))
        nets.append(m)
    model = ControllerModel(nets[0].weights, mean, std, spec.reward, more=[
        n.weights for n in nets[1:]], rule=spec.rule)
    model.meta = {"members": [n.meta for n in nets]}
    return model


def fit(x: np.ndarray, y: np.ndarray, spec: FitSpec,
        on_epoch: Callable[[int, float], None] | None = None,
        groups: np.ndarray | None = None,
        scale: tuple[np.ndarray, np.ndarray] | None = None) -> ControllerModel:
    """Minibatch Adam on MSE, seeded. A share ``spec.holdout`` of the TRAIN queries
    (``groups``: a query id per row; rows of one query stay together) is held out: training
    stops after ``spec.patience`` epochs without a lower held-out MSE and keeps the best
    epoch's weights (the realised deltas are 0/1 outcomes of single runs: noisy targets that a
    net of this size otherwise memorises)."""
    import torch

    torch.manual_seed(spec.seed)
    torch.set_num_threads(1)  # a small MLP: threads only contend
    rng = np.random.default_rng(spec.seed)
    ids = np.unique(groups) if groups is not None else np.arange(len(x))
    held_ids = set(rng.choice(ids, int(round(spec.holdout * len(ids))), replace=False).tolist())
    held = np.array([g in held_ids for g in (groups if groups is not None
                                             else np.arange(len(x)))])
    fit_x = x[~held]
    mean, std = scale if scale is not None else (
        fit_x.mean(0), np.where(fit_x.std(0) > 1e-6, fit_x.std(0), 1.0).astype(np.float32))
    xs = torch.from_numpy(((x - mean) / std).astype(np.float32))
    ys = torch.from_numpy(y.astype(np.float32))
    xt, yt = xs[torch.from_numpy(~held)], ys[torch.from_numpy(~held)]
    xh, yh = xs[torch.from_numpy(held)], ys[torch.from_numpy(held)]
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], spec.hidden), torch.nn.ReLU(),
        torch.nn.Linear(spec.hidden, spec.hidden), torch.nn.ReLU(),
        torch.nn.Linear(spec.hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    gen = torch.Generator().manual_seed(spec.seed)
    batch = 512
    best, best_state, since = float("inf"), None, 0
    for epoch in range(spec.epochs):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), batch):
            idx = perm[i:i + batch]
            loss = torch.nn.functional.mse_loss(net(xt[idx])[:, 0], yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            held_mse = float(torch.nn.functional.mse_loss(net(xh)[:, 0], yh)) if len(xh) else 0.0
        if on_epoch is not None:
            on_epoch(epoch, held_mse)
        if held_mse < best - 1e-6:
            best, since = held_mse, 0
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
        else:
            since += 1
            if since >= spec.patience:
                break
    if best_state is not None:
        net.load_state_dict(best_state)
    layers = [m for m in net if isinstance(m, torch.nn.Linear)]
    weights = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
               for m in layers]
    model = ControllerModel(weights, mean.astype(np.float32), std, spec.reward)
    model.meta = {"epochs_run": epoch + 1, "best_holdout_mse": round(best, 5)}
    return model


LOW_LOAD = 30.0
"""Rates up to this (req/min) are the issue's low load (10-30 req/min)."""


def evaluate(model: ControllerModel, rows: list[dict], columns: int | None = None) -> dict:
    """Regression error of the members' mean and what the stop rule (``model.score > 0``)
    would have done on trace rows: overall, and at low load (rates <= LOW_LOAD) and above.
    ``columns``: use only the first so many features (a model fitted without the rest)."""
    out = _evaluate(model, rows, columns)
    for name, keep in (("low_load", lambda r: r.get("rate_per_min", 0) <= LOW_LOAD),
                       ("high_load", lambda r: r.get("rate_per_min", 0) > LOW_LOAD)):
        part = [r for r in rows if keep(r)]
        if part:
            out[name] = _evaluate(model, part, columns)
    return out


def _evaluate(model: ControllerModel, rows: list[dict], columns: int | None) -> dict:
    x, y = arrays(rows)
    if columns is not None:
        x = x[:, :columns]
    pred = model.predict(x)
    err = pred - y
    stop = model.score(x) > 0
    first_stop: dict[str, dict] = {}  # the rule stops a query at its first positive prefix
    for r, s in zip(rows, stop, strict=True):
        if s and query_key(r) not in first_stop:
            first_stop[query_key(r)] = r
    queries = {query_key(r) for r in rows}
    stops = list(first_stop.values())
    return {
        "rows": len(rows),
        "queries": len(queries),
        "mse": round(float(np.mean(err ** 2)), 5),
        "mae": round(float(np.mean(np.abs(err))), 5),
        "mse_predict_mean": round(float(np.mean((y - y.mean()) ** 2)), 5),
        "r2": round(1.0 - float(np.mean(err ** 2)) / max(1e-12, float(np.var(y))), 4),
        "sign_agreement": round(float(np.mean((pred > 0) == (y > 0))), 4),
        "stopped_queries": round(len(stops) / max(1, len(queries)), 4),
        "realised_delta_of_stops": round(float(np.mean([r["delta"] for r in stops])), 5)
        if stops else None,
        "stops_that_lose": round(float(np.mean([r["delta"] < 0 for r in stops])), 4)
        if stops else None,
        "accuracy_lost_pp": round(100 * (sum(r["full_correct"] and not r["stop_correct"]
                                             for r in stops)
                                         - sum(r["stop_correct"] and not r["full_correct"]
                                               for r in stops)) / max(1, len(queries)), 3),
        "latency_saved_s_per_stop": round(float(np.mean(
            [r["latency_s"] - r["elapsed_s"] for r in stops])), 3) if stops else None,
        # the rule's value: realised delta of its stops summed over all queries (0: no stop)
        "gain_per_query": round(sum(r["delta"] for r in stops) / max(1, len(queries)), 5),
    }


def report(spec: FitSpec, model: ControllerModel, train: list[dict], val: list[dict],
           wall_s: float, baseline: tuple[ControllerModel, int] | None = None) -> dict:
    """The fit's report.json: settings, then the error on train and validation traces (and
    those of ``baseline``, a model on the first ``columns`` features, for comparison)."""
    extra = {} if baseline is None else {"baseline": {
        "what": "the previous recipe on the same traces: one MLP, no prior features, rule mean",
        "train": evaluate(baseline[0], train, baseline[1]),
        "validation": evaluate(baseline[0], val, baseline[1])}}
    return {
        "pool": spec.pool_source, "policies": list(spec.policies), "rates": list(spec.rates),
        "queries_per_cell": spec.queries, "duration_s": spec.duration_s,
        "tasks": dict(spec.tasks),
        "seeds": {"train": spec.seed, "val": spec.val_seed},
        "reward": {"lam": spec.reward.lam, "mu": spec.reward.mu},
        "ensemble": {"members": spec.members, "rule": spec.rule},
        "mlp": {"hidden": [spec.hidden, spec.hidden], "max_epochs": spec.epochs,
                "patience": spec.patience, "holdout": spec.holdout, "lr": spec.lr,
                "weight_decay": spec.weight_decay, **model.meta},
        "train": evaluate(model, train), "validation": evaluate(model, val),
        **extra, "wall_s": round(wall_s, 1),
    }
