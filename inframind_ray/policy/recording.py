"""What a learner needs of each served decision, and the wrapper that reports it.

``RecordingPolicy`` wraps the learned policy for ONE query: it takes the same greedy decisions
(the same forward pass), or with ``explore`` draws each from the network's softmax mixed with
``epsilon`` of uniform choice among the valid actions, and hands a
``Decision`` to ``sink`` for the planner's choice and for every agent step: the observation the
network saw, the action, its log-probability under the policy that chose it (the behaviour
policy's, which a learner's importance ratio needs) and the value estimate. One wrapper per
query keeps the decisions of concurrent queries apart without any shared state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from inframind_ray.core.topology import Plan
from inframind_ray.core.types import QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import plan_of
from inframind_ray.policy.learned import LearnedPolicy


@dataclass(frozen=True)
class Decision:
    """One decision as served: ``kind`` plan (``node_id`` None) or step."""

    kind: str
    node_id: int | None
    obs: dict[str, np.ndarray]
    action: int
    logp: float
    value: float
    state: SystemState  # the live load the policy read
    model: str | None = None  # a step's chosen model and strategy
    strategy: str | None = None
    epsilon: float | None = None  # drawn from the behaviour mix with this epsilon; None: greedy


class RecordingPolicy(Policy):
    """The learned policy's decisions for one query, each also given to ``sink``."""

    def __init__(self, inner: LearnedPolicy, sink: Callable[[Decision], None],
                 explore: np.random.Generator | None = None, epsilon: float = 0.0) -> None:
        super().__init__(inner.pool, inner.seed)
        self.inner = inner
        self.sink = sink
        self.explore = explore  # draws the query's actions (see LearnedPolicy.act) when given
        self.epsilon = epsilon
        self.name = inner.name
        self.token_budget = inner.token_budget

    @property
    def _drawn(self) -> float | None:
        """The epsilon of this query's drawn decisions; None when they are greedy."""
        return None if self.explore is None else self.epsilon

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        obs = self.inner.features.planner(query, state)
        action, logp, value = self.inner.act("planner", obs, self.explore, self.epsilon)
        self.sink(Decision("plan", None, obs, action, logp, value, state,
                           epsilon=self._drawn))
        return plan_of(action)

    def _decide(self, ctx: StepContext) -> StepDecision:
        obs = self.inner.features.executor(ctx)
        action, logp, value = self.inner.act("executor", obs, self.explore, self.epsilon)
        model, strategy = self.inner.features.decision(action)
        self.sink(Decision("step", ctx.node.id, obs, action, logp, value, ctx.state, model,
                           strategy.value, self._drawn))
        return StepDecision(model, strategy)
