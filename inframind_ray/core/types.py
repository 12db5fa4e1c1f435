"""The value types every plane exchanges: a query, a model's load snapshot, the system state, the
pool's static model facts, one agent step's context and the executor's decision. Times are on
the driving clock (simulated or wall)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Literal

import numpy as np

from inframind_ray.core.constants import SLACK_CAP
from inframind_ray.core.profile import IterationProfile
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import AgentNode, Plan, Topology


@dataclass(frozen=True)
class QueryInfo:
    """A query as policies see it. Times are on the driving clock (simulated or wall)."""

    query_id: str
    text: str
    budget_s: float
    arrival_s: float
    category: str = "other"
    item_id: int | None = None
    task: str = "mmlu_pro"  # the task family of a benchmark item (grader, prompts, priors)
    prompt_tokens: int = 128
    fewshot_tokens: int = 0  # extra prompt tokens of a DeepThink call (worked examples)
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def deadline(self) -> float:
        """Absolute deadline, inherited by every agent call of the query."""
        return self.arrival_s + self.budget_s


@dataclass(frozen=True)
class LoadSnapshot:
    """Live load of one replica, or of one model aggregated over its replicas (``aggregate``):
    the one snapshot type from the engine (``stats()`` / ``snapshot()``) through the replica
    (which adds its queue and identity) and the load view to the policies. ``timestamp`` is on
    the driving clock (simulated or epoch seconds)."""

    model: str
    replicas: int = 1  # 1 for a replica; the live replicas of an aggregate
    waiting: int = 0  # replica queue + engine waiting queue
    running: int = 0
    kv_usage: float = 0.0
    ttft_s: float = 0.0
    tpot_s: float = 0.0
    e2e_s: float = 0.0
    timestamp: float = 0.0
    available: bool = True
    # Seconds from the snapshot to the deadline of each request in the replicas' EDF queues,
    # ascending, the SLACK_CAP earliest. Waiting requests not listed (an engine's own queue,
    # beyond the cap) are served before any new request.
    waiting_slack_s: tuple[float, ...] = ()
    replica_id: str = ""  # "" for an aggregate
    node_id: str = ""
    num_preemptions: int = 0
    # Seconds in the engine of an answered request (the replica queue's EWMA; 0: none answered
    # yet) and how many requests the engine runs at once (0: not said); what the admission rule
    # and the replica choice predict a finish from (``replica.predict``)
    service_s: float = 0.0
    capacity: int = 0

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
    def aggregate(cls, model: str, snaps: Sequence[LoadSnapshot], timestamp: float,
                  available: bool = True) -> LoadSnapshot:
        """One model over its replicas' snapshots: queue counts, preemptions and replicas
        summed, KV usage and latency EWMAs averaged, EDF slacks merged. No snapshot: an
        unavailable model with zero replicas."""
        n = len(snaps)
        if not n:
            return cls(model, 0, timestamp=timestamp, available=False)
        if n == 1:  # one replica: its own figures (what the sums and means below give)
            s = snaps[0]
            return cls(model, s.replicas, s.waiting, s.running, s.kv_usage, s.ttft_s, s.tpot_s,
                       s.e2e_s, timestamp, available, s.waiting_slack_s[:SLACK_CAP],
                       num_preemptions=s.num_preemptions, service_s=s.service_s,
                       capacity=s.capacity)
        slack = sorted(chain.from_iterable(s.waiting_slack_s for s in snaps))  # merged
        return cls(
            model=model,
            replicas=sum(s.replicas for s in snaps),
            waiting=sum(s.waiting for s in snaps),
            running=sum(s.running for s in snaps),
            kv_usage=sum(s.kv_usage for s in snaps) / n,
            ttft_s=sum(s.ttft_s for s in snaps) / n,
            tpot_s=sum(s.tpot_s for s in snaps) / n,
            e2e_s=sum(s.e2e_s for s in snaps) / n,
            timestamp=timestamp,
            available=available,
            waiting_slack_s=tuple(slack[:SLACK_CAP * n]),
            num_preemptions=sum(s.num_preemptions for s in snaps),
            service_s=sum(s.service_s for s in snaps) / n,
            capacity=sum(s.capacity for s in snaps),
        )


@dataclass(frozen=True)
class SystemState:
    """What the orchestrator knows of the pool at one instant."""

    now: float
    models: Mapping[str, LoadSnapshot]


TokenBudget = bool | Literal["tail"]
"""A policy's DeepThink token budget: off, on every family (``True``) or only where the cut
answers are mostly wrong (``"tail"``, assumptions.BUDGET_TAIL_MAX_ACCURACY)."""


@dataclass(frozen=True)
class TaskCard:
    """What a model's recorded answers on one task family say (TRAIN split only): accuracy
    overall and per category, output token caps and expected tokens per strategy, the
    strategies' accuracy retention, and the DeepThink length budget."""

    accuracy: float
    accuracy_by_category: Mapping[str, float]
    max_tokens: Mapping[Strategy, int]
    expected_tokens: Mapping[Strategy, float]
    retention: Mapping[Strategy, float]
    budget_tokens: int = 0
    budget_expected_tokens: float = 0.0
    budget_tail_right: bool = False
    """Whether the train answers longer than ``budget_tokens`` are mostly right (or too few to
    tell): a ``"tail"`` budget (``TokenBudget``) then leaves the serving cap."""

    def budget(self, token_budget: TokenBudget) -> int:
        """The DeepThink cap of a policy with this ``token_budget`` on this family, 0 for none:
        ``False`` none; ``True`` the budget on every family (checkpoints before the tail rule);
        ``"tail"`` only where the answers beyond it are mostly wrong."""
        if not token_budget or (token_budget == "tail" and self.budget_tail_right):
            return 0
        return self.budget_tokens



@dataclass(frozen=True)
class ModelInfo:
    """Static facts of one pool model that policies may use (no recorded outcomes). The
    top-level accuracy, token and budget fields are its MMLU-Pro card; ``tasks`` holds a card
    per task family (MMLU-Pro included) and the methods below read the query's family."""

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
    tasks: Mapping[str, TaskCard] = field(default_factory=dict)
    params_b: float = 0.0  # billions of parameters (the model card's size); 0: unknown

    def card(self, task: str = "mmlu_pro") -> TaskCard:
        """The model's card for a task family (its MMLU-Pro facts when none is known)."""
        c = self.tasks.get(task)
        if c is not None:
            return c
        return TaskCard(self.accuracy, self.accuracy_by_category, self.max_tokens,
                        self.expected_tokens, {s: 1.0 for s in Strategy}, self.budget_tokens,
                        self.budget_expected_tokens)

    def call_tokens(self, strategy: Strategy, token_budget: TokenBudget = False,
                    task: str = "mmlu_pro") -> float:
        """Expected output tokens of one call (under the DeepThink budget if ``token_budget``)."""
        c = self.card(task)
        if strategy is Strategy.DEEPTHINK and c.budget(token_budget):
            return c.budget_expected_tokens
        return c.expected_tokens[strategy]

    def cap(self, strategy: Strategy, task: str = "mmlu_pro") -> int:
        """The serving cap of a call's output tokens on a task family."""
        return self.card(task).max_tokens[strategy]

    def expected_accuracy(self, query: QueryInfo) -> float:
        """Train-split accuracy of its step-by-step answers on the query's family and
        category (the family's accuracy where the card has no category, as for the families
        with one category)."""
        c = self.card(query.task)
        return c.accuracy_by_category.get(query.category, c.accuracy)


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
