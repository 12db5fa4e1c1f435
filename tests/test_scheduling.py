"""Autellix's program-level schedulers beside EDF and FCFS, on the twin's clock: the priority
levels, the exact order of a hand-built set of programs, the anti-starvation bound, the victim
order of the engine's preemption, and the attained service the workflow runner sends with each
call (cumulative for PLAS, along the critical path for ATLAS)."""

from __future__ import annotations

import asyncio

import pytest
from programs import EXPECTED, pool_config, run_in_twin
from test_workflow import FixedPolicy, _state

from inframind_ray.core.clock import LOOP_CLOCK
from inframind_ray.core.constants import LAS_FIRST_S, LAS_LEVELS, STARVATION_RATIO
from inframind_ray.core.profile import IterationProfile
from inframind_ray.core.request import EngineRequest, ProgramService, RequestStatus
from inframind_ray.core.request_queue import PLASQueue, priority_level
from inframind_ray.core.topology import Plan, Topology
from inframind_ray.core.types import QueryInfo
from inframind_ray.orchestration.runner import AgentCall, AgentResult, run_query
from inframind_ray.replica.admission import DeadlineQueue
from inframind_ray.tasks.prompts import format_answer
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.simloop import run_simulated


def test_priority_levels_and_thresholds():
    """Level 0 below 1 s attained, then one level per doubling, the last unbounded."""
    assert LAS_FIRST_S == 1.0 and LAS_LEVELS == 8
    got = [priority_level(s) for s in (0.0, 0.99, 1.0, 1.99, 2.0, 3.9, 4.0, 63.9, 64.0, 1e6)]
    assert got == [0, 0, 1, 1, 2, 2, 3, 6, 7, 7]


@pytest.mark.parametrize("scheduling", ["plas", "atlas", "fcfs"])
def test_hand_built_programs_order_in_the_twin(tmp_path, scheduling):
    """The exact order on the virtual clock: PLAS by cumulative service, ATLAS by the critical
    path (a parallel program with 40 s attained but 0.5 s on its critical path goes first), FCFS
    within a level; the call due while the blocker runs is shed under every order."""
    assert run_in_twin(pool_config(tmp_path), scheduling) == EXPECTED[scheduling]


def test_starvation_bound():
    """A call of a program with 8 s attained, behind a stream of fresh programs on one slot,
    is promoted once it has waited STARVATION_RATIO x 8 s and then runs next: it waits no longer
    than that bound plus one call in service, and (the stream outranking it) not much less."""
    attained, service = 8.0, 1.0
    bound = STARVATION_RATIO * attained

    async def main() -> dict[str, float]:
        queue = DeadlineQueue(1, 1000, clock=LOOP_CLOCK, order="plas")
        loop = asyncio.get_running_loop()
        started: dict[str, float] = {}

        async def one(name: str, at: float, svc: float) -> None:
            await asyncio.sleep(at)

            async def run() -> None:
                started[name] = loop.time()
                await asyncio.sleep(service)

            await queue.submit(float("inf"), run, ProgramService(name, svc, svc))

        fresh = [one(f"fresh{i}", 0.5 * i, 0.0) for i in range(100)]  # 2 calls per service
        await asyncio.gather(one("heavy", 0.1, attained), *fresh)
        return started

    started = run_simulated(main())[0]
    waited = started["heavy"] - 0.1
    assert bound - service <= waited <= bound + service, waited
    assert sum(t < started["heavy"] for t in started.values()) < 50  # it did not wait for all


def test_engine_preempts_the_most_attained_service_first():
    """Under KV pressure the twin engine preempts the running call whose program has the most
    attained service (PLAS), not the latest arrival."""
    eng = TwinEngine("m", IterationProfile(0.01, 0, 0, 0), max_num_seqs=4,
                     kv_capacity_tokens=330, scheduling="plas")
    progs = {"old-heavy": 30.0, "light": 0.0, "new-light": 0.5}

    async def main() -> dict[str, int]:
        reqs = {n: EngineRequest(n, 100, 60, program=ProgramService(n, s, s))
                for n, s in progs.items()}
        await asyncio.gather(*(eng.generate(r) for r in reqs.values()))
        return {n: r.num_preemptions for n, r in reqs.items()}

    preempted = run_simulated(main())[0]
    assert preempted["old-heavy"] >= 1 and preempted["light"] == preempted["new-light"] == 0


class ServiceBackend:
    """Each call runs (and reports as service) 1 s + its slot, recording what it was sent."""

    def __init__(self) -> None:
        self.sent: dict[int, ProgramService] = {}

    async def call(self, call: AgentCall) -> AgentResult:
        loop = asyncio.get_running_loop()
        start, svc = loop.time(), 1.0 + call.node.slot
        self.sent[call.node.id] = call.program
        await asyncio.sleep(svc)
        return AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                           call.strategy, RequestStatus.FINISHED, format_answer("B"), start,
                           loop.time(), service_s=svc)


def test_runner_sends_attained_service_and_critical_path():
    """Debate k=2 (two solvers, two refiners reading both, an aggregator): each call carries the
    query id, the service of the query's calls ended before it, and the most service along one
    chain of its upstream calls."""
    backend = ServiceBackend()
    q = QueryInfo("q7", "question", budget_s=1e6, arrival_s=0.0)
    run_simulated(run_query(q, FixedPolicy(Plan.make(Topology.DEBATE, k=2)), backend, _state))
    got = {n: (p.program_id, p.attained_s, p.critical_path_s) for n, p in backend.sent.items()}
    # services: solvers 1, 2 (slots 0, 1); refiners 1, 2; aggregator (slot 2) 3
    assert got == {0: ("q7", 0.0, 0.0), 1: ("q7", 0.0, 0.0),
                   2: ("q7", 3.0, 2.0), 3: ("q7", 3.0, 2.0),
                   4: ("q7", 6.0, 4.0)}


def test_plas_queue_iterates_in_rank_order():
    """Iteration (what snapshots and operators read) is the admission order."""
    q = PLASQueue()
    for i, s in enumerate((20.0, 0.0, 5.0, 0.5)):
        q.add(EngineRequest(f"r{i}", 1, 1, arrival=float(i), seq=i,
                            program=ProgramService(f"p{i}", s, s)))
    assert [r.request_id for r in q] == ["r1", "r3", "r2", "r0"]
    assert [q.pop().request_id for _ in range(len(q))] == ["r1", "r3", "r2", "r0"]


def test_vllm_gets_the_level_as_priority():
    """vLLM's priority is the replica's order: the attained-service level under PLAS / ATLAS
    (ties by arrival in vLLM: FCFS within a level), the deadline under EDF, one for all under
    FCFS. (No engine is started: ``request_priority`` is pure.)"""
    from inframind_ray.serving.engines.base import GenerateRequest
    from inframind_ray.serving.engines.vllm_engine import VLLMEngine

    req = GenerateRequest("r", "p", 8, 1e12, attained_s=5.0, critical_path_s=0.5)
    got = {s: VLLMEngine("m", scheduling=s).request_priority(req)
           for s in ("plas", "atlas", "fcfs")}
    assert got == {"plas": 3, "atlas": 0, "fcfs": 0}
    edf = VLLMEngine("m", scheduling="edf")
    assert edf.request_priority(req) == edf.priority(1e12)
