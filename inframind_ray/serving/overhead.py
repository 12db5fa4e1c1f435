"""The serving overhead, measured inside the orchestrator actor (``inframind overhead``): bare
deployment-handle hops against orchestrated agent steps, rollout recording off against on, and
the execution controller's cost per finished node."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from inframind_ray.core.clock import WALL_CLOCK
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import Plan, Topology, build_graph
from inframind_ray.core.types import QueryInfo, StepDecision
from inframind_ray.orchestration.controller import make_input
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.learned import LearnedPolicy
from inframind_ray.policy.recording import RecordingPolicy
from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.serving.rollouts import RolloutRecorder

if TYPE_CHECKING:
    from inframind_ray.serving.orchestrator import Orchestrator


async def measure_overhead(orch: Orchestrator, n: int, model: str, warmup: int = 20,
                           rollouts: bool = False) -> dict:
    """Bare deployment-handle hops vs orchestrated agent steps, interleaved (ms); with
    ``rollouts``, also the learned policy's steps with rollout recording off vs on."""
    backend = orch._backend()
    handle = backend.handles[model]
    policy = _FixedModel(orch.pool_info, model)
    bare, step = [], []
    for i in range(n + warmup):
        req = GenerateRequest(f"bare-{i}", "ping", 1, time.time() + 60)
        t = time.perf_counter()
        await handle.generate.remote(req)
        b = time.perf_counter() - t
        q = QueryInfo(f"ovh-{i}", "ping", 60.0, WALL_CLOCK.now())
        t = time.perf_counter()
        await run_query(q, policy, backend, orch.loads.system_state, clock=WALL_CLOCK)
        s = time.perf_counter() - t
        if i >= warmup:
            bare.append(b * 1e3)
            step.append(s * 1e3)

    def pct(xs: list[float], p: float) -> float:
        return round(statistics.quantiles(xs, n=100, method="inclusive")[p - 1], 3)

    diff = [s - b for s, b in zip(step, bare, strict=True)]
    out = {"n": n, "bare_hop_p50_ms": round(statistics.median(bare), 3),
           "bare_hop_p99_ms": pct(bare, 99), "step_p50_ms": round(statistics.median(step), 3),
           "step_p99_ms": pct(step, 99)}
    out["added_p50_ms"] = round(out["step_p50_ms"] - out["bare_hop_p50_ms"], 3)
    out["added_p99_ms"] = round(out["step_p99_ms"] - out["bare_hop_p99_ms"], 3)
    out["paired_added_p50_ms"] = round(statistics.median(diff), 3)
    out["paired_added_p99_ms"] = pct(diff, 99)
    if rollouts:
        out["rollouts"] = await _measure_recording(orch, n, warmup, pct)
    ctl = _controller_cost(orch, n + warmup, warmup)
    out["controller_per_node_p50_ms"] = round(statistics.median(ctl), 4)
    out["controller_per_node_p99_ms"] = pct(ctl, 99)
    return out


def _controller_cost(orch: Orchestrator, n: int, warmup: int) -> list[float]:
    """Milliseconds the execution controller adds when a node finishes: its input from the
    live load (``make_input``) and its decision (features + MLP), on a three-voter plan with
    two answers in, one of each kind of vote (unanimous, split) in turn."""
    ctl = orch._get_controller()
    plan = Plan.make(Topology.DEBATE, 3, rounds=1)
    graph = build_graph(plan)
    out = []
    for i in range(n):
        q = QueryInfo(f"ctl-{i}", "ping", 60.0, WALL_CLOCK.now() - 1.0, task="mmlu_pro")
        done = [(0, "A"), (1, "A" if i % 2 else "B")]
        t = time.perf_counter()
        ctl.decide(1, make_input(q, plan, graph, done, WALL_CLOCK.now(),
                                 orch.loads.system_state()))
        if i >= warmup:
            out.append((time.perf_counter() - t) * 1e3)
    return out


async def _measure_recording(orch: Orchestrator, n: int, warmup: int, pct) -> dict:  # noqa: ANN001
    """The learned policy's queries with rollout recording off and on, interleaved (its own
    plans, so a query may have several agent steps): the added milliseconds per agent step,
    row building and the Parquet writes (to a temporary folder) included."""
    import tempfile

    policy = orch._policy(LearnedPolicy.name)
    if not isinstance(policy, LearnedPolicy):
        return {"error": f"the learned policy does not serve: {orch.policy_status}"}
    backend = orch._backend()
    off, on, added, decisions = [], [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        rec = RolloutRecorder(tmp, orch.cfg.serving.rollouts)
        for i in range(n + warmup):
            q = QueryInfo(f"rec-off-{i}", "ping", 60.0, WALL_CLOCK.now())
            t = time.perf_counter()
            r_off = await run_query(q, policy, backend, orch.loads.system_state,
                                    clock=WALL_CLOCK)
            t_off = (time.perf_counter() - t) * 1e3 / len(r_off.steps)
            q = QueryInfo(f"rec-on-{i}", "ping", 60.0, WALL_CLOCK.now())
            t = time.perf_counter()
            ep = rec.start(q, "measure", (0, 0, 0))
            r_on = await run_query(q, RecordingPolicy(policy, rec.sink(ep)), backend,
                                   orch.loads.system_state, clock=WALL_CLOCK)
            rec.finish(ep, r_on, None)
            t_on = (time.perf_counter() - t) * 1e3 / len(r_on.steps)
            if i >= warmup:
                off.append(t_off)
                on.append(t_on)
                added.append(t_on - t_off)
                decisions += 1 + len(r_on.steps)
        rec.flush()
        files = len(rec.written)
    return {"n": n, "step_off_p50_ms": round(statistics.median(off), 3),
            "step_on_p50_ms": round(statistics.median(on), 3),
            "added_per_step_p50_ms": round(statistics.median(added), 3),
            "added_per_step_p99_ms": pct(added, 99),
            "decisions_per_query": round(decisions / n, 2), "parquet_files": files,
            "flush_rows": orch.cfg.serving.rollouts.flush_rows}


class _FixedModel(Policy):
    """IO plan on one model (overhead measurement)."""

    name = "fixed"

    def __init__(self, pool, model: str) -> None:  # noqa: ANN001
        super().__init__(pool)
        self.model = model

    def _plan(self, query, state):  # noqa: ANN001, ANN202
        return Plan.make(Topology.IO)

    def _decide(self, ctx):  # noqa: ANN001, ANN202
        return StepDecision(self.model, Strategy.FLASH)
