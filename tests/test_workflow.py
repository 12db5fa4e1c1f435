"""Topologies and the workflow runner: critical-path latency, real parallelism, deadlines."""

from __future__ import annotations

import asyncio

import pytest

from inframind_ray.core.profile import IterationProfile
from inframind_ray.core.request import RequestStatus
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind, Plan, Topology, build_graph
from inframind_ray.core.types import (
    LoadSnapshot,
    ModelInfo,
    PoolInfo,
    QueryInfo,
    StepDecision,
    SystemState,
)
from inframind_ray.orchestration.runner import AgentCall, AgentResult, run_query
from inframind_ray.policy.base import Policy
from inframind_ray.tasks.prompts import extract_answer, format_answer
from inframind_ray.twin.simloop import run_simulated

EXPECTED = {  # (topology, k) -> (nodes, critical path)
    (Topology.IO, 1): (1, 1),
    (Topology.COT, 1): (1, 1),
    (Topology.CHAIN, 3): (4, 4),
    (Topology.DEBATE, 3): (7, 3),
    (Topology.REFLECTION, 2): (3, 3),
    (Topology.FULLCONNECTED, 3): (4, 4),
}


def _info(name: str) -> ModelInfo:
    p = IterationProfile(0.01, 0, 0, 0)
    toks = {s: 10 for s in Strategy}
    return ModelInfo(name, p, 16, 1, 10_000, toks, toks, {}, 0.5)


POOL = PoolInfo((_info("fast"), _info("slow")))
DURATION = {"fast": 1.0, "slow": 2.5}


class FixedPolicy(Policy):
    """Plan fixed per test; the aggregator runs on 'slow', everyone else on 'fast'."""

    name = "fixed"

    def __init__(self, plan: Plan):
        super().__init__(POOL)
        self._p = plan

    def _plan(self, query, state):
        return self._p

    def _decide(self, ctx):
        model = "slow" if ctx.node.kind is NodeKind.AGGREGATOR else "fast"
        return StepDecision(model, ctx.allowed[-1])


class SleepBackend:
    """Each call sleeps a fixed time per model and answers (B)."""

    def __init__(self):
        self.active = 0
        self.max_active = 0

    async def call(self, call: AgentCall) -> AgentResult:
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(DURATION[call.model])
        finally:
            self.active -= 1
        return AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                           call.strategy, RequestStatus.FINISHED, format_answer("B"), start,
                           loop.time())


def _state(pool: PoolInfo = POOL):
    loop = asyncio.get_running_loop()
    loads = {m: LoadSnapshot(m, 1, 0, 0, 0.0, 0, 0, 0, loop.time()) for m in pool.names}
    return SystemState(loop.time(), loads)


@pytest.mark.parametrize("key", list(EXPECTED))
def test_critical_path_latency(key):
    """Query latency = the real critical path (parallel nodes overlap; the aggregator counts)."""
    topo, k = key
    plan = Plan.make(topo, k=k)
    graph = build_graph(plan)
    n_nodes, depth = EXPECTED[key]
    assert len(graph.nodes) == n_nodes and graph.critical_path_len == depth
    backend = SleepBackend()
    q = QueryInfo("q", "question", budget_s=1e6, arrival_s=0.0)
    res, _ = run_simulated(run_query(q, FixedPolicy(plan), backend, _state))
    has_agg = graph.final.kind is NodeKind.AGGREGATOR
    expected = (depth - 1) * DURATION["fast"] + DURATION["slow" if has_agg else "fast"]
    assert res.latency == pytest.approx(expected)
    assert len(res.steps) == n_nodes and res.answer == "B"
    if topo is Topology.DEBATE:
        assert backend.max_active == k  # independent nodes truly ran in parallel


def test_deadline_aborts_the_rest():
    """With abort-on-deadline, a chain past its deadline stops; latency equals the budget."""
    plan = Plan.make(Topology.CHAIN, k=4)
    q = QueryInfo("q", "question", budget_s=2.5, arrival_s=0.0)
    res, _ = run_simulated(run_query(q, FixedPolicy(plan), SleepBackend(), _state))
    assert res.status is RequestStatus.DEADLINE and res.answer is None and not res.within_budget
    assert res.latency == pytest.approx(2.5)


def test_cot_masks_flash():
    """CoT allows only reasoning strategies."""
    plan = Plan.make(Topology.COT)
    q = QueryInfo("q", "question", budget_s=100, arrival_s=0.0)

    class Flashy(FixedPolicy):
        def _decide(self, ctx):
            return StepDecision("fast", Strategy.FLASH)

    with pytest.raises(ValueError, match="not allowed"):
        run_simulated(run_query(q, Flashy(plan), SleepBackend(), _state))


def test_extract_answer():
    """The grader parses the answer format and lone letters only."""
    assert extract_answer("so... The answer is (C).") == "C"
    assert extract_answer("the answer is d") == "D"
    assert extract_answer(" B ") == "B"
    assert extract_answer("I think so") is None
    assert extract_answer(format_answer(None)) is None


def test_sample_index_counts_earlier_agents_of_the_same_model():
    """Each call carries how many earlier agents (plan slots) of the query use its model: the
    twin's outcome model gives the recorded answer to the first and fresh samples to the rest;
    an agent keeps its index across debate rounds."""
    seen: list[tuple[int, int, str, int]] = []
    earlier: list[tuple[str, ...]] = []

    class Recording(SleepBackend):
        async def call(self, call: AgentCall) -> AgentResult:
            seen.append((call.node.id, call.node.slot, call.model, call.sample))
            return await super().call(call)

    class Mixed(FixedPolicy):
        def _decide(self, ctx):  # slots 0 and 2 on 'fast', slot 1 and the aggregator on 'slow'
            model = "fast" if ctx.node.slot in (0, 2) else "slow"
            earlier.append(ctx.earlier_models)
            return StepDecision(model, ctx.allowed[-1])

    q = QueryInfo("q", "question", budget_s=1e6, arrival_s=0.0)
    run_simulated(run_query(q, Mixed(Plan.make(Topology.DEBATE, k=3, rounds=2)), Recording(),
                            _state))
    by_node = {n: (slot, model, sample) for n, slot, model, sample in seen}
    assert [by_node[n] for n in range(3)] == [(0, "fast", 0), (1, "slow", 0), (2, "fast", 1)]
    assert [by_node[n] for n in range(3, 6)] == [(0, "fast", 0), (1, "slow", 0), (2, "fast", 1)]
    assert by_node[6] == (3, "slow", 1)  # the aggregator is the second 'slow' agent
    assert earlier[0] == () and sorted(earlier[-1]) == ["fast"] * 4 + ["slow"] * 2


# ---------------------------------------------------------------- on_deadline: degrade
DEGRADE_POOL = PoolInfo((
    ModelInfo("quick", IterationProfile(0.01, 0, 0, 0), 16, 1, 10_000,
              {s: 10 for s in Strategy}, {s: 10 for s in Strategy}, {}, 0.4),
    ModelInfo("strong", IterationProfile(0.1, 0, 0, 0), 16, 1, 10_000,
              {s: 10 for s in Strategy}, {s: 10 for s in Strategy}, {}, 0.8),
))


class StrongPolicy(Policy):
    """One agent, always on 'strong' with DeepThink."""

    name = "strong-only"

    def __init__(self):
        super().__init__(DEGRADE_POOL)

    def _plan(self, query, state):
        return Plan.make(Topology.IO)

    def _decide(self, ctx):
        return StepDecision("strong", Strategy.DEEPTHINK)


class TailBackend:
    """'strong' takes ``strong_s`` (an item of the output-length tail) or refuses at once as too
    late; 'quick' takes 0.2 s. Records what was sent and what was cancelled."""

    def __init__(self, strong_s: float = 30.0, refuse: bool = False):
        self.strong_s, self.refuse = strong_s, refuse
        self.sent: list[tuple[str, Strategy, float]] = []
        self.cancelled: list[str] = []

    async def call(self, call: AgentCall) -> AgentResult:
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.sent.append((call.model, call.strategy, call.deadline))
        if call.model == "strong" and self.refuse:
            return AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                               call.strategy, RequestStatus.DEADLINE, None, start, start)
        try:
            await asyncio.sleep(self.strong_s if call.model == "strong" else 0.2)
        except asyncio.CancelledError:
            self.cancelled.append(call.model)
            raise
        return AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                           call.strategy, RequestStatus.FINISHED, format_answer("B"), start,
                           loop.time())


def _degrade_state():
    return _state(DEGRADE_POOL)


def test_degrade_gives_a_late_call_up_for_the_fastest_answer():
    """A call still running at its reserve point is aborted and the node answered by the
    fastest (model, strategy) within the budget; without degrade the same query misses it."""
    from inframind_ray.orchestration.runner import Degrade

    q = QueryInfo("q", "question", budget_s=10.0, arrival_s=0.0)
    be = TailBackend()
    res, _ = run_simulated(run_query(q, StrongPolicy(), be, _degrade_state,
                                     degrade=Degrade(2.0, 1.0)))
    # quick's Flash answer: 10 iterations of 0.01 s -> a reserve of 2 x 0.1 + 1 = 1.2 s
    assert [(m, s) for m, s, _ in be.sent] == [("strong", Strategy.DEEPTHINK),
                                               ("quick", Strategy.FLASH)]
    assert be.cancelled == ["strong"]  # the engine request of the given-up call was aborted
    assert res.within_budget and res.degraded and res.answer == "B"
    assert res.steps[-1].degraded_from == "strong" and res.steps[-1].model == "quick"
    assert res.steps[-1].given_up_start == 0.0 and res.steps[-1].start == pytest.approx(8.8)
    assert res.latency == pytest.approx(10.0 - 1.2 + 0.2)
    assert be.sent[1][2] == q.deadline  # the fallback is due at the query's deadline
    base, _ = run_simulated(run_query(q, StrongPolicy(), TailBackend(), _degrade_state))
    assert base.status is RequestStatus.DEADLINE and not base.within_budget
    assert not base.degraded


def test_degrade_answers_a_refused_call_and_leaves_a_timely_one_alone():
    """A call the replica refuses as too late is sent again as the fastest answer at once; a
    call that ends before its reserve point is not touched."""
    from inframind_ray.orchestration.runner import Degrade

    q = QueryInfo("q", "question", budget_s=10.0, arrival_s=0.0)
    be = TailBackend(refuse=True)
    res, _ = run_simulated(run_query(q, StrongPolicy(), be, _degrade_state, degrade=Degrade()))
    assert [m for m, _, _ in be.sent] == ["strong", "quick"]
    assert res.within_budget and res.latency == pytest.approx(0.2)
    assert res.steps[-1].degraded_from == "strong"
    be = TailBackend(strong_s=8.0)  # ends before 10 - 1.2 = 8.8 s
    res, _ = run_simulated(run_query(q, StrongPolicy(), be, _degrade_state, degrade=Degrade()))
    assert [m for m, _, _ in be.sent] == ["strong"] and not res.degraded
    assert res.within_budget and res.latency == pytest.approx(8.0)
