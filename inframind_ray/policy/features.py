"""Observation features of the learned policy, built from exactly what the baselines see
(query, plan, node, budget left, live per-model metrics, the latency price list, and each
model's train-split accuracy prior on the query's task family and category)."""

from __future__ import annotations

import numpy as np

from inframind_ray.core.constants import EMBEDDING_DIM
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import (
    AGGREGATOR_ROLE,
    DEFAULT_ROLES,
    MAX_AGENTS,
    NodeKind,
    Plan,
    Topology,
)
from inframind_ray.core.types import PoolInfo, QueryInfo, StepContext, SystemState
from inframind_ray.policy.latency import congestion, latency_terms, slots

EMB_DIM = EMBEDDING_DIM
STRATEGIES = tuple(Strategy)
ROLES = (*DEFAULT_ROLES, AGGREGATOR_ROLE)
KINDS = tuple(NodeKind)
TOPOLOGIES = tuple(Topology)
# The planner's discrete choices. Debates with one round are voting ensembles (K independent
# solvers, then an aggregator): the cheapest way to spend spare capacity on accuracy.
PLAN_ACTIONS: tuple[Plan, ...] = (
    Plan.make(Topology.IO), Plan.make(Topology.COT),
    *(Plan.make(Topology.CHAIN, k) for k in (2, 3, 4)),
    *(Plan.make(Topology.DEBATE, k) for k in (2, 3, 4)),
    *(Plan.make(Topology.DEBATE, k, rounds=1) for k in (2, 3, 5)),
    Plan.make(Topology.REFLECTION),
    *(Plan.make(Topology.FULLCONNECTED, k) for k in (2, 3, 4)),
)
PER_MODEL = 7  # waiting, running, kv_usage, ttft, e2e, age, available (+ waiting ahead, per query)
OCCUPANCY = "service"  # the price list's slot-time estimate (policy.latency.latency_terms)
STALE_MASK_S = 10.0  # executor masks models whose metrics are older than this


def plan_of(action: int) -> Plan:
    """The plan of a planner action index."""
    return PLAN_ACTIONS[action]


class FeatureBuilder:
    """Fixed-size vectors and action masks for one pool (model order = pool order)."""

    def __init__(self, pool: PoolInfo, token_budget: bool = False) -> None:
        self.pool = pool
        self.token_budget = token_budget  # price DeepThink under the policy's token budget
        self.m = len(pool.models)
        self.z_dim = 2 + (PER_MODEL + 2) * self.m
        self.sem_dim = EMB_DIM + len(ROLES) + len(KINDS) + len(TOPOLOGIES)
        self.res_dim = 3 + (PER_MODEL + 1) * self.m + 3 * self.m * len(STRATEGIES) + self.m
        self.n_plan = len(PLAN_ACTIONS)
        self.n_exec = self.m * len(STRATEGIES)

    def _models(self, state: SystemState) -> np.ndarray:
        out = []
        for info in self.pool.models:
            ld = state.models[info.name]
            n = slots(info, ld)
            out += [ld.waiting / n, ld.running / n, ld.kv_usage,
                    min(ld.ttft_s / 10.0, 10.0), min(ld.e2e_s / 10.0, 10.0),
                    min(ld.age(state.now) / 5.0, 10.0), float(ld.available)]
        return np.asarray(out, np.float32)

    def _ahead(self, state: SystemState, deadline_in_s: float) -> np.ndarray:
        """Per model: waiting requests its EDF queues would serve before a request due in
        ``deadline_in_s`` seconds, per sequence slot (the queue's deadline mix)."""
        return np.asarray([state.models[i.name].waiting_ahead(deadline_in_s, state.now)
                           / slots(i, state.models[i.name]) for i in self.pool.models],
                          np.float32)

    def _priors(self, q: QueryInfo) -> np.ndarray:
        """Per model: the train-split accuracy of its step-by-step answers on the query's task
        family and category (the model card's prior)."""
        return np.asarray([i.expected_accuracy(q) for i in self.pool.models], np.float32)

    @staticmethod
    def _emb(q: QueryInfo) -> np.ndarray:
        if q.embedding is None:
            return np.zeros(EMB_DIM, np.float32)
        return np.asarray(q.embedding, np.float32)

    def planner(self, q: QueryInfo, state: SystemState) -> dict[str, np.ndarray]:
        """Query embedding, system-state vector z0 and the (all-valid) action mask."""
        z = np.concatenate([[q.budget_s / 100.0, np.log1p(q.budget_s) / 5.0],
                            self._models(state),
                            self._ahead(state, q.deadline - state.now),
                            self._priors(q)]).astype(np.float32)
        return {"emb": self._emb(q), "z": z, "mask": np.ones(self.n_plan, np.float32)}

    def executor(self, ctx: StepContext) -> dict[str, np.ndarray]:
        """Semantic and resource pathways, and the mask over (model, strategy). Per action the
        resource pathway has the price list (predicted latency / the budget share of this step)
        and the congestion toll (queued requests per slot x service seconds: the slot time the
        call would take from a queue)."""
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
        if not any(mask):  # nothing reported yet: allow every model, keep the strategy mask
            mask = [float(s in ctx.allowed) for _ in self.pool.models for s in STRATEGIES]
        earlier = [ctx.earlier_models.count(info.name) / MAX_AGENTS for info in self.pool.models]
        res = np.concatenate([[ctx.remaining_budget_s / 100.0, ctx.remaining_depth / 5.0,
                               min(per_step / 100.0, 10.0)], self._models(ctx.state),
                              self._ahead(ctx.state, ctx.remaining_budget_s),
                              prices, tolls, accs, earlier]).astype(np.float32)
        return {"sem": np.concatenate([self._emb(ctx.query), sem]).astype(np.float32),
                "res": res, "mask": np.asarray(mask, np.float32)}

    def decision(self, action: int) -> tuple[str, Strategy]:
        """(model, strategy) of an executor action index."""
        m, s = divmod(action, len(STRATEGIES))
        return self.pool.models[m].name, STRATEGIES[s]
