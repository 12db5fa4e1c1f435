"""Observation features of the learned policy: one row per pool model (padded to MAX_MODELS),
built from exactly what the baselines see (query, plan, node, budget left, live per-model
metrics, the latency price list, and each model's card: size, profile speeds, slots, and its
train-split accuracy and length priors on the query's task family and category).

Rows are independent of the pool's order and size: the networks score each row with shared
weights, so one checkpoint serves any pool of 1 to MAX_MODELS models. Row ``i`` is
``pool.models[i]``; rows past the pool are zeros with ``row_mask`` 0 and every action masked.
A model that is down, stale or missing from the system state keeps its row (``available`` 0)
and has its actions masked. Everything per decision is numpy over (models x strategies); the
static card facts are cached per (task family, category).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from inframind_ray.core.constants import EMBEDDING_DIM
from inframind_ray.core.finish import concurrency, queue_per_slot
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import (
    AGGREGATOR_ROLE,
    DEFAULT_ROLES,
    MAX_AGENTS,
    NodeKind,
    Plan,
    Topology,
)
from inframind_ray.core.types import (
    LoadSnapshot,
    PoolInfo,
    QueryInfo,
    StepContext,
    SystemState,
    TokenBudget,
)
from inframind_ray.errors import ConfigError

EMB_DIM = EMBEDDING_DIM
STRATEGIES = tuple(Strategy)
N_STRATEGIES = len(STRATEGIES)
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
FEATURE_VERSION = 2  # 1: positional per-model vectors (policy/positional.py)
MAX_MODELS = 8  # rows of every observation: pools of 1..MAX_MODELS models
LOAD = 8  # waiting, running (per slot), kv usage, ttft, e2e, metric age, available, EDF ahead
CARD = 7  # log params, log prefill and decode speed, log slots, log KV, family acc, query prior
PLAN_PER_S = 3  # per strategy: expected accuracy, its gap to the best row, expected length
EXEC_PER_S = 5  # + price (latency / per-step budget) and congestion toll
MODEL_DIM = LOAD + CARD  # per-model part of a planner row
EXEC_MODEL_DIM = MODEL_DIM + 1  # + share of the query's earlier calls on this model
PLAN_ROW = MODEL_DIM + N_STRATEGIES * PLAN_PER_S
EXEC_ROW = EXEC_MODEL_DIM + N_STRATEGIES * EXEC_PER_S
SEM_DIM = EMB_DIM + len(ROLES) + len(KINDS) + len(TOPOLOGIES)
PLAN_GLOBAL = 3  # budget, log budget, pool size
EXEC_GLOBAL = 4  # budget left, depth left, per-step budget, pool size
OCCUPANCY = "service"  # the price list's slot-time estimate (policy.latency.latency_terms)
STALE_MASK_S = 10.0  # executor masks models whose metrics are older than this
_DOWN = LoadSnapshot("", 0, available=False)
PLANNER_OBS = {"emb": EMB_DIM, "glob": PLAN_GLOBAL, "rows": MAX_MODELS * PLAN_ROW,
               "row_mask": MAX_MODELS, "mask": len(PLAN_ACTIONS)}
EXECUTOR_OBS = {"sem": SEM_DIM, "glob": EXEC_GLOBAL, "rows": MAX_MODELS * EXEC_ROW,
                "row_mask": MAX_MODELS, "mask": MAX_MODELS * N_STRATEGIES}
"""Observation keys and flat sizes (the RL env's spaces; the same whatever the pool)."""


def plan_of(action: int) -> Plan:
    """The plan of a planner action index."""
    return PLAN_ACTIONS[action]


def dims() -> dict[str, int]:
    """The observation sizes a checkpoint records (``spec.json``)."""
    return {"max_models": MAX_MODELS, "plan_row": PLAN_ROW, "exec_row": EXEC_ROW,
            "exec_model": EXEC_MODEL_DIM, "sem": SEM_DIM, "plan_global": PLAN_GLOBAL,
            "exec_global": EXEC_GLOBAL, "strategies": N_STRATEGIES,
            "plan_actions": len(PLAN_ACTIONS)}


def check_pool_size(pool: PoolInfo) -> None:
    """ConfigError (one line) for a pool the rows cannot hold."""
    if not 1 <= len(pool.models) <= MAX_MODELS:
        raise ConfigError("pool.models", f"the learned policy serves pools of 1 to {MAX_MODELS} "
                          f"models; this pool has {len(pool.models)}")


class FeatureBuilder:
    """Padded per-model rows, globals and action masks for one pool (row i = pool.models[i])."""

    def __init__(self, pool: PoolInfo, token_budget: TokenBudget = False) -> None:
        check_pool_size(pool)
        self.pool = pool
        self.token_budget = token_budget  # price DeepThink under the policy's token budget
        self.m = m = len(pool.models)
        self.names = pool.names
        self.n_plan = len(PLAN_ACTIONS)
        self.n_exec = MAX_MODELS * N_STRATEGIES
        self.row_mask = np.zeros(MAX_MODELS, np.float32)
        self.row_mask[:m] = 1.0
        ms = pool.models
        self._seqs = [i.max_num_seqs for i in ms]
        self._prof = [(i.profile.c0, i.profile.c_prefill, i.profile.c_decode, i.profile.c_kv,
                       i.max_num_seqs, i.kv_capacity, i.profile) for i in ms]
        self._static = np.stack([  # size, prefill / one stream's decode speed, slots, KV
            np.log10(np.maximum([i.params_b for i in ms], 0.1)) / 2.0,
            np.log10(1.0 / np.maximum([i.profile.c_prefill for i in ms], 1e-9)) / 5.0,
            np.log10(1.0 / np.maximum([i.profile.iteration_time(0, 1, 0) for i in ms], 1e-6))
            / 3.0,
            np.log2([i.max_num_seqs * max(1, i.replicas) for i in ms]) / 8.0,
            np.log10(np.maximum([i.kv_capacity for i in ms], 1.0)) / 7.0], axis=1)
        self._cards: dict[tuple[str, str], tuple[list, list, list, list]] = {}

    # ------------------------------------------------------------------ static (cached)
    def _card(self, q: QueryInfo) -> tuple[list, list, list, list]:
        """Per model, for the query's task family and category: the card columns (static facts,
        family accuracy, query prior), and per strategy the expected accuracy, expected tokens
        and length feature."""
        key = (q.task, q.category)
        hit = self._cards.get(key)
        if hit is None:
            cols, accs, tokens, lengths = [], [], [], []
            for info, static in zip(self.pool.models, self._static.tolist(), strict=True):
                c = info.card(q.task)
                prior = info.expected_accuracy(q)
                cols.append([*static, c.accuracy, prior])
                accs.append([prior * c.retention[s] for s in STRATEGIES])
                tok = [info.call_tokens(s, self.token_budget, q.task) for s in STRATEGIES]
                tokens.append(tok)
                lengths.append([math.log1p(t) / 7.0 for t in tok])
            hit = self._cards[key] = (cols, accs, tokens, lengths)
        return hit

    # ------------------------------------------------------------------ live load
    def _load(self, state: SystemState, deadline_in_s: float) -> tuple[list, list]:
        """Per model: the LOAD columns and (snapshot, slots, metric age, usable)."""
        cols, raw = [], []
        now, models = state.now, state.models
        for name, seqs in zip(self.names, self._seqs, strict=True):
            ld = models.get(name, _DOWN)
            n = seqs * max(1, ld.replicas)
            age = max(0.0, now - ld.timestamp)
            avail = float(ld.available and ld is not _DOWN)
            cols.append([ld.waiting / n, ld.running / n, ld.kv_usage, min(ld.ttft_s / 10.0, 10.0),
                         min(ld.e2e_s / 10.0, 10.0), min(age / 5.0, 10.0), avail,
                         ld.waiting_ahead(deadline_in_s, now) / n])
            raw.append((ld, n, age, avail > 0 and age <= STALE_MASK_S))
        return cols, raw

    def _service_wait(self, i: int, ld: LoadSnapshot, n: int, prompt: list[int],
                      tokens: list[float]) -> tuple[list[float], list[float], float]:
        """``policy.latency.latency_terms`` (occupancy "service", ``kv=True``: the queue counted
        against the KV-bound concurrency, as the teacher ``priced-topology`` counts it) of model
        ``i`` for every strategy: (service seconds, queue wait seconds, congestion)."""
        c0, cp, cd, ck, seqs, kv_cap, prof = self._prof[i]
        batch = max(1, min(seqs, math.ceil((ld.running + 1) / max(1, ld.replicas))))
        base = c0 + ck * ld.kv_usage * kv_cap
        decode = (prof.iteration_time(0, batch, ld.kv_usage * kv_cap) if prof.decode_factors
                  else base + cd * batch)
        pre = base + cd * (batch - 1)
        service = [pre + cp * p + max(0.0, t - 1.0) * decode
                   for p, t in zip(prompt, tokens, strict=True)]
        cong = queue_per_slot(ld.waiting, ld.running,
                              concurrency(n, ld.running, ld.waiting, ld.kv_usage))
        if cong <= 0:
            return service, [0.0] * len(service), 0.0
        if ld.e2e_s <= 0:
            return service, [cong * x for x in service], cong
        slot = max(ld.e2e_s - ld.ttft_s, 0.0) + base
        return service, [cong * (slot + cp * p) for p in prompt], cong

    def _rows(self, parts: list[list[float]], width: int) -> np.ndarray:
        """Padded flat rows from the pool's per-model rows: [MAX_MODELS * width]."""
        rows = np.zeros(MAX_MODELS * width, np.float32)
        rows[:self.m * width] = np.fromiter(itertools.chain.from_iterable(parts), np.float32,
                                            self.m * width)
        return rows

    @staticmethod
    def _emb(q: QueryInfo) -> np.ndarray:
        if q.embedding is None:
            return np.zeros(EMB_DIM, np.float32)
        return np.asarray(q.embedding, np.float32)

    @staticmethod
    def _best(accs: list[list[float]], usable: list[bool]) -> list[float]:
        """Per strategy, the best expected accuracy among usable models (all if none)."""
        pick = [a for a, u in zip(accs, usable, strict=True) if u] or accs
        return [max(col) for col in zip(*pick, strict=True)]

    # ------------------------------------------------------------------ observations
    def planner(self, q: QueryInfo, state: SystemState) -> dict[str, np.ndarray]:
        """Query embedding, globals, padded model rows, row mask and the (all-valid) plan mask."""
        load, raw = self._load(state, q.deadline - state.now)
        cols, accs, _, lengths = self._card(q)
        best = self._best(accs, [r[3] for r in raw])
        parts = []
        for i in range(self.m):
            row = load[i] + cols[i]
            for a, b, ln in zip(accs[i], best, lengths[i], strict=True):
                row += (a, a - b, ln)
            parts.append(row)
        glob = np.array([q.budget_s / 100.0, math.log1p(q.budget_s) / 5.0, self.m / MAX_MODELS],
                        np.float32)
        return {"emb": self._emb(q), "glob": glob, "rows": self._rows(parts, PLAN_ROW),
                "row_mask": self.row_mask.copy(), "mask": np.ones(self.n_plan, np.float32)}

    def executor(self, ctx: StepContext) -> dict[str, np.ndarray]:
        """Semantic context, globals, padded (model x strategy) rows, row mask and the action
        mask over ``row * N_STRATEGIES + strategy``. Per strategy a row has the expected
        accuracy (prior x the strategy's retention), its gap to the best usable model, the
        expected length, the price list (predicted latency / the budget share of this step) and
        the congestion toll (queued requests per slot x service seconds)."""
        sem = np.zeros(SEM_DIM, np.float32)
        sem[:EMB_DIM] = self._emb(ctx.query)
        sem[EMB_DIM + (ROLES.index(ctx.node.role) if ctx.node.role in ROLES else 0)] = 1.0
        sem[EMB_DIM + len(ROLES) + KINDS.index(ctx.node.kind)] = 1.0
        sem[EMB_DIM + len(ROLES) + len(KINDS) + TOPOLOGIES.index(ctx.plan.topology)] = 1.0
        budget = ctx.remaining_budget_s
        per_step = max(1e-3, budget / max(1, ctx.remaining_depth))
        load, raw = self._load(ctx.state, budget)
        cols, accs, tokens, lengths = self._card(ctx.query)
        usable = [r[3] for r in raw]
        best = self._best(accs, usable)
        prompt = [ctx.prompt_tokens(s) for s in STRATEGIES]
        earlier = ctx.earlier_models
        parts = []
        for i, (ld, n, _, _) in enumerate(raw):
            service, wait, cong = self._service_wait(i, ld, n, prompt, tokens[i])
            row = load[i] + cols[i]
            row.append(earlier.count(self.names[i]) / MAX_AGENTS)
            for a, b, ln, sv, w in zip(accs[i], best, lengths[i], service, wait, strict=True):
                row += (a, a - b, ln, min((sv + w) / per_step, 5.0), min(cong * sv / 10.0, 10.0))
            parts.append(row)
        if not any(usable):  # nothing reported yet: every model in the state, the strategy mask
            usable = [n in ctx.state.models or not ctx.state.models for n in self.names]
        allowed = [float(s in ctx.allowed) for s in STRATEGIES]
        mask = np.zeros(MAX_MODELS * N_STRATEGIES, np.float32)
        mask[:self.m * N_STRATEGIES] = [a if u else 0.0 for u in usable for a in allowed]
        glob = np.array([budget / 100.0, ctx.remaining_depth / 5.0, min(per_step / 100.0, 10.0),
                         self.m / MAX_MODELS], np.float32)
        return {"sem": sem, "glob": glob, "rows": self._rows(parts, EXEC_ROW),
                "row_mask": self.row_mask.copy(), "mask": mask}

    def decision(self, action: int) -> tuple[str, Strategy]:
        """(model, strategy) of an executor action index ``row * N_STRATEGIES + strategy``."""
        m, s = divmod(action, N_STRATEGIES)
        if m >= self.m:
            raise ValueError(f"executor action {action} is a padding row (pool of {self.m})")
        return self.pool.models[m].name, STRATEGIES[s]

    def action(self, model: str, strategy: Strategy) -> int:
        """The executor action index of (model, strategy)."""
        return self.names.index(model) * N_STRATEGIES + STRATEGIES.index(strategy)
