"""Policy contracts: what a planner and an executor see, and what they return.

``Policy.plan`` is called once per query, ``Policy.decide`` once per agent node right before the
call, with live load and the budget left. Both validate and dispatch to ``_plan`` / ``_decide``.
The same objects serve the twin (simulated clock) and the serving plane (wall clock).
"""

from __future__ import annotations

import bisect
import heapq
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from inframind_ray.engine.profile import IterationProfile
from inframind_ray.engine.request_queue import SLACK_CAP
from inframind_ray.workflow.prompts import Strategy
from inframind_ray.workflow.topology import AgentNode, Plan, Topology

TOKEN_BUDGET_QUANTILE = 0.98
"""A policy with ``token_budget`` caps each DeepThink call at this quantile of the model's
recorded answer lengths (train split), not at the serving cap (assumptions.MAX_TOKENS_QUANTILE).
The longest answers are mostly wrong: the 70B's longest 2 % (over 525 tokens) are right 12.6 %
of the time against 62.5 % overall; 16 % of its output tokens lie beyond that length, and
0.4 % of its correct answers. Chosen on the validation split among 0.95 / 0.97 / 0.98 / 0.99
(scripts/token_budget_check.py, docs/learning.md)."""


@dataclass(frozen=True)
class QueryInfo:
    """A query as policies see it. Times are on the driving clock (simulated or wall)."""

    query_id: str
    text: str
    budget_s: float
    arrival_s: float
    category: str = "other"
    item_id: int | None = None
    prompt_tokens: int = 128
    fewshot_tokens: int = 0  # extra prompt tokens of a DeepThink call (worked examples)
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def deadline(self) -> float:
        """Absolute deadline, inherited by every agent call of the query."""
        return self.arrival_s + self.budget_s


@dataclass(frozen=True)
class ModelLoad:
    """Aggregated live metrics of one pool model (over its replicas)."""

    model: str
    replicas: int
    waiting: int
    running: int
    kv_usage: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    timestamp: float
    available: bool = True
    # Seconds from the snapshot to the deadline of each request in the replicas' EDF queues,
    # ascending, the SLACK_CAP earliest. Waiting requests not listed (an engine's own FCFS queue,
    # beyond the cap) are served before any new request.
    waiting_slack_s: tuple[float, ...] = ()

    def age(self, now: float) -> float:
        """Seconds since the snapshot was taken."""
        return max(0.0, now - self.timestamp)

    def waiting_ahead(self, deadline_in_s: float, now: float) -> int:
        """Waiting requests an EDF queue serves before a new one due in ``deadline_in_s`` seconds
        (ties first): the listed ones due earlier, plus every unlisted one. Arrivals after now
        that are due earlier will overtake it too; this count cannot know them."""
        listed = len(self.waiting_slack_s)
        due = bisect.bisect_right(self.waiting_slack_s, deadline_in_s + self.age(now))
        return max(0, self.waiting - listed) + due

    @classmethod
    def from_replicas(cls, model: str, snaps: list, timestamp: float,
                      available: bool = True) -> ModelLoad:
        """Sum queue counts and average KV usage and latency EWMAs over replica snapshots (any
        objects with waiting, running, kv_usage, ttft_s, tpot_s, e2e_s)."""
        n = len(snaps)
        slack = tuple(heapq.merge(*(getattr(s, "waiting_slack_s", ()) for s in snaps)))
        return cls(
            model=model,
            replicas=n,
            waiting=sum(s.waiting for s in snaps),
            running=sum(s.running for s in snaps),
            kv_usage=sum(s.kv_usage for s in snaps) / n,
            ttft_s=sum(s.ttft_s for s in snaps) / n,
            tpot_s=sum(s.tpot_s for s in snaps) / n,
            e2e_s=sum(s.e2e_s for s in snaps) / n,
            timestamp=timestamp,
            available=available,
            waiting_slack_s=slack[:SLACK_CAP * n],
        )


@dataclass(frozen=True)
class SystemState:
    """What the orchestrator knows of the pool at one instant."""

    now: float
    models: Mapping[str, ModelLoad]


@dataclass(frozen=True)
class ModelInfo:
    """Static facts of one pool model that policies may use (no recorded outcomes)."""

    name: str
    profile: IterationProfile
    max_num_seqs: int
    replicas: int
    kv_capacity: int
    max_tokens: Mapping[Strategy, int]
    expected_tokens: Mapping[Strategy, float]
    accuracy_by_category: Mapping[str, float]  # fitted on the TRAIN split only
    accuracy: float  # train-split accuracy of its step-by-step answers
    # DeepThink output budget of policies that cap it (``Policy.token_budget``): the
    # TOKEN_BUDGET_QUANTILE of its train-split answer lengths, and its expected output under it
    budget_tokens: int = 0  # 0: no budget known, the strategy's cap applies
    budget_expected_tokens: float = 0.0

    def call_tokens(self, strategy: Strategy, token_budget: bool = False) -> float:
        """Expected output tokens of one call (under the DeepThink budget if ``token_budget``)."""
        if token_budget and strategy is Strategy.DEEPTHINK and self.budget_tokens:
            return self.budget_expected_tokens
        return self.expected_tokens[strategy]


@dataclass(frozen=True)
class PoolInfo:
    """The pool's models in config order."""

    models: tuple[ModelInfo, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {m.name: m for m in self.models})

    def __getitem__(self, name: str) -> ModelInfo:
        return self._by_name[name]  # type: ignore[attr-defined]

    @property
    def names(self) -> tuple[str, ...]:
        """Model names in config order."""
        return tuple(m.name for m in self.models)

    @property
    def strongest(self) -> str:
        """Highest train-split accuracy."""
        return max(self.models, key=lambda m: m.accuracy).name


ALL_STRATEGIES = tuple(Strategy)
REASONING_STRATEGIES = (Strategy.CONCISE, Strategy.DEEPTHINK)


def allowed_strategies(topology: Topology) -> tuple[Strategy, ...]:
    """CoT demands reasoning; every other topology allows all strategies."""
    return REASONING_STRATEGIES if topology is Topology.COT else ALL_STRATEGIES


@dataclass(frozen=True)
class StepContext:
    """Everything the executor sees before one agent call."""

    query: QueryInfo
    plan: Plan
    node: AgentNode
    remaining_depth: int  # sequential calls left on the critical path, this one included
    now: float
    state: SystemState
    upstream_models: tuple[str, ...] = ()
    upstream_tokens: int = 0
    earlier_models: tuple[str, ...] = ()  # models of this query's agent calls decided before

    @property
    def remaining_budget_s(self) -> float:
        """Seconds until the query's deadline."""
        return self.query.deadline - self.now

    @property
    def allowed(self) -> tuple[Strategy, ...]:
        """Strategies this node may use."""
        return allowed_strategies(self.plan.topology)

    def prompt_tokens(self, strategy: Strategy) -> int:
        """Prompt length of this call under a strategy (question, examples, upstream outputs)."""
        return prompt_tokens(self.query, strategy, self.upstream_tokens)


def prompt_tokens(query: QueryInfo, strategy: Strategy, upstream_tokens: int = 0) -> int:
    """Prompt tokens of one call: DeepThink carries the few-shot examples."""
    shots = query.fewshot_tokens if strategy is Strategy.DEEPTHINK else 0
    return query.prompt_tokens + shots + upstream_tokens


@dataclass(frozen=True)
class StepDecision:
    """The executor's choice for one agent call."""

    model: str
    strategy: Strategy
    max_tokens: int | None = None  # a tighter output budget than the strategy's cap; None: the cap


class Policy(ABC):
    """Planner + executor. Subclasses implement ``_plan`` and ``_decide``."""

    name: ClassVar[str] = "policy"
    token_budget: bool = False  # cap DeepThink calls at ModelInfo.budget_tokens

    def __init__(self, pool: PoolInfo, seed: int = 0) -> None:
        self.pool = pool
        self.seed = seed

    def call_tokens(self, info: ModelInfo, strategy: Strategy) -> float:
        """Expected output tokens of a call this policy makes."""
        return info.call_tokens(strategy, self.token_budget)

    def plan(self, query: QueryInfo, state: SystemState) -> Plan:
        """Choose topology, K and roles once per query. Do not override."""
        plan = self._plan(query, state)
        if not isinstance(plan, Plan):
            raise TypeError(f"{self.name}: _plan returned {type(plan).__name__}, not Plan")
        return plan

    def decide(self, ctx: StepContext) -> StepDecision:
        """Choose model and strategy for one agent call. Do not override."""
        d = self._decide(ctx)
        if not isinstance(d, StepDecision):
            raise TypeError(f"{self.name}: _decide returned {type(d).__name__}, not StepDecision")
        if d.model not in self.pool.names:
            raise ValueError(f"{self.name}: chose unknown model {d.model!r}")
        if d.strategy not in ctx.allowed:
            raise ValueError(f"{self.name}: strategy {d.strategy.value} not allowed here")
        info = self.pool[d.model]
        cap = info.max_tokens[d.strategy]
        if (self.token_budget and d.max_tokens is None and d.strategy is Strategy.DEEPTHINK
                and info.budget_tokens):
            d = replace(d, max_tokens=info.budget_tokens)
        if d.max_tokens is not None and not 1 <= d.max_tokens <= cap:
            raise ValueError(f"{self.name}: max_tokens {d.max_tokens} outside [1, {cap}] for "
                             f"{d.model} {d.strategy.value}")
        return d

    @abstractmethod
    def _plan(self, query: QueryInfo, state: SystemState) -> Plan: ...

    @abstractmethod
    def _decide(self, ctx: StepContext) -> StepDecision: ...
