"""Warm start: behaviour cloning of a teacher policy in the twin, before PPO.

The teacher (by default ``priced-topology``, policy/baselines.py) runs the same randomised
episodes as the RL env (train split only); a recorder computes the learned policy's own
observations at every decision and keeps the teacher's action. Both nets are then fitted by
masked cross-entropy, and their value heads by regression on the decision's final reward
(quality - lam * cost * weight). PPO starts from there instead of from a uniform policy, which in
this twin wastes its first iterations on random routing that congests every model.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import torch
from rich.progress import Progress

from inframind_ray.core.topology import Plan
from inframind_ray.core.types import QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.learning.env import Episode, start_pool
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.baselines import make_policy
from inframind_ray.policy.features import PLAN_ACTIONS, STRATEGIES
from inframind_ray.policy.learned import LearnedPolicy
from inframind_ray.tasks.workload import make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.simloop import run_simulated


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
        a = self.pool.names.index(d.model) * len(STRATEGIES) + STRATEGIES.index(d.strategy)
        if obs["mask"][a] > 0:
            self.steps[(ctx.query.query_id, ctx.node.id)] = (obs, a)
        return d


def collect(env, teacher_name: str, episodes: int, seed: int, lam: float,
            progress: bool = True) -> dict[str, list]:
    """Run the teacher on ``episodes`` randomised env episodes; return planner and executor
    samples as (obs, action, return) lists."""
    student = LearnedPolicy(env.info, token_budget=env.cfg.token_budget)
    out: dict[str, list] = {"planner": [], "executor": []}
    rng = np.random.default_rng(seed)
    with Progress(disable=not progress) as bar:
        task = bar.add_task(f"warm start: {teacher_name} demos", total=episodes)
        for _ in range(episodes):
            ep = env.sample_episode(rng)
            rec = _Recorder(make_policy(teacher_name, env.info, ep.workload.seed), student)
            for res in _simulate(env, ep, rec):
                qid = res.query.query_id
                t = env.reward_terms(res)  # the env's own reward
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
    abort = env.pool.engine.on_deadline == "abort"

    async def main() -> list:
        loop = asyncio.get_running_loop()
        engines, state = start_pool(env.pool, env.info, ep)
        backend = TwinBackend(engines, env.outcome)
        tasks = []
        for q in queries:
            await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
            tasks.append(loop.create_task(run_query(
                replace(q, arrival_s=loop.time()), policy, backend, state,
                abort_on_deadline=abort)))
        return list(await asyncio.gather(*tasks))

    results, _ = run_simulated(main())
    return results


def fit(net: torch.nn.Module, samples: list, keys: tuple[str, ...], epochs: int, lr: float,
        seed: int) -> float:
    """Masked cross-entropy on the teacher's actions plus value regression; returns the final
    training accuracy of the argmax action."""
    if not samples:
        return float("nan")
    torch.manual_seed(seed)
    xs = [torch.as_tensor(np.stack([s[0][k] for s in samples])) for k in keys]
    mask = torch.as_tensor(np.stack([s[0]["mask"] for s in samples]))
    act = torch.as_tensor([s[1] for s in samples])
    ret = torch.as_tensor([s[2] for s in samples], dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n, bs = len(samples), 256
    for _ in range(epochs):
        perm = torch.randperm(n)
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            logits, v = net(*(x[idx] for x in xs), mask[idx])
            loss = torch.nn.functional.cross_entropy(logits, act[idx])
            loss = loss + 0.5 * torch.nn.functional.mse_loss(v, ret[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        logits, _ = net(*xs, mask)
        return float((logits.argmax(-1) == act).float().mean())
