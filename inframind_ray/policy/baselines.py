"""Baseline policies, and the registry that maps CLI names to classes.

Names on the command line and in results: always-strongest, static-task, moa, random,
round-robin, least-loaded, infra-heuristic, oracle; and the learned ``inframind`` policy.
``infra-topology``, ``strongest-topology``, ``priced-topology`` and ``priced-topology-tail``
(warm-start teachers; ``priced-topology-slots`` the slot-counting predecessor of
``priced-topology``, ``-tail`` its successor with a budget only where it cuts wrong answers) are
registered too but are not default bench baselines.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np

from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import MAX_AGENTS, NodeKind, Plan, Topology
from inframind_ray.core.types import (
    LoadSnapshot,
    ModelInfo,
    PoolInfo,
    QueryInfo,
    StepContext,
    StepDecision,
    SystemState,
)
from inframind_ray.policy.base import Policy
from inframind_ray.policy.latency import congestion, free_slots, latency_terms, predict_latency
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
from inframind_ray.policy.positional import V1_CHECKPOINT, PositionalPolicy

IO_PLAN = Plan.make(Topology.IO)
SAFETY = 0.85  # fraction of the per-step budget a predicted latency may use


def candidates(pool: PoolInfo, ctx: StepContext) -> list:
    """Models not masked as unavailable; all of them if the metrics show none (e.g. at start-up,
    before any replica reported)."""
    up = [m for m in pool.models if ctx.state.models[m.name].available]
    return up or list(pool.models)


class AlwaysStrongest(Policy):
    """Every query: one agent, the strongest model (train-split accuracy), step by step."""

    name = "always-strongest"

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        return StepDecision(self.pool.strongest, Strategy.DEEPTHINK)


class StaticTask(Policy):
    """Task-only routing (MasRouter-like): best model per task family and category on the train
    split."""

    name = "static-task"

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        best = max(self.pool.models, key=lambda m: m.expected_accuracy(ctx.query))
        return StepDecision(best.name, Strategy.DEEPTHINK)


class MoA(Policy):
    """Mixture-of-agents: every pool model proposes in parallel, the strongest aggregates. A pool
    of more models than a plan holds (``MAX_AGENTS``) sends the query to the ``MAX_AGENTS``
    most accurate on its family and category, in pool order."""

    name = "moa"

    def _proposers(self, query: QueryInfo) -> list[str]:
        names = self.pool.names
        if len(names) <= MAX_AGENTS:
            return list(names)
        top = {m.name for m in sorted(self.pool.models, key=lambda m: -m.expected_accuracy(
            query))[:MAX_AGENTS]}
        return [n for n in names if n in top]

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return Plan.make(Topology.DEBATE, k=len(self._proposers(query)), rounds=1)

    def _decide(self, ctx: StepContext) -> StepDecision:
        if ctx.node.kind is NodeKind.AGGREGATOR:
            return StepDecision(self.pool.strongest, Strategy.DEEPTHINK)
        names = self._proposers(ctx.query)
        return StepDecision(names[ctx.node.slot % len(names)], Strategy.DEEPTHINK)


class RandomPolicy(Policy):
    """Uniform random topology, K, model and strategy (seeded per query and node)."""

    name = "random"

    def _rng(self, *keys: object) -> np.random.Generator:
        return np.random.default_rng([self.seed, *(zlib.crc32(str(k).encode()) for k in keys)])

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        rng = self._rng(query.query_id, "plan")
        topo = list(Topology)[rng.integers(len(Topology))]
        return Plan.make(topo, k=int(rng.integers(2, 5)))

    def _decide(self, ctx: StepContext) -> StepDecision:
        rng = self._rng(ctx.query.query_id, ctx.node.id)
        model = self.pool.names[rng.integers(len(self.pool.names))]
        return StepDecision(model, ctx.allowed[rng.integers(len(ctx.allowed))])


class RoundRobin(Policy):
    """One agent per query; models in turn, step by step."""

    name = "round-robin"

    def __init__(self, pool: PoolInfo, seed: int = 0) -> None:
        super().__init__(pool, seed)
        self._next = 0

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        model = self.pool.names[self._next % len(self.pool.names)]
        self._next += 1
        return StepDecision(model, Strategy.DEEPTHINK)


class LeastLoaded(Policy):
    """One agent per query; join the shortest queue (requests per sequence slot)."""

    name = "least-loaded"

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        def load(m):
            ld = ctx.state.models[m.name]
            return ((ld.waiting + ld.running) / (m.max_num_seqs * ld.replicas), -m.accuracy)

        best = min(candidates(self.pool, ctx), key=load)
        return StepDecision(best.name, Strategy.DEEPTHINK)


class InfraHeuristic(Policy):
    """Best expected accuracy among (model, strategy) whose predicted finish fits the budget.

    Expected accuracy = train accuracy of the model on the query's category x the strategy's
    retention (the same named assumption the twin uses; a deployment would fit it). The budget
    left is split evenly over the sequential calls left. If nothing fits, the fastest choice.
    """

    name = "infra-heuristic"
    OCCUPANCY = "e2e"  # the price list's slot-time estimate (policy.latency.latency_terms)
    KV_AWARE = False  # the price list's queue: sequence slots (False) or KV-bound (True)

    def __init__(self, pool: PoolInfo, seed: int = 0,
                 retention: dict[Strategy, float] | None = None) -> None:
        super().__init__(pool, seed)
        self.retention = retention  # None: each model's card for the query's family

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _models(self, ctx: StepContext) -> list:
        """The models this policy may choose from."""
        return candidates(self.pool, ctx)

    def _toll(self, m: ModelInfo, load: LoadSnapshot, service_s: float) -> float:
        """Expected-accuracy points a call of ``service_s`` slot-seconds costs the queue it
        joins (none here: each call is judged for its own query only)."""
        return 0.0

    def expected_accuracy(self, m: ModelInfo, ctx: StepContext) -> float:
        """Expected accuracy of a step-by-step answer of ``m`` to this query: its train-split
        accuracy on the query's family and category. The one hook of the heuristics' accuracy (a
        variant overrides it: experiments/item_router_check.py)."""
        return m.expected_accuracy(ctx.query)

    def _decide(self, ctx: StepContext) -> StepDecision:
        per_step = ctx.remaining_budget_s / max(1, ctx.remaining_depth) * SAFETY
        best, best_key, fastest, fastest_t = None, None, None, float("inf")
        for m in self._models(ctx):
            load = ctx.state.models[m.name]
            acc = self.expected_accuracy(m, ctx)
            keep = self.retention or m.card(ctx.query.task).retention
            for s in ctx.allowed:
                tokens = self.call_tokens(m, s, ctx.query.task)
                service, wait = latency_terms(m, load, ctx.prompt_tokens(s), tokens,
                                              self.OCCUPANCY, self.KV_AWARE)
                t = service + wait
                if t < fastest_t:
                    fastest, fastest_t = StepDecision(m.name, s), t
                if t <= per_step:
                    key = (acc * keep[s] - self._toll(m, load, service), -t)
                    if best_key is None or key > best_key:
                        best, best_key = StepDecision(m.name, s), key
        return best or fastest


class InfraTopology(InfraHeuristic):
    """The infra-aware heuristic with a capacity-aware planner: a voting ensemble of three (three
    solvers, then an aggregator) while the strongest model has no queue and ``VOTE_FREE_SLOTS``
    free slots, one agent otherwise. Each extra voter goes to the most accurate model that has a
    free slot and fits its share of the budget, so the ensemble spreads over weaker models when
    the strongest one fills up. The warm-start teacher of the shipped policy."""

    name = "infra-topology"
    VOTE = Plan.make(Topology.DEBATE, 3, rounds=1)
    VOTE_FREE_SLOTS = 2  # the first voter and the aggregator
    VOTE_CALLS = 4  # the calls of a vote: three solvers and the aggregator
    VOTE_SLOWDOWN = 1.25  # KV_AWARE: a vote may slow the strongest's decode steps this much

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        m = self.pool[self.pool.strongest]
        load = state.models[m.name]
        if (load.available and load.waiting == 0
                and free_slots(m, load, self.KV_AWARE) >= self.VOTE_FREE_SLOTS
                and (not self.KV_AWARE or self._vote_fits(m, load))):
            return self.VOTE
        return IO_PLAN

    def _vote_fits(self, m: ModelInfo, load: LoadSnapshot) -> bool:
        """Whether the strongest model's decode iteration, with a vote's calls added to its
        batch, stays within ``VOTE_SLOWDOWN`` of an idle one. Where the slots bind (a few per
        replica) this always holds; with vLLM's 1024 slots free slots say nothing, and a vote
        that triples the strongest model's load slows every call it runs."""
        batch = math.ceil((load.running + load.waiting + self.VOTE_CALLS) / max(1, load.replicas))
        p = m.profile
        return (p.iteration_time(0, min(batch, m.max_num_seqs), load.kv_usage * m.kv_capacity)
                <= self.VOTE_SLOWDOWN * p.iteration_time(0, 1, 0))

    def _decide(self, ctx: StepContext) -> StepDecision:
        if ctx.node.kind is not NodeKind.SOLVER or ctx.node.slot == 0:
            return super()._decide(ctx)
        per_step = ctx.remaining_budget_s / max(1, ctx.remaining_depth) * SAFETY
        s = Strategy.DEEPTHINK
        best, best_acc = None, -1.0
        for m in self._models(ctx):
            load = ctx.state.models[m.name]
            acc = self.expected_accuracy(m, ctx)
            if (free_slots(m, load, self.KV_AWARE) >= 1 and acc > best_acc
                    and s in ctx.allowed
                    and predict_latency(m, load, ctx.prompt_tokens(s),
                                        self.call_tokens(m, s, ctx.query.task),
                                        self.OCCUPANCY, self.KV_AWARE) <= per_step):
                best, best_acc = m.name, acc
        return StepDecision(best, s) if best else super()._decide(ctx)


class StrongestTopology(InfraTopology):
    """``infra-topology`` on the strongest model alone (while it is up): the same voting
    planner, and an executor that sheds load by reasoning depth (DeepThink, Concise, Flash,
    whichever fits the budget share) instead of by moving calls to weaker models. In the
    default pool a Flash answer of the 70B (expected 0.50) beats every weaker model's step-by-
    step answer (at most 0.45) and holds a slot for a few tokens. The shipped policy's warm-start
    teacher; not a default bench baseline."""

    name = "strongest-topology"

    def _models(self, ctx: StepContext) -> list:
        up = candidates(self.pool, ctx)
        return [m for m in up if m.name == self.pool.strongest] or up


class PricedTopology(InfraTopology):
    """``infra-topology`` with a congestion toll: a call's expected accuracy minus
    ``CONGESTION_PRICE`` x (requests per slot queued beyond the model's free slots) x (its
    service seconds), so a congested model keeps its slot time for the queries that gain most
    from depth and sheds the others (lowest category accuracy first) to Flash, Concise or a
    weaker idle model whose expected accuracy comes closest. The queue wait is estimated from
    slot time (``OCCUPANCY = "service"``): the toll, not a pessimistic wait, keeps the queue
    short. DeepThink calls are capped at the model's token budget (``Policy.token_budget``):
    its longest answers are mostly wrong and hold the most slot time.

    Slots are counted as the replica layer counts them (``KV_AWARE``, ``policy.latency``): the
    running mix the KV cache holds, at most ``max_num_seqs``; on a pool where the slots bind
    (``constrained``) that is the slot count, as before. The warm-start teacher of the row
    policy; not a default bench baseline (figures in docs/learning.md, docs/pools.md)."""

    name = "priced-topology"
    OCCUPANCY = "service"
    KV_AWARE = True
    token_budget = True
    CONGESTION_PRICE = 0.0075  # accuracy points per slot-second per queued request per slot

    def _toll(self, m: ModelInfo, load: LoadSnapshot, service_s: float) -> float:
        return self.CONGESTION_PRICE * congestion(m, load, self.KV_AWARE) * service_s


class PricedSlots(PricedTopology):
    """``priced-topology`` as it was until issue 19's KV-aware price list: slots counted as
    ``max_num_seqs`` alone, blind to a KV-bound queue (the shipped row checkpoint's teacher,
    kept to reproduce earlier figures and to compare)."""

    name = "priced-topology-slots"
    KV_AWARE = False


class PricedTail(PricedTopology):
    """``priced-topology`` with the DeepThink budget only where the answers it cuts are mostly
    wrong (``token_budget = "tail"``, ``TaskCard.budget``): MMLU-Pro and MATH keep it; GSM8K of
    the stronger models and the code families keep the serving cap. ``priced-topology`` (the
    budget on every family) stays as it was, for the figures made with it (docs/learning.md,
    docs/learning/journal.md)."""

    name = "priced-topology-tail"
    token_budget = "tail"


class Pinned(Policy):
    """Every query: one agent on one named model, step by step (``pinned:MODEL``): calibration
    runs and debugging, not a routing policy."""

    name = "pinned"

    def __init__(self, pool: PoolInfo, model: str) -> None:
        super().__init__(pool)
        if model not in pool.names:
            raise ValueError(f"pinned: unknown model {model!r}; pool models: "
                             f"{', '.join(pool.names)}")
        self.model = model
        self.name = f"pinned:{model}"

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        return StepDecision(self.model, Strategy.DEEPTHINK)


class Oracle(Policy):
    """Upper reference: knows the recorded outcome of every (item, model, strategy) and the true
    queue state; picks the fastest choice that answers correctly. Not a competitor."""

    name = "oracle"

    def __init__(self, pool: PoolInfo, seed: int = 0,
                 is_correct: Callable[[QueryInfo, str, Strategy], bool] | None = None) -> None:
        super().__init__(pool, seed)
        if is_correct is None:
            raise ValueError("oracle needs the recorded outcomes (twin only)")
        self.is_correct = is_correct

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return IO_PLAN

    def _decide(self, ctx: StepContext) -> StepDecision:
        scored = []
        for m in self.pool.models:
            load = ctx.state.models[m.name]
            for s in ctx.allowed:
                t = predict_latency(m, load, ctx.prompt_tokens(s),
                                    self.call_tokens(m, s, ctx.query.task))
                ok = self.is_correct(ctx.query, m.name, s)
                scored.append((not ok, t, m.name, s))
        _, _, model, strategy = min(scored, key=lambda x: (x[0], x[1]))
        return StepDecision(model, strategy)


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (LearnedPolicy, PositionalPolicy, AlwaysStrongest, StaticTask, MoA, RandomPolicy,
                RoundRobin, LeastLoaded, InfraHeuristic, InfraTopology, StrongestTopology,
                PricedTopology, PricedSlots, PricedTail, Oracle)
}


def make_policy(name: str, pool: PoolInfo, seed: int = 0, **extra) -> Policy:
    """Build a policy by CLI name. ``oracle`` needs ``is_correct``; ``inframind`` loads
    ``checkpoint`` (default: the shipped policy) and raises CheckpointError if it cannot;
    ``inframind-v1`` is the previous, positional policy with its shipped checkpoint."""
    if name.startswith("pinned:"):
        return Pinned(pool, name.partition(":")[2])
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}, "
                         "or pinned:MODEL") from None
    if cls is Oracle:
        return cls(pool, seed, is_correct=extra.get("is_correct"))
    if cls is LearnedPolicy:
        return LearnedPolicy.load(extra.get("checkpoint") or DEFAULT_CHECKPOINT, pool)
    if cls is PositionalPolicy:  # the previous shipped policy, on its own pool only
        return PositionalPolicy.load(V1_CHECKPOINT, pool)
    return cls(pool, seed)


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Make ``cls`` buildable by ``make_policy(cls.name, ...)`` (a lab check's variant of a
    policy, docs/learning.md); ValueError if the name is taken."""
    if cls.name in POLICIES:
        raise ValueError(f"policy name {cls.name!r} is taken")
    POLICIES[cls.name] = cls
    return cls
