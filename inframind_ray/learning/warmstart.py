"""Warm start: behaviour cloning of a teacher policy in the twin, before PPO, across pools.

The teacher (by default ``priced-topology``, policy/baselines.py) runs the same randomised
episodes as the RL env (train split only) on several pools in turn (``WarmStart.pools``: named
pools, subsets of their models, other slot counts; plus ``sampled_pools`` random ones from
``pools.sampler`` where it exists); a recorder computes the learned policy's own observations at
every decision and keeps the teacher's action. Both nets, whose weights do not depend on the
pool, are then fitted by masked cross-entropy, and their value heads by regression on the
decision's final reward (quality - lam * cost * weight). PPO starts from there instead of from
a uniform policy, which in this twin wastes its first iterations on random routing that
congests every model.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from rich.progress import Progress

from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.core.topology import Plan
from inframind_ray.core.types import QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.errors import ConfigError
from inframind_ray.learning.env import EnvConfig, Episode, TwinOrchestrationEnv, start_pool
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.baselines import make_policy
from inframind_ray.policy.features import MAX_MODELS, PLAN_ACTIONS
from inframind_ray.policy.learned import EXECUTOR_KEYS, PLANNER_KEYS, LearnedPolicy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.workload import make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.simloop import run_simulated


class PoolVariant(BaseModel):
    """A pool to collect demonstrations on: a pool file, optionally a subset of its models
    (in the order given) and other sequence-slot counts."""

    model_config = ConfigDict(extra="forbid")
    pool: str = "default"
    models: list[str] | None = Field(None, min_length=1, max_length=MAX_MODELS)
    max_num_seqs: dict[str, int] = {}

    def build(self) -> PoolConfig:
        """The PoolConfig; ConfigError naming an unknown model."""
        cfg = load_pool(self.pool)
        by_name = {m.name: m for m in cfg.models}
        names = self.models or list(by_name)
        bad = [n for n in [*names, *self.max_num_seqs] if n not in by_name]
        if bad:
            raise ConfigError("warm_start.pools", f"pool {self.pool!r} has no model "
                              f"{', '.join(map(repr, bad))}")
        models = [by_name[n].model_copy(update={"max_num_seqs": self.max_num_seqs[n]})
                  if n in self.max_num_seqs else by_name[n] for n in names]
        label = "+".join(names) if self.models else cfg.name
        return cfg.model_copy(update={"models": models, "name": f"{cfg.name}[{label}]"})


class WarmStart(BaseModel):
    """Behaviour cloning of a teacher before PPO."""

    model_config = ConfigDict(extra="forbid")
    teacher: str = "priced-topology"  # the shipped policy's teacher (policy/baselines.py)
    episodes: int = Field(40, ge=1)
    epochs: int = Field(20, ge=1)
    lr: float = Field(1e-3, gt=0)
    pools: list[PoolVariant] = []
    """Pools the demonstrations come from, episodes round-robin over them (empty: the env's)."""
    sampled_pools: int = Field(0, ge=0)
    """Further random pools from ``pools.sampler.sample_pool`` (when that module exists)."""


def demo_pools(ws: WarmStart, env_pool: str, seed: int) -> list[PoolConfig]:
    """The pools of a warm start (see ``WarmStart``): the named ones, then the sampled ones; the
    env's pool only when there are neither (so a run on sampled pools alone never sees the pool
    it is validated or benched on)."""
    pools = [v.build() for v in ws.pools]
    if not pools and not ws.sampled_pools:
        pools = [load_pool(env_pool)]
    if ws.sampled_pools:
        try:
            from inframind_ray.pools.sampler import sample_pool  # type: ignore[import-not-found]
        except ImportError:
            raise ConfigError("warm_start.sampled_pools",
                              "needs pools/sampler.py (sample_pool), not in this build") from None
        rng = np.random.default_rng([seed, 19])
        pools += [sample_pool(rng) for _ in range(ws.sampled_pools)]
    return pools


class _Recorder(Policy):
    """Acts as the teacher; records (observation, teacher action) per decision."""

    name = "recorder"

    def __init__(self, teacher: Policy, student: LearnedPolicy) -> None:
        super().__init__(teacher.pool)
        self.teacher, self.f = teacher, student.features
        self.plans: dict[str, tuple[dict, int]] = {}
        self.steps: dict[tuple[str, str], tuple[dict, int]] = {}

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        plan = self.teacher.plan(query, state)
        if plan in PLAN_ACTIONS:
            self.plans[query.query_id] = (self.f.planner(query, state), PLAN_ACTIONS.index(plan))
        return plan

    def _decide(self, ctx: StepContext) -> StepDecision:
        d = self.teacher.decide(ctx)
        obs = self.f.executor(ctx)
        a = self.f.action(d.model, d.strategy)
        if obs["mask"][a] > 0:
            self.steps[(ctx.query.query_id, ctx.node.id)] = (obs, a)
        return d


def collect(envs: list, teacher_name: str, episodes: int, seed: int, lam: float,
            progress: bool = True) -> dict[str, list]:
    """Run the teacher on ``episodes`` randomised episodes, round-robin over the envs (one per
    pool); return planner and executor samples as (obs, action, return) lists."""
    out: dict[str, list] = {"planner": [], "executor": []}
    rng = np.random.default_rng(seed)
    with Progress(disable=not progress) as bar:
        task = bar.add_task(f"warm start: {teacher_name} demos on {len(envs)} pool(s)",
                            total=episodes)
        for i in range(episodes):
            env = envs[i % len(envs)]
            student = LearnedPolicy(env.info, token_budget=env.cfg.token_budget)
            ep = env.sample_episode(rng)
            rec = _Recorder(make_policy(teacher_name, env.info, ep.workload.seed), student)
            density, results = env.slack_density(), _simulate(env, ep, rec)
            if density is not None:  # it counts the queries in the order they finish
                results.sort(key=lambda r: r.end)
            for res in results:
                qid = res.query.query_id
                t = env.reward_terms(res, density=density)  # the env's own reward
                if qid in rec.plans:
                    obs, a = rec.plans[qid]
                    out["planner"].append((obs, a, t.reward(None, lam)))
                for node in t.weight:
                    if (qid, node) in rec.steps:
                        obs, a = rec.steps[(qid, node)]
                        out["executor"].append((obs, a, t.reward(node, lam)))
            bar.advance(task)
    return out


def _simulate(env, ep: Episode, policy: Policy) -> list:
    queries = make_queries(ep.workload)
    abort = env.pool.engine.on_deadline != "continue"

    async def main() -> list:
        loop = asyncio.get_running_loop()
        engines, state = start_pool(env.pool, env.info, ep)
        backend = TwinBackend(engines, env.outcome)
        tasks = []
        for q in queries:
            await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
            tasks.append(loop.create_task(run_query(
                replace(q, arrival_s=loop.time()), policy, backend, state,
                abort_on_deadline=abort, deadlines=ep.deadlines)))
        return list(await asyncio.gather(*tasks))

    results, _ = run_simulated(main())
    return results


def warm_start(ws: WarmStart, env_cfg: EnvConfig, seed: int, hidden: int, lam: float,
               progress: bool = True) -> tuple[LearnedPolicy, dict]:
    """Collect the teacher's demonstrations on the warm start's pools and fit a fresh policy;
    returns it (built on the env's pool) and a metrics row."""
    pools = demo_pools(ws, env_cfg.pool, seed)
    envs = [TwinOrchestrationEnv(env_cfg.model_dump(), pool=p) for p in pools]
    demos = collect(envs, ws.teacher, ws.episodes, seed, lam, progress)
    pol = LearnedPolicy(build_pool_info(load_pool(env_cfg.pool)), seed=seed, hidden=hidden,
                        token_budget=env_cfg.token_budget)
    acc_p = fit(pol.planner, demos["planner"], PLANNER_KEYS, ws.epochs, ws.lr, seed)
    acc_e = fit(pol.executor, demos["executor"], EXECUTOR_KEYS, ws.epochs, ws.lr, seed)
    row = {"teacher": ws.teacher, "pools": [p.name for p in pools],
           "demos": {k: len(v) for k, v in demos.items()},
           "imitation_accuracy": {"planner": round(acc_p, 4), "executor": round(acc_e, 4)}}
    return pol, row


def fit(net: torch.nn.Module, samples: list, keys: tuple[str, ...], epochs: int, lr: float,
        seed: int) -> float:
    """Masked cross-entropy on the teacher's actions plus value regression (``keys``: the
    net's observation keys in argument order, the action mask last); returns the final
    training accuracy of the argmax action."""
    if not samples:
        return float("nan")
    torch.manual_seed(seed)
    xs = [torch.as_tensor(np.stack([s[0][k] for s in samples])) for k in keys]
    act = torch.as_tensor([s[1] for s in samples])
    ret = torch.as_tensor([s[2] for s in samples], dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n, bs = len(samples), 256
    for _ in range(epochs):
        perm = torch.randperm(n)
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            logits, v = net(*(x[idx] for x in xs))
            loss = torch.nn.functional.cross_entropy(logits, act[idx])
            loss = loss + 0.5 * torch.nn.functional.mse_loss(v, ret[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        hits = sum(int((net(*(x[i:i + 4096] for x in xs))[0].argmax(-1)
                        == act[i:i + 4096]).sum()) for i in range(0, n, 4096))
        return hits / n
