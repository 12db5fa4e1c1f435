"""One simulated episode of the RL env, driven from the env's own thread.

The twin runs on a :class:`SimEventLoop`; a bridge policy awaits each decision (the workflow's
``plan_async`` / ``decide_async`` hooks), which pauses the loop right after the callback that
asked. :meth:`SubSim.answer` resumes it exactly where a synchronous decision would have returned,
so a sub-simulation runs the same callbacks in the same order as a policy deciding in place: no
worker thread, no hand-off, and at most one decision pending at a time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import numpy as np

from inframind_ray.config import PoolConfig
from inframind_ray.core.topology import Plan
from inframind_ray.core.types import (
    PoolInfo,
    QueryInfo,
    StepContext,
    StepDecision,
    SystemState,
    TokenBudget,
)
from inframind_ray.orchestration.runner import QueryResult, run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import FeatureBuilder, plan_of
from inframind_ray.tasks.workload import WorkloadSpec, make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import ModelReplicas, TwinLoadView, build_engines, pool_history
from inframind_ray.twin.simloop import SimEventLoop


@dataclass(frozen=True)
class Episode:
    """What one episode randomises: the workload, the metric age and the pool's history."""

    workload: WorkloadSpec
    metrics_period_s: float = 0.0
    history_seed: int | None = None  # None: a fresh pool
    deadlines: bool = True  # False: calls carry no deadline (nothing shed or aborted)


@dataclass(frozen=True)
class SimPool:
    """A pool as one sub-simulation needs it: config, policy view, outcomes and features."""

    config: PoolConfig
    info: PoolInfo
    outcome: OutcomeModel
    features: FeatureBuilder


def start_pool(pool: PoolConfig, info: PoolInfo, ep: Episode
               ) -> tuple[dict[str, ModelReplicas], TwinLoadView]:
    """The engines of one episode and the load view its policy reads (inside a running loop)."""
    engines = build_engines(pool)
    if ep.history_seed is not None:
        pool_history(engines, info, ep.history_seed, share=0.75)
    return engines, TwinLoadView(engines, ep.metrics_period_s)


def first_valid(mask: np.ndarray) -> int:
    """The first action a mask allows."""
    return int(np.flatnonzero(mask > 0)[0])


class _Bridge(Policy):
    """Awaits each decision from the sub-simulation's driver."""

    name = "rl-bridge"

    def __init__(self, sim: SubSim, token_budget: TokenBudget) -> None:
        super().__init__(sim.pool.info)
        self.sim, self.f = sim, sim.pool.features
        self.token_budget = token_budget
        self._action = 0  # the answer just awaited (read by _plan/_decide right after)

    async def plan_async(self, query: QueryInfo, state: SystemState) -> Plan:
        """Post the planner's observation; plan with the answer."""
        self._action = await self.sim.ask(f"plan/{self.sim.index}/{int(query.query_id[1:6])}",
                                          self.f.planner(query, state))
        return self.plan(query, state)

    async def decide_async(self, ctx: StepContext) -> StepDecision:
        """Post the executor's observation; decide with the answer."""
        n = int(ctx.query.query_id[1:6])
        self._action = await self.sim.ask(f"step/{self.sim.index}/{n}/{ctx.node.id}",
                                          self.f.executor(ctx))
        return self.decide(ctx)

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return plan_of(self._action)

    def _decide(self, ctx: StepContext) -> StepDecision:
        model, strategy = self.f.decision(self._action)
        return StepDecision(model, strategy)


class SubSim:
    """One episode on its own simulated loop; ``pending`` is the decision it waits for."""

    def __init__(self, index: int, pool: SimPool, ep: Episode, token_budget: TokenBudget) -> None:
        self.index, self.pool, self.episode = index, pool, ep
        self.pending: tuple[str, dict] | None = None
        self.results: list[QueryResult] = []  # finished queries not yet collected
        self._fut: asyncio.Future | None = None
        self.loop = SimEventLoop()
        self._bridge = _Bridge(self, token_budget)
        self._main = self.loop.create_task(self._run(make_queries(ep.workload)))
        self._main.add_done_callback(lambda _: self.loop.stop())

    @property
    def done(self) -> bool:
        """Every query of the episode has finished."""
        return self._main.done()

    def ask(self, aid: str, obs: dict) -> asyncio.Future:
        """(Inside the loop) post a decision and pause the loop until it is answered."""
        assert self.pending is None, "two decisions pending in one sub-simulation"
        self.pending, self._fut = (aid, obs), self.loop.create_future()
        self.loop.pause()
        return self._fut

    def advance(self) -> None:
        """Run the simulation until the next decision is pending or the episode ends."""
        if not self.done:
            self.loop.run_forever()
        if self.done and not self._main.cancelled() and self._main.exception() is not None:
            self.close()
            raise RuntimeError(f"twin simulation failed: {self._main.exception()!r}"
                               ) from self._main.exception()

    def answer(self, action: int) -> None:
        """Answer the pending decision and run until the next one."""
        if self.pending is None:
            raise ValueError(f"sub-simulation {self.index} has no pending decision")
        fut, self.pending, self._fut = self._fut, None, None
        self.loop.resume_first(fut, int(action))
        self.advance()

    def take_results(self) -> list[QueryResult]:
        """The queries finished since the last call."""
        out, self.results = self.results, []
        return out

    def close(self) -> None:
        """Cancel an unfinished episode (its pending decision with it) and close the loop."""
        if self.loop.is_closed():
            return
        tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in tasks:  # every query's tasks, and with them the awaited decision
            t.cancel()
        self.pending = self._fut = None
        while not all(t.done() for t in tasks):
            self.loop.call_soon(self.loop.stop)
            self.loop.run_forever()
            if self.pending is not None:  # a decision asked while cancelling
                (_, obs), fut = self.pending, self._fut
                self.pending = self._fut = None
                self.loop.resume_first(fut, first_valid(obs["mask"]))
        self.loop.close()

    async def _run(self, queries: list[QueryInfo]) -> None:
        loop = asyncio.get_running_loop()
        pool, ep = self.pool, self.episode
        engines, state = start_pool(pool.config, pool.info, ep)
        backend = TwinBackend(engines, pool.outcome)
        abort = pool.config.engine.on_deadline != "continue"

        async def one(q: QueryInfo) -> None:
            res = await run_query(q, self._bridge, backend, state, abort_on_deadline=abort,
                                  deadlines=ep.deadlines)
            self.results.append(res)  # (the list is swapped by take_results meanwhile)

        tasks = []
        for q in queries:
            await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
            tasks.append(loop.create_task(one(replace(q, arrival_s=loop.time()))))
        await asyncio.gather(*tasks)
