"""Policy contracts: what a planner and an executor see, and what they return.

``Policy.plan`` is called once per query, ``Policy.decide`` once per agent node right before the
call, with live load and the budget left. Both validate and dispatch to ``_plan`` / ``_decide``.
The same objects serve the twin (simulated clock) and the serving plane (wall clock). The value
types they exchange live in ``inframind_ray.core.types``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import ClassVar

from inframind_ray.core import types as T
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import Plan


class Policy(ABC):
    """Planner + executor. Subclasses implement ``_plan`` and ``_decide``."""

    name: ClassVar[str] = "policy"
    token_budget: T.TokenBudget = False  # cap DeepThink at the card budget (TaskCard.budget)

    def __init__(self, pool: T.PoolInfo, seed: int = 0) -> None:
        self.pool = pool
        self.seed = seed

    def call_tokens(self, info: T.ModelInfo, strategy: Strategy, task: str = "mmlu_pro"
                    ) -> float:
        """Expected output tokens of a call this policy makes on a task family."""
        return info.call_tokens(strategy, self.token_budget, task)

    def plan(self, query: T.QueryInfo, state: T.SystemState) -> Plan:
        """Choose topology, K and roles once per query. Do not override."""
        plan = self._plan(query, state)
        if not isinstance(plan, Plan):
            raise TypeError(f"{self.name}: _plan returned {type(plan).__name__}, not Plan")
        return plan

    def decide(self, ctx: T.StepContext) -> T.StepDecision:
        """Choose model and strategy for one agent call. Do not override."""
        d = self._decide(ctx)
        if not isinstance(d, T.StepDecision):
            raise TypeError(f"{self.name}: _decide returned {type(d).__name__}, not T.StepDecision")
        if d.model not in self.pool.names:
            raise ValueError(f"{self.name}: chose unknown model {d.model!r}")
        if d.strategy not in ctx.allowed:
            raise ValueError(f"{self.name}: strategy {d.strategy.value} not allowed here")
        card = self.pool[d.model].card(ctx.query.task)
        cap = card.max_tokens[d.strategy]
        budget = card.budget(self.token_budget)
        if budget and d.max_tokens is None and d.strategy is Strategy.DEEPTHINK:
            d = replace(d, max_tokens=budget)
        if d.max_tokens is not None and not 1 <= d.max_tokens <= cap:
            raise ValueError(f"{self.name}: max_tokens {d.max_tokens} outside [1, {cap}] for "
                             f"{d.model} {d.strategy.value}")
        return d

    @abstractmethod
    def _plan(self, query: T.QueryInfo, state: T.SystemState) -> Plan: ...

    @abstractmethod
    def _decide(self, ctx: T.StepContext) -> T.StepDecision: ...
