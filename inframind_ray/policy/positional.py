"""The previous learned policy (feature version 1, kept to compare against): positional per-model
vectors in pool order, so its checkpoints load only on the exact ordered model list they were
trained on. Registered as ``inframind-v1`` with the checkpoint it shipped with
(``data/policy_v1``); the current policy is ``policy/learned.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from inframind_ray.core.topology import MAX_AGENTS, Plan
from inframind_ray.core.types import PoolInfo, QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import (
    EMB_DIM,
    KINDS,
    OCCUPANCY,
    PLAN_ACTIONS,
    ROLES,
    STALE_MASK_S,
    STRATEGIES,
    TOPOLOGIES,
    plan_of,
)
from inframind_ray.policy.latency import congestion, latency_terms, slots
from inframind_ray.policy.learned import CheckpointError, masked

PER_MODEL = 7
V1_CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "policy_v1"


class PositionalFeatures:
    """Version-1 vectors: per-model metrics concatenated in pool order."""

    def __init__(self, pool: PoolInfo, token_budget: bool = False) -> None:
        self.pool, self.token_budget, self.m = pool, token_budget, len(pool.models)
        self.z_dim = 2 + (PER_MODEL + 2) * self.m
        self.sem_dim = EMB_DIM + len(ROLES) + len(KINDS) + len(TOPOLOGIES)
        self.res_dim = 3 + (PER_MODEL + 1) * self.m + 3 * self.m * len(STRATEGIES) + self.m

    def _models(self, state: SystemState) -> list[float]:
        out = []
        for info in self.pool.models:
            ld = state.models[info.name]
            n = slots(info, ld)
            out += [ld.waiting / n, ld.running / n, ld.kv_usage, min(ld.ttft_s / 10.0, 10.0),
                    min(ld.e2e_s / 10.0, 10.0), min(ld.age(state.now) / 5.0, 10.0),
                    float(ld.available)]
        return out

    def _ahead(self, state: SystemState, deadline_in_s: float) -> list[float]:
        return [state.models[i.name].waiting_ahead(deadline_in_s, state.now)
                / slots(i, state.models[i.name]) for i in self.pool.models]

    @staticmethod
    def _emb(q: QueryInfo) -> np.ndarray:
        return (np.zeros(EMB_DIM, np.float32) if q.embedding is None
                else np.asarray(q.embedding, np.float32))

    def planner(self, q: QueryInfo, state: SystemState) -> dict[str, np.ndarray]:
        """Embedding and z0."""
        z = np.asarray([q.budget_s / 100.0, np.log1p(q.budget_s) / 5.0, *self._models(state),
                        *self._ahead(state, q.deadline - state.now),
                        *(i.expected_accuracy(q) for i in self.pool.models)], np.float32)
        return {"emb": self._emb(q), "z": z}

    def executor(self, ctx: StepContext) -> dict[str, np.ndarray]:
        """Semantic and resource pathways and the (model, strategy) mask."""
        sem = np.zeros(self.sem_dim - EMB_DIM, np.float32)
        sem[ROLES.index(ctx.node.role) if ctx.node.role in ROLES else 0] = 1.0
        sem[len(ROLES) + KINDS.index(ctx.node.kind)] = 1.0
        sem[len(ROLES) + len(KINDS) + TOPOLOGIES.index(ctx.plan.topology)] = 1.0
        per_step = max(1e-3, ctx.remaining_budget_s / max(1, ctx.remaining_depth))
        prices, tolls, mask, accs = [], [], [], []
        for info in self.pool.models:
            ld = ctx.state.models[info.name]
            ok = ld.available and ld.age(ctx.now) <= STALE_MASK_S
            cong = congestion(info, ld)
            prior = info.expected_accuracy(ctx.query)
            keep = info.card(ctx.query.task).retention
            for s in STRATEGIES:
                accs.append(prior * keep[s])
                tokens = info.call_tokens(s, self.token_budget, ctx.query.task)
                service, wait = latency_terms(info, ld, ctx.prompt_tokens(s), tokens, OCCUPANCY)
                prices.append(min((service + wait) / per_step, 5.0))
                tolls.append(min(cong * service / 10.0, 10.0))
                mask.append(float(ok and s in ctx.allowed))
        if not any(mask):
            mask = [float(s in ctx.allowed) for _ in self.pool.models for s in STRATEGIES]
        earlier = [ctx.earlier_models.count(i.name) / MAX_AGENTS for i in self.pool.models]
        res = np.asarray([ctx.remaining_budget_s / 100.0, ctx.remaining_depth / 5.0,
                          min(per_step / 100.0, 10.0), *self._models(ctx.state),
                          *self._ahead(ctx.state, ctx.remaining_budget_s), *prices, *tolls,
                          *accs, *earlier], np.float32)
        return {"sem": np.concatenate([self._emb(ctx.query), sem]), "res": res,
                "mask": np.asarray(mask, np.float32)}


class PositionalPlannerNet(nn.Module):
    """FiLM(query embedding | z0) -> plan logits and a value."""

    def __init__(self, z_dim: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(EMB_DIM, hidden), nn.ReLU())
        self.film = nn.Linear(z_dim, 2 * hidden)
        self.trunk = nn.Sequential(nn.Linear(hidden + z_dim, hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, emb: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.film(z).chunk(2, dim=-1)
        return self.pi(self.trunk(torch.cat([self.embed(emb) * (1 + gamma) + beta, z], -1)))


class PositionalExecutorNet(nn.Module):
    """Semantic + resource pathways -> (model, strategy) logits and a value."""

    def __init__(self, sem_dim: int, res_dim: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.sem = nn.Sequential(nn.Linear(sem_dim, hidden), nn.ReLU())
        self.res = nn.Sequential(nn.Linear(res_dim, hidden), nn.ReLU())
        self.fuse = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, sem: torch.Tensor, res: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked(self.pi(self.fuse(torch.cat([self.sem(sem), self.res(res)], -1))), mask)


class PositionalPolicy(Policy):
    """The version-1 learned policy (greedy), loaded only on its own ordered model list."""

    name = "inframind-v1"

    def __init__(self, pool: PoolInfo, spec: dict, tensors: dict) -> None:
        super().__init__(pool)
        self.token_budget = bool(spec.get("token_budget", False))
        self.f = f = PositionalFeatures(pool, self.token_budget)
        h = int(spec.get("hidden", 128))
        self.planner = PositionalPlannerNet(f.z_dim, len(PLAN_ACTIONS), h)
        self.executor = PositionalExecutorNet(f.sem_dim, f.res_dim, f.m * len(STRATEGIES), h)
        for net, pre in ((self.planner, "planner."), (self.executor, "executor.")):
            net.load_state_dict({k.removeprefix(pre): v for k, v in tensors.items()
                                 if k.startswith(pre)})

    @torch.no_grad()
    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        o = self.f.planner(query, state)
        return plan_of(int(self.planner(*(torch.as_tensor(o[k])[None] for k in ("emb", "z")))
                           .argmax(-1)))

    @torch.no_grad()
    def _decide(self, ctx: StepContext) -> StepDecision:
        o = self.f.executor(ctx)
        a = int(self.executor(*(torch.as_tensor(o[k])[None] for k in ("sem", "res", "mask")))
                .argmax(-1))
        m, s = divmod(a, len(STRATEGIES))
        return StepDecision(self.pool.models[m].name, STRATEGIES[s])

    @classmethod
    def load(cls, path: str | Path, pool: PoolInfo) -> PositionalPolicy:
        """A version-1 checkpoint on its own model list; CheckpointError in one line otherwise."""
        path = Path(path)
        try:
            spec = json.loads((path / "spec.json").read_text())
            tensors = load_file(path / "policy.safetensors")
        except Exception as e:  # missing, not JSON, corrupt weights
            raise CheckpointError(f"checkpoint {path}: not a readable v1 checkpoint "
                                  f"({type(e).__name__})") from None
        if spec.get("format") != "inframind-policy-v1":
            raise CheckpointError(f"checkpoint {path}: not a v1 checkpoint")
        if list(spec.get("models", [])) != list(pool.names):
            raise CheckpointError(f"checkpoint {path}: trained for models {spec.get('models')}, "
                                  f"the pool has {list(pool.names)}")
        try:
            return cls(pool, spec, tensors)
        except RuntimeError as e:
            raise CheckpointError(f"checkpoint {path}: weights do not fit "
                                  f"({str(e).splitlines()[0]})") from None
