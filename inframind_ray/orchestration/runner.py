"""Run one query's agent DAG: the same code on the simulated clock (twin) and wall clock (Serve).

Independent nodes run concurrently as asyncio tasks; each node asks the executor right before its
call, with the budget left and live load. Every node inherits the query's deadline. Latency is
taken from timestamps recorded at real call boundaries (never from a formula): the query ends when
its last node ends, the final aggregator included.

With an execution controller (``orchestration/controller.py``, LAMaS's run-time half) the runner
asks it after every finished node of a multi-agent plan whether to stop; on stop it cancels the
pending node tasks (a backend aborts a cancelled call's engine request) and answers with the vote
over the finished answers. Without one, every node runs to its end.

With ``degrade`` (a pool's ``engine.on_deadline: degrade``) a call that has not ended when only
a reserve for the fastest answer is left of the budget (or that a replica refused as too late,
or overloaded) is given up (aborted) and the node is sent again as that fastest answer
(``policy.latency.fastest_call``): a late query becomes a quick one, right or wrong, within its
budget. The result names the model given up (``AgentResult.degraded_from``).

A policy may also offer ``plan_async`` / ``decide_async`` (the RL env's bridge): the workflow then
awaits each decision instead of calling it, so a driver outside the loop can supply it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from inframind_ray.config.engine import EngineConfig
from inframind_ray.core.clock import LOOP_CLOCK, Clock
from inframind_ray.core.request import ProgramService, RequestStatus
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import AgentNode, Plan, build_graph
from inframind_ray.core.types import LoadSnapshot, PoolInfo, QueryInfo, StepContext, SystemState
from inframind_ray.orchestration.controller import (
    ControllerDecision,
    ExecutionController,
    is_decision_point,
    make_input,
)
from inframind_ray.policy.base import Policy
from inframind_ray.policy.latency import fastest_call
from inframind_ray.tasks.prompts import build_prompt
from inframind_ray.tasks.registry import extract


@dataclass(frozen=True)
class AgentCall:
    """One agent call as sent to a backend."""

    query: QueryInfo
    node: AgentNode
    model: str
    strategy: Strategy
    prompt: str
    upstream: tuple[AgentResult, ...]
    max_tokens: int
    deadline: float
    sample: int = 0  # earlier agents (plan slots) of the same model in this query
    program: ProgramService = ProgramService()  # the query's id and attained service


@dataclass(frozen=True)
class AgentResult:
    """The outcome of one agent call; times are on the driving clock."""

    node_id: int
    role: str
    kind: str
    model: str
    strategy: Strategy
    status: RequestStatus  # terminal: FINISHED (ok), DEADLINE, REJECTED, OVERLOADED, ERROR
    text: str | None
    start: float
    end: float
    first_token: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    num_preemptions: int = 0
    load: LoadSnapshot | None = None  # the chosen model's live metrics when the executor decided
    task: str = "mmlu_pro"  # the query's task family: how the answer is read from the text
    service_s: float = 0.0  # seconds in the engine (admission there to the end); 0 if refused
    degraded_from: str | None = None  # the model of the call given up for this fallback
    given_up_start: float | None = None  # when that given-up call was sent
    imposed_s: float = 0.0  # delay it added to the other running requests (twin engine only)

    @property
    def answer(self) -> str | None:
        """The answer the text gives (the family's extraction: a letter, number, program)."""
        return extract(self.task, self.text) if self.status.ok else None


@dataclass(frozen=True)
class Degrade:
    """``on_deadline: degrade``: the reserve kept for the fallback answer is ``factor`` times its
    predicted seconds plus ``floor_s`` (the control plane's own delay in sending it)."""

    factor: float = 2.0
    floor_s: float = 1.0

    def reserve_s(self, predicted_s: float) -> float:
        """Seconds before the deadline at which a call still running is given up."""
        return self.factor * predicted_s + self.floor_s


# a call that ended so, before its reserve point, is sent again as the fallback
_DEGRADABLE = frozenset({RequestStatus.DEADLINE, RequestStatus.OVERLOADED})


def degrade_of(engine: EngineConfig) -> Degrade | None:
    """The pool's degrade rule (``engine.on_deadline: degrade``), or None."""
    if engine.on_deadline != "degrade":
        return None
    return Degrade(engine.degrade_reserve, engine.degrade_reserve_s)


class AgentBackend(Protocol):
    """Executes agent calls (twin engines, Serve deployment handles, remote endpoints)."""

    async def call(self, call: AgentCall) -> AgentResult:
        """Run the call; may be cancelled (the backend must then abort the engine request)."""
        ...


@dataclass
class QueryResult:
    """One query end to end."""

    query: QueryInfo
    plan: Plan
    steps: list[AgentResult] = field(default_factory=list)
    answer: str | None = None
    end: float = 0.0
    status: RequestStatus = RequestStatus.FINISHED  # the final agent call's
    # the execution controller (none: every node ran to its end)
    stopped_early: bool = False
    cancelled: tuple[int, ...] = ()  # nodes cancelled on stop (dispatched or not yet)
    cancelled_calls: tuple[int, ...] = ()  # of those, the ones whose call was in flight
    answer_from: tuple[int, ...] = ()  # provenance: the nodes whose answer is the final one
    decisions: tuple[ControllerDecision, ...] = ()

    @property
    def text(self) -> str | None:
        """The response text of the answer: the final node's (None if it failed), or on an early
        stop that of the latest finished node that gave the winning answer."""
        if not self.steps:
            return None
        if not self.stopped_early:
            return self.steps[-1].text
        by_id = {s.node_id: s for s in self.steps}
        return by_id[self.answer_from[-1]].text if self.answer_from else None

    @property
    def latency(self) -> float:
        """Arrival to the end of the last agent call."""
        return self.end - self.query.arrival_s

    @property
    def degraded(self) -> bool:
        """Some agent call was given up for the fastest answer (``on_deadline: degrade``)."""
        return any(s.degraded_from for s in self.steps)

    @property
    def within_budget(self) -> bool:
        """The final response was delivered by the deadline (SLO met, right or wrong)."""
        return self.status.ok and self.end <= self.query.deadline + 1e-9


async def run_query(
    query: QueryInfo,
    policy: Policy,
    backend: AgentBackend,
    state_fn: Callable[[], SystemState],
    *,
    abort_on_deadline: bool = True,
    clock: Clock = LOOP_CLOCK,
    deadlines: bool = True,
    controller: ExecutionController | None = None,
    degrade: Degrade | None = None,
) -> QueryResult:
    """Plan, run the DAG with parallel independent nodes, return the final answer and the trace.
    Without ``deadlines`` (a budget-free, latency-only workload) the calls carry no deadline (no
    queue sheds them, nothing aborts them); the policy still reads the query's budget.

    Times (the query's arrival and deadline, the state's, the results') are on ``clock``: the
    loop's (simulated seconds in the twin) or the wall clock (epoch seconds when served).

    ``controller``: asked after each finished node of a multi-agent plan (see the module
    docstring); the result records whether it stopped early, what it cancelled and where the
    answer came from.

    ``degrade``: give up a call too late for its budget for the fastest answer (module
    docstring); only where calls abort on their deadline."""
    loop = asyncio.get_running_loop()
    plan_async = getattr(policy, "plan_async", None)  # a policy that awaits its decisions
    decide_async = getattr(policy, "decide_async", None)
    plan = (await plan_async(query, state_fn()) if plan_async is not None
            else policy.plan(query, state_fn()))
    graph = build_graph(plan)
    tasks: dict[int, asyncio.Task[AgentResult]] = {}
    slots_of: dict[str, list[int]] = {}  # model -> plan slots using it, in decision order
    chosen: list[str] = []  # models of the calls decided so far
    node_models: dict[int, str] = {}  # node -> its model, once decided (controller priors)
    attained = [0.0]  # engine seconds of the query's calls ended so far (PLAS)
    path: dict[int, float] = {}  # node -> service along its critical path, its own included
    dispatched: set[int] = set()  # nodes whose backend call has been sent

    def sample_of(model: str, slot: int) -> int:
        """Earlier plan slots of this query on ``model`` (the slot recorded on first use)."""
        slots = slots_of.setdefault(model, [])
        if slot not in slots:
            slots.append(slot)
        return slots.index(slot)

    def prompt_for(node: AgentNode, strategy: Strategy, ups: tuple[AgentResult, ...]) -> str:
        texts = [u.text for u in ups if u.status.ok and u.text]
        return build_prompt(query.text, node.role, node.kind.value, strategy, texts, query.task)

    async def send(call: AgentCall, timeout: float | None, start: float) -> AgentResult:
        """The backend's result, or DEADLINE once ``timeout`` seconds have passed (None: no
        limit; the call is then cancelled, aborting its engine request)."""
        if timeout is not None and timeout <= 0:
            return _failed(call.node, call.model, call.strategy, RequestStatus.DEADLINE, start,
                           start)
        try:
            return await (backend.call(call) if timeout is None
                          else asyncio.wait_for(backend.call(call), timeout))
        except TimeoutError:
            return _failed(call.node, call.model, call.strategy, RequestStatus.DEADLINE, start,
                           clock.now())

    async def run_node(node: AgentNode) -> AgentResult:
        ups = tuple([await tasks[d] for d in node.deps])
        now = clock.now()
        ctx = StepContext(
            query=query,
            plan=plan,
            node=node,
            remaining_depth=graph.remaining_depth(node.id),
            now=now,
            state=state_fn(),
            upstream_models=tuple(u.model for u in ups),
            upstream_tokens=sum(u.output_tokens for u in ups if u.status.ok),
            earlier_models=tuple(chosen),
        )
        d = await decide_async(ctx) if decide_async is not None else policy.decide(ctx)
        path_in = max((path[u] for u in node.deps), default=0.0)
        chosen.append(d.model)
        node_models[node.id] = d.model
        call = AgentCall(
            query=query,
            node=node,
            model=d.model,
            strategy=d.strategy,
            prompt=prompt_for(node, d.strategy, ups),
            upstream=ups,
            max_tokens=d.max_tokens or policy.pool[d.model].cap(d.strategy, query.task),
            deadline=query.deadline if deadlines else math.inf,
            sample=sample_of(d.model, node.slot),
            program=ProgramService(query.query_id, attained[0], path_in),
        )
        remaining = query.deadline - now
        abort = abort_on_deadline and deadlines
        if abort and remaining <= 0:
            res = _failed(node, d.model, d.strategy, RequestStatus.DEADLINE, now, now)
        else:
            dispatched.add(node.id)
            reserve = (degrade.reserve_s(fastest_call(policy.pool, ctx)[1])
                       if abort and degrade is not None else 0.0)
            degrading = 0 < remaining - reserve < remaining  # given up at its reserve point
            res = await send(call, (remaining - reserve if degrading else remaining)
                             if abort else None, now)
            if degrading and res.status in _DEGRADABLE:
                res = await fallback(call, ctx, res)
        attained[0] += res.service_s
        path[node.id] = path_in + res.service_s
        return replace(res, load=ctx.state.models.get(res.model), task=query.task)

    async def fallback(call: AgentCall, ctx: StepContext, given_up: AgentResult) -> AgentResult:
        """Send ``call``'s node again as the fastest answer at the live load, due at the
        query's deadline; ``given_up`` is the call it replaces."""
        now = clock.now()
        fb = fastest_call(policy.pool, replace(ctx, now=now, state=state_fn()))[0]
        fcall = replace(
            call, model=fb.model, strategy=fb.strategy,
            prompt=prompt_for(call.node, fb.strategy, call.upstream),
            max_tokens=policy.pool[fb.model].cap(fb.strategy, query.task),
            sample=sample_of(fb.model, call.node.slot))
        res = await send(fcall, query.deadline - now, now)
        return replace(res, degraded_from=given_up.model, given_up_start=given_up.start)

    for node in graph.nodes:  # topological order: deps already have tasks
        tasks[node.id] = loop.create_task(run_node(node))
    try:
        if controller is None or len(graph.nodes) == 1:
            steps = list(await asyncio.gather(*tasks.values()))
        else:
            return await _controlled(query, plan, graph, tasks, controller, state_fn, clock,
                                     dispatched, node_models, policy.pool)
    except asyncio.CancelledError:
        for t in tasks.values():
            t.cancel()
        raise
    final = steps[-1]
    result = QueryResult(query, plan, steps, final.answer, max(s.end for s in steps))
    if not final.status.ok:
        result.status = final.status
    return result


async def _controlled(query: QueryInfo, plan: Plan, graph, tasks: dict[int, asyncio.Task],
                      controller: ExecutionController, state_fn: Callable[[], SystemState],
                      clock: Clock, dispatched: set[int], node_models: dict[int, str],
                      pool: PoolInfo | None) -> QueryResult:
    """Await the nodes as they finish (same-instant ends in node order); after each, ask the
    controller (with the nodes' models so far and the pool's cards, for the priors of who
    agrees); on stop, cancel the rest and answer with the vote over the finished answers."""
    done: list[AgentResult] = []
    decisions: list[ControllerDecision] = []
    pending = set(tasks.values())
    node_of = {t: i for i, t in tasks.items()}
    while pending:
        finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in sorted(finished, key=node_of.__getitem__):
            done.append(t.result())
        last = done[-1].node_id
        if not pending or not is_decision_point(graph, last):
            continue
        inp = make_input(query, plan, graph, [(s.node_id, s.answer) for s in done],
                         clock.now(), state_fn(), node_models, pool)
        d = controller.decide(last, inp)
        decisions.append(d)
        if not d.stop:
            continue
        cancelled = tuple(sorted(node_of[t] for t in pending))
        in_flight = tuple(i for i in cancelled if i in dispatched)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)  # engine aborts happen here
        v = inp.vote
        steps = sorted(done, key=lambda s: s.node_id)
        # the controller never stops without an answer: the query is answered when it stops
        return QueryResult(
            query, plan, steps, v.answer, max(s.end for s in done), stopped_early=True,
            cancelled=cancelled, cancelled_calls=in_flight, answer_from=v.support,
            decisions=tuple(decisions))
    steps = sorted(done, key=lambda s: s.node_id)
    final = steps[-1]
    result = QueryResult(query, plan, steps, final.answer, max(s.end for s in steps),
                         answer_from=(final.node_id,), decisions=tuple(decisions))
    if not final.status.ok:
        result.status = final.status
    return result


def _failed(node: AgentNode, model: str, strategy: Strategy, status: RequestStatus, start: float,
            end: float) -> AgentResult:
    return AgentResult(node.id, node.role, node.kind.value, model, strategy, status, None, start,
                       end)
