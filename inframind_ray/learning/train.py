"""``inframind train``: the hierarchical constrained policy, trained with RLlib PPO in the twin.

One MultiRLModule (planner + executor, mapped by agent-id prefix), the Lagrangian PPO learner, an
optional behaviour-cloning warm start from a teacher heuristic, per-iteration metrics (returns,
lambda, cost; every ``eval.every`` iterations goodput and model/strategy/topology mix on the
validation split), checkpoints in the policy's safetensors format, RLlib state for ``--resume``,
and the collapse guard. The policy kept as ``OUT/policy`` is the checkpoint with the best mean
validation goodput (never the test split).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from inframind_ray.core.types import TokenBudget
from inframind_ray.learning.heap import settle
from inframind_ray.learning.pools_draw import capacity_rpm
from inframind_ray.learning.train_config import TrainConfig, validation_pools

log = logging.getLogger(__name__)
COLLAPSE_SHARE = 0.9  # one model on more than this share of steps at the lowest eval rate


def start_ray(address: str | None = None) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this node belongs to, as on a
    ``ray up`` head node), or, without one, start a local Ray of this process (never another
    user's running cluster); nothing if this process is already connected."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if ray.is_initialized():
        return
    if address:
        from inframind_ray.serving.ray_address import join

        join(address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2),
                 include_dashboard=False, log_to_driver=False, configure_logging=False)


def build_algo(cfg: TrainConfig, env=None, env_runner_cls=None):
    """The RLlib PPO algorithm: two modules, the Lagrangian learner, local sampling. ``env`` (an
    env of the same config) only lends its spaces; one is built when not given.
    ``env_runner_cls`` replaces the sampler's runner (the live rollouts' runner of
    learning/continual.py)."""
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig

    from inframind_ray.learning.env import TwinOrchestrationEnv
    from inframind_ray.learning.env_runner import DecisionEnvRunner
    from inframind_ray.learning.lagrangian import LagrangianPPOLearner, LagrangianReward
    from inframind_ray.learning.modules import EXECUTOR, PLANNER, module_of, module_spec
    from inframind_ray.learning.overlap import OverlappedPPO

    torch.set_num_threads(cfg.ppo.torch_threads)
    own = env is None
    env = env or TwinOrchestrationEnv(cfg.env.model_dump())
    plan_agent, step_agent = "plan/0/0", "step/0/0/0"
    spec = module_spec(env.observation_spaces[plan_agent], env.action_spaces[plan_agent],
                       env.observation_spaces[step_agent], env.action_spaces[step_agent],
                       cfg.hidden)
    if own:
        env.close()
    p = cfg.ppo
    config = (
        PPOConfig(algo_class=OverlappedPPO if p.overlap else None)
        .environment(TwinOrchestrationEnv, env_config=cfg.env.model_dump(),
                     disable_env_checking=True)
        .multi_agent(policies=[PLANNER, EXECUTOR], policy_mapping_fn=module_of,
                     count_steps_by="agent_steps" if p.sampler == "decisions" else "env_steps")
        .rl_module(rl_module_spec=spec)
        .env_runners(num_env_runners=p.num_env_runners,
                     num_envs_per_env_runner=p.num_envs_per_env_runner,
                     batch_mode="complete_episodes", rollout_fragment_length="auto",
                     **({"env_runner_cls": env_runner_cls or DecisionEnvRunner,
                         "episodes_to_numpy": False}
                        if p.sampler == "decisions" or env_runner_cls else {}))
        .training(
            lr=p.lr, train_batch_size_per_learner=p.train_batch_size,
            minibatch_size=p.minibatch_size, num_epochs=p.num_epochs,
            entropy_coeff=p.entropy_coeff, clip_param=p.clip_param,
            vf_loss_coeff=p.vf_loss_coeff, gamma=1.0, lambda_=1.0, use_kl_loss=False,
        )
        .learners(
            num_learners=p.num_learners, num_gpus_per_learner=p.num_gpus_per_learner,
            custom_resources_per_learner=dict(p.learner_resources),
            learner_class=LagrangianPPOLearner,
            learner_connector=lambda *a, **k: LagrangianReward(
                lam=cfg.lagrangian.lam_init,
                mu=cfg.lagrangian.mu_init if cfg.lagrangian.accuracy_floor is not None else 0.0),
            learner_config_dict={**cfg.lagrangian.model_dump(), "decoupled": p.decoupled},
        )
        .debugging(seed=cfg.seed, log_level="ERROR", log_sys_usage=False)
        .reporting(metrics_num_episodes_for_smoothing=20)
    )
    # Overlapped sampling: the connector-state sync would wait for the sample in flight.
    config._dont_auto_sync_env_runner_states = p.overlap
    return config.build_algo()


def _learner_nets(algo) -> dict:
    from inframind_ray.learning.modules import EXECUTOR, PLANNER

    res = algo.learner_group.foreach_learner(
        lambda lr: {m: {k: v.detach().cpu().clone() for k, v in lr.module[m].net.state_dict()
                        .items()} for m in (PLANNER, EXECUTOR)})
    return next(iter(res)).get()


def _set_learner_nets(algo, nets: dict) -> None:
    algo.learner_group.foreach_learner(
        lambda lr: [lr.module[m].net.load_state_dict(sd) for m, sd in nets.items()])
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group,
                                       inference_only=True)


def export_policy(algo, pool_info, hidden: int, path: Path,
                  token_budget: TokenBudget = False) -> Path:
    """Write the learner's current nets as a LearnedPolicy checkpoint."""
    from inframind_ray.learning.modules import EXECUTOR, PLANNER
    from inframind_ray.policy.learned import LearnedPolicy

    nets = _learner_nets(algo)
    pol = LearnedPolicy(pool_info, hidden=hidden, token_budget=token_budget)
    pol.planner.load_state_dict(nets[PLANNER])
    pol.executor.load_state_dict(nets[EXECUTOR])
    return pol.save(path)


def evaluate(cfg: TrainConfig, checkpoint: Path | None, policy: str = "inframind") -> list[dict]:
    """Validation-split twin runs (one per eval rate) with the bench's cell runner: each cell
    ``eval.queries`` queries, or rate x ``eval.duration_s`` when that is set."""
    from inframind_ray.bench.runner import CellSpec, run_cell
    from inframind_ray.bench.sweep import queries_for
    from inframind_ray.pools.cards import build_pool_info
    from inframind_ray.tasks.registry import parse_mix
    from inframind_ray.tasks.workload import WorkloadSpec

    mix = parse_mix(cfg.env.tasks)
    rows = []
    for name, pool in validation_pools(cfg):
        factors = cfg.eval.load_factors
        cap = capacity_rpm(build_pool_info(pool), mix) if factors else None
        rates = [f * cap for f in factors] if factors else cfg.eval.rates
        for i, r in enumerate(rates):
            n = (queries_for(round(r, 3), cfg.eval.duration_s) if cfg.eval.duration_s
                 else cfg.eval.queries)
            w = WorkloadSpec(round(r, 3), n, "poisson", "val",
                             tuple(cfg.eval.budget), cfg.eval.seed, tuple(mix.items()))
            res = run_cell(CellSpec(pool, policy, w, None,
                                    str(checkpoint) if checkpoint else None,
                                    deadlines=cfg.env.deadlines))
            s = res.summary
            row = {"pool": name, **{k: s[k] for k in (
                "rate_per_min", "goodput", "accuracy", "slo_attainment", "model_mix",
                "strategy_mix", "topology_mix")}, "queries": n}
            if factors:
                row["load_factor"] = factors[i]
            rows.append(row)
    return rows


def per_pool(rows: list[dict], key: str = "goodput") -> dict[str, float]:
    """Mean of ``key`` over the rates of each validation pool (rows without a pool: the env's)."""
    by: dict[str, list[float]] = {}
    for e in rows:
        by.setdefault(e.get("pool", "pool"), []).append(e[key])
    return {p: round(float(np.mean(v)), 4) for p, v in by.items()}


def collapse_by_pool(rows: list[dict], strongest: dict[str, str]) -> dict[str, str]:
    """The collapse guard per validation pool: {pool: flag} for the pools that raise one
    (``strongest``: each pool's most accurate model)."""
    pools = sorted({e.get("pool", "pool") for e in rows})
    flags = {p: collapse_flag([e for e in rows if e.get("pool", "pool") == p],
                              strongest.get(p, "")) for p in pools}
    return {p: f for p, f in flags.items() if f}


def collapse_flag(rows: list[dict], strongest: str) -> str | None:
    """The collapse guard: one model on > 90% of steps at the lowest eval rate."""
    low = min(rows, key=lambda r: r["rate_per_min"])
    if not low["model_mix"]:
        return None
    model, share = max(low["model_mix"].items(), key=lambda kv: kv[1])
    if share <= COLLAPSE_SHARE:
        return None
    kind = ("collapse to a weaker model" if model != strongest
            else "single-model policy (the strongest model) at low load")
    return (f"{model} takes {share:.0%} of steps at {low['rate_per_min']:g} req/min: {kind}")


def train(cfg: TrainConfig, out: Path, resume: bool = False,
          on_row: Callable[[dict], None] | None = None, progress: bool = True) -> dict:
    """Run the whole training; write OUT/{metrics.jsonl, checkpoints/, rllib/, policy/,
    summary.json}; return the summary."""
    import warnings

    from inframind_ray.learning.env import TwinOrchestrationEnv
    from inframind_ray.learning.modules import EXECUTOR, PLANNER
    from inframind_ray.learning.warmstart import warm_start
    from inframind_ray.policy.learned import LearnedPolicy

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*Casting input x to numpy array.*")
    for name in ("ray.rllib", "ray.tune", "ray._private.worker"):
        logging.getLogger(name).setLevel(logging.ERROR)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    metrics_path = out / "metrics.jsonl"
    rllib_dir = out / "rllib"
    start_ray()
    env = TwinOrchestrationEnv(cfg.env.model_dump())
    info = env.info
    t0 = time.perf_counter()
    algo = build_algo(cfg, env)
    history: list[dict] = []
    start = 0
    try:
        if resume and (rllib_dir / "done_iterations").exists():
            algo.restore_from_path(str(rllib_dir.resolve()))
            start = int((rllib_dir / "done_iterations").read_text())
            history = [json.loads(x) for x in metrics_path.read_text().splitlines() if x]
            history = [h for h in history if h["iteration"] <= start]
        else:
            metrics_path.write_text("")
            untrained = LearnedPolicy(info, seed=cfg.seed, hidden=cfg.hidden,
                                    token_budget=cfg.env.token_budget)
            untrained_ckpt = untrained.save(out / "checkpoints" / "untrained")
            row = {"iteration": 0, "phase": "untrained",
                   "eval": evaluate(cfg, untrained_ckpt)}
            if cfg.warm_start is not None:
                pol, ws_row = warm_start(cfg.warm_start, cfg.env, cfg.seed, cfg.hidden,
                                         cfg.lagrangian.lam_init, progress)
                _set_learner_nets(algo, {PLANNER: pol.planner.state_dict(),
                                         EXECUTOR: pol.executor.state_dict()})
                ckpt = export_policy(algo, info, cfg.hidden, out / "checkpoints" / "iter_0",
                                     cfg.env.token_budget)
                row = {"iteration": 0, "phase": "warm_start", **ws_row,
                       "eval": evaluate(cfg, ckpt), "untrained_eval": row["eval"]}
            _log_row(row, history, metrics_path, on_row)
        settle()  # the driver's heap after setup and warm start (learning/heap.py)
        for it in range(start, cfg.ppo.iterations):
            t_it = time.perf_counter()
            r = algo.train()
            train_s = time.perf_counter() - t_it
            prev = next((h for h in reversed(history) if h.get("phase") == "ppo"), None)
            row = _iteration_row(it + 1, r, time.perf_counter() - t0, train_s, prev)
            if (it + 1) % cfg.eval.every == 0 or it + 1 == cfg.ppo.iterations:
                ckpt = export_policy(algo, info, cfg.hidden, out / "checkpoints" / f"iter_{it+1}",
                                     cfg.env.token_budget)
                row["eval"] = evaluate(cfg, ckpt)
            _log_row(row, history, metrics_path, on_row)
            algo.save_to_path(str(rllib_dir.resolve()))
            (rllib_dir / "done_iterations").write_text(str(it + 1))
    finally:
        algo.stop()
        env.close()
    return _finish(cfg, out, history, time.perf_counter() - t0)


DIAGNOSTICS = {"approx_kl": "approx_kl", "clip_fraction": "clip_fraction",
               "explained_variance": "vf_explained_var", "entropy": "entropy",
               "policy_loss": "policy_loss", "vf_loss": "vf_loss"}
"""CleanRL's per-iteration diagnostics, per module, from RLlib's learner results (the clip
fraction and the approximate KL are logged by ``LagrangianPPOLearner``)."""


def _iteration_row(it: int, r: dict, elapsed: float, train_s: float,
                   prev: dict | None = None) -> dict:
    """One metrics.jsonl row of a PPO iteration; ``decisions_per_s``: the environment decisions
    sampled in this iteration (``decisions``: lifetime count) over the wall time of its
    ``algo.train()`` (sampling and learning). ``env_steps``: RLlib's env steps (one answers a
    decision of every sub-simulation). ``policy_lag`` (with ``ppo.overlap`` only): learner
    updates between the weights that sampled the batch and the learner's."""
    from inframind_ray.learning.modules import EXECUTOR, PLANNER
    from inframind_ray.learning.overlap import LAG

    runners, learners = r.get("env_runners", {}), r.get("learners", {})
    lag = learners.get("lagrangian", {}) if isinstance(learners, dict) else {}
    everything = learners.get("__all_modules__", {}) if isinstance(learners, dict) else {}

    def num(x):
        return None if x is None else round(float(x), 4)

    steps = int(r.get("num_env_steps_sampled_lifetime", 0) or 0)
    decisions = decisions_sampled(r)
    prev_dec = (prev or {}).get("decisions") or 0
    diag = {m: {k: num(learners.get(m, {}).get(v)) for k, v in DIAGNOSTICS.items()}
            for m in (PLANNER, EXECUTOR) if isinstance(learners.get(m), dict)}
    return {"iteration": it, "phase": "ppo", "elapsed_s": round(elapsed, 1),
            "train_goodput": num(lag.get("goodput")), "train_accuracy": num(lag.get("accuracy")),
            "env_steps": steps, "decisions": decisions,
            "decisions_per_s": round((decisions - prev_dec) / train_s, 1) if train_s > 0 else None,
            "lambda": num(lag.get("lambda")), "mean_cost": num(lag.get("mean_cost")),
            "mu": num(lag.get("mu")),
            "diagnostics": diag,
            **({"policy_lag": num(everything[LAG])} if LAG in everything else {}),
            "module_returns": {m: num(v) for m, v in
                               runners.get("module_episode_returns_mean", {}).items()}}


def decisions_sampled(r: dict) -> int:
    """Lifetime decisions sampled from an ``algo.train()`` result: ``DecisionEnvRunner``'s
    count, else RLlib's env steps (one decision each on the env's step protocol with one
    sub-simulation)."""
    from inframind_ray.learning.env_runner import DECISIONS

    runners = r.get("env_runners", {})
    return int(runners.get(DECISIONS) or r.get("num_env_steps_sampled_lifetime", 0) or 0)


def _log_row(row: dict, history: list, path: Path, on_row) -> None:
    history.append(row)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
    if on_row:
        on_row(row)


def report(cfg: TrainConfig, out: Path, first: dict) -> dict:
    """The kept checkpoint beside the run's first one on ``eval.report_seed``'s validation
    draws: goodput per pool and the difference of their means over the pools."""
    rep = cfg.model_copy(update={"eval": cfg.eval.model_copy(
        update={"seed": cfg.eval.report_seed})})
    start_dir = out / "checkpoints" / ("iter_0" if first["phase"] == "warm_start"
                                       else "untrained")
    kept, start = per_pool(evaluate(rep, out / "policy")), per_pool(evaluate(rep, start_dir))
    k, s0 = float(np.mean(list(kept.values()))), float(np.mean(list(start.values())))
    return {"seed": cfg.eval.report_seed, "start_phase": first["phase"],
            "kept_by_pool": kept, "start_by_pool": start, "kept_mean": round(k, 4),
            "start_mean": round(s0, 4), "kept_minus_start": round(k - s0, 4)}


def strongest_by_pool(cfg: TrainConfig) -> dict[str, str]:
    """Each validation pool's most accurate model."""
    from inframind_ray.pools.cards import build_pool_info

    return {name: build_pool_info(pool).strongest for name, pool in validation_pools(cfg)}


def _finish(cfg: TrainConfig, out: Path, history: list[dict], elapsed: float) -> dict:
    evals = [h for h in history if "eval" in h and h["phase"] != "untrained"]
    best = max(evals, key=lambda h: np.mean([e["goodput"] for e in h["eval"]]))
    src = out / "checkpoints" / f"iter_{best['iteration']}"
    if (out / "policy").exists():
        shutil.rmtree(out / "policy")
    shutil.copytree(src, out / "policy")
    first = history[0]
    untrained = first.get("untrained_eval", first["eval"])
    elapsed = max([elapsed, *(h.get("elapsed_s") or 0 for h in history)])
    summary = {
        "name": cfg.name, "iterations": cfg.ppo.iterations, "elapsed_s": round(elapsed, 1),
        "best_iteration": best["iteration"],
        "untrained_val_goodput": round(float(np.mean([e["goodput"] for e in untrained])), 4),
        "best_val_goodput": round(float(np.mean([e["goodput"] for e in best["eval"]])), 4),
        "best_val_goodput_by_pool": per_pool(best["eval"]),
        "start_phase": first["phase"],
        "start_val_goodput_by_pool": per_pool(first["eval"]),
        "best_eval": best["eval"],
        "final_lambda": next((h["lambda"] for h in reversed(history) if h.get("lambda")
                              is not None), cfg.lagrangian.lam_init),
        "collapse": collapse_by_pool(best["eval"], strongest_by_pool(cfg)),
    }
    if cfg.eval.report_seed is not None:
        summary["report"] = report(cfg, out, first)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    from inframind_ray.learning.plots import plot_training

    plot_training(history, out / "training.png")
    return summary
