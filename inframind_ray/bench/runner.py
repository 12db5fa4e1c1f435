"""One benchmark cell = one (scheduling, policy, rate) simulation on a fresh pool; a sweep runs
cells in parallel processes. Every cell of a sweep sees the same items and budgets (paired
comparison)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from inframind_ray.config import PoolConfig
from inframind_ray.core.topology import build_graph
from inframind_ray.core.types import QueryInfo
from inframind_ray.orchestration.runner import AgentResult, QueryResult, degrade_of, run_query
from inframind_ray.policy.baselines import make_policy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.workload import WorkloadSpec, make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import TwinLoadView, build_engines, pool_history
from inframind_ray.twin.simloop import run_simulated

QUEUE_SAMPLE_S = 1.0
HORIZON_FACTOR = 20.0  # a run ends at last arrival + this x the largest budget, at the latest


@dataclass(frozen=True)
class CellSpec:
    """Everything one simulation needs (picklable)."""

    pool: PoolConfig
    policy: str
    workload: WorkloadSpec
    scheduling: str | None = None  # the queue order (None: the pool's)
    checkpoint: str | None = None  # of the learned policy (default: the shipped one)
    metrics_period_s: float = 0.0  # policies see load snapshots this old at most (0: fresh)
    pool_history: bool = False  # models start with a past load's latency EWMAs (seeded)
    load_factor: float | None = None  # the rate over the pool's measured capacity, if known
    deadlines: bool = True  # False: budget-free, calls carry no deadline (latency only)
    controller: str = "off"  # on: LAMaS's run-time controller (controller_checkpoint or the
    # shipped one); record: never stops, records its inputs and the realised delta (fitting)
    controller_checkpoint: str | None = None


@dataclass
class CellResult:
    """Per-query rows, per-call rows, queue samples and the summary row of one cell."""

    spec: CellSpec
    queries: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    queue: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    wall_s: float = 0.0
    simulated_s: float = 0.0
    traces: list[dict] = field(default_factory=list)  # controller fitting rows (record mode)


_OUTCOMES: dict[tuple, OutcomeModel] = {}


def outcome_for(pool: PoolConfig, seed: int) -> OutcomeModel:
    """Outcome model of a pool (cached per process)."""
    key = (tuple((m.name, m.recorded, tuple(sorted(m.stand_ins.items())), m.card)
                 for m in pool.models), seed)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = OutcomeModel.for_models(pool.models, seed=seed)
    return _OUTCOMES[key]


def run_cell(spec: CellSpec) -> CellResult:
    """Simulate one (policy, rate) cell on the virtual clock."""
    wall0 = time.perf_counter()
    outcome = outcome_for(spec.pool, spec.workload.seed)
    queries = make_queries(spec.workload)
    info = build_pool_info(spec.pool)
    policy = make_policy(
        spec.policy, info, spec.workload.seed,
        is_correct=lambda q, m, s: outcome.would_be_correct(q.item_id, m, s, q.task,
                                                            q.query_id),
        checkpoint=spec.checkpoint,
    )
    abort = spec.pool.engine.on_deadline != "continue"
    controller = None
    if spec.controller == "on":
        from inframind_ray.orchestration.controller import ExecutionController

        controller = ExecutionController.load(spec.controller_checkpoint)
    elif spec.controller == "record":
        from inframind_ray.bench.controller_traces import TraceRecorder

        controller = TraceRecorder()
    horizon = queries[-1].arrival_s + HORIZON_FACTOR * max(q.budget_s for q in queries)
    result = CellResult(spec)

    async def main() -> list[QueryResult | QueryInfo]:
        loop = asyncio.get_running_loop()
        engines = build_engines(spec.pool, spec.scheduling)
        if spec.pool_history:
            pool_history(engines, info, spec.workload.seed)
        state = TwinLoadView(engines, spec.metrics_period_s)
        backend = TwinBackend(engines, outcome, track=state.view.track)
        done = asyncio.Event()

        async def sample_queues() -> None:
            while not done.is_set():
                t = loop.time()
                for m, r in engines.items():
                    ld = r.load()
                    result.queue.setdefault(m, []).append((t, ld.waiting, ld.running))
                await asyncio.sleep(QUEUE_SAMPLE_S)

        sampler = loop.create_task(sample_queues())
        tasks: list[asyncio.Task] = []
        arrived: list[QueryInfo] = []
        for q in queries:
            await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
            q = replace(q, arrival_s=loop.time())
            arrived.append(q)
            tasks.append(loop.create_task(
                run_query(q, policy, backend, state, abort_on_deadline=abort,
                          deadlines=spec.deadlines, controller=controller,
                          degrade=degrade_of(spec.pool.engine))))
        await asyncio.wait(tasks, timeout=max(0.0, horizon - loop.time()))
        out: list[QueryResult | QueryInfo] = []
        for q, t in zip(arrived, tasks, strict=True):
            if t.done():
                out.append(t.result())
            else:
                t.cancel()
                out.append(q)  # timed out: reported, never dropped
        done.set()
        await asyncio.gather(*tasks, sampler, return_exceptions=True)
        for m, r in engines.items():
            slots = sum(e.max_num_seqs for e in r.engines)
            result.summary.setdefault("batch_occupancy", {})[m] = round(float(np.mean(
                [n for _, _, n in result.queue[m]])) / slots, 4)
            result.summary.setdefault("preemptions", {})[m] = sum(
                e.num_preemptions for e in r.engines)
        return out

    outs, result.simulated_s = run_simulated(main())
    for o in outs:
        _record(result, o, outcome, spec)
    if spec.controller == "record":
        result.traces = [{"policy": spec.policy, "rate_per_min": spec.workload.rate_per_min,
                          **row} for row in controller.rows(outs, outcome)]
    result.wall_s = time.perf_counter() - wall0
    result.summary.update(summarize(result))
    return result


def _record(result: CellResult, o: QueryResult | QueryInfo, outcome: OutcomeModel,
            spec: CellSpec) -> None:
    base = {"policy": spec.policy, "scheduling": spec.scheduling,
            "controller": spec.controller, "rate_per_min": spec.workload.rate_per_min}
    if isinstance(o, QueryInfo):
        result.queries.append({**base, "query_id": o.query_id, "item_id": o.item_id,
                               "task": o.task, "category": o.category, "arrival_s": o.arrival_s,
                               "budget_s": o.budget_s, "latency_s": float("nan"),
                               "status": "timed_out", "answer": None, "correct": False,
                               "within_budget": False, "topology": None, "k": 0, "n_calls": 0,
                               "critical_path": 0, "n_nodes": 0, "stopped_early": False,
                               "n_cancelled": 0, "n_cancelled_calls": 0, "degraded": False})
        return
    q = o.query
    correct = outcome.is_correct(q.item_id, o.answer, q.task)
    graph = build_graph(o.plan)
    result.queries.append({
        **base, "query_id": q.query_id, "item_id": q.item_id, "task": q.task,
        "category": q.category,
        "arrival_s": q.arrival_s, "budget_s": q.budget_s, "latency_s": o.latency,
        "status": o.status.api, "answer": o.answer, "correct": correct,
        "within_budget": o.within_budget, "topology": o.plan.topology.value, "k": o.plan.k,
        "n_calls": len(o.steps), "critical_path": graph.critical_path_len,
        "n_nodes": len(graph.nodes), "stopped_early": o.stopped_early,
        "n_cancelled": len(o.cancelled), "n_cancelled_calls": len(o.cancelled_calls),
        "degraded": o.degraded,
    })
    for s in o.steps:
        result.calls.append({
            **base, "query_id": q.query_id, "node_id": s.node_id, "role": s.role,
            "kind": s.kind, "model": s.model, "strategy": s.strategy.value, "status": s.status.api,
            "start_s": s.start, "end_s": s.end,
            "ttft_s": None if s.first_token is None else s.first_token - s.start,
            "latency_s": s.end - s.start, "prompt_tokens": s.prompt_tokens,
            "output_tokens": s.output_tokens, "preemptions": s.num_preemptions,
            "imposed_s": s.imposed_s,
            "deadline_s": q.deadline, "degraded_from": s.degraded_from, **_dispatch_load(s),
        })


def _dispatch_load(s: AgentResult) -> dict:
    """The chosen model's live metrics when the executor decided (telemetry for predictors)."""
    ld = s.load
    if ld is None:
        return {"load_waiting": None, "load_running": None, "load_kv_usage": None,
                "load_e2e_ewma_s": None, "load_replicas": None, "load_age_s": None}
    return {"load_waiting": ld.waiting, "load_running": ld.running,
            "load_kv_usage": ld.kv_usage, "load_e2e_ewma_s": ld.e2e_s,
            "load_replicas": ld.replicas, "load_age_s": ld.age(s.start)}


def _mix(values: list[str]) -> dict[str, float]:
    c = Counter(v for v in values if v is not None)
    n = sum(c.values()) or 1
    return {k: round(v / n, 4) for k, v in sorted(c.items())}


def _rates(qs: list[dict]) -> dict[str, float]:
    """Goodput, accuracy and SLO attainment of query rows (timed-out ones count as misses)."""
    n = len(qs)
    return {"goodput": round(sum(q["correct"] and q["within_budget"] for q in qs) / n, 4),
            "accuracy": round(sum(q["correct"] for q in qs) / n, 4),
            "slo_attainment": round(sum(q["within_budget"] for q in qs) / n, 4)}


def controller_terms(qs: list[dict]) -> dict:
    """The execution controller's effect on query rows: multi-agent queries, their mean
    latency, the share stopped early, and the share of their agent calls cancelled in flight
    (of the calls dispatched: finished + cancelled) and of their planned nodes never run."""
    multi = [q for q in qs if q["n_nodes"] > 1]
    lat = [q["latency_s"] for q in multi if q["status"] != "timed_out"]
    sent = sum(q["n_calls"] + q["n_cancelled_calls"] for q in multi)
    planned = sum(q["n_nodes"] for q in multi)
    return {
        "multi_agent_queries": len(multi),
        "multi_agent_latency_mean_s": round(float(np.mean(lat)), 3) if lat else None,
        "multi_agent_accuracy": round(float(np.mean([q["correct"] for q in multi])), 4)
        if multi else None,
        "stopped_early_share": round(float(np.mean([q["stopped_early"] for q in multi])), 4)
        if multi else None,
        "cancelled_call_share": round(sum(q["n_cancelled_calls"] for q in multi) / sent, 4)
        if sent else None,
        "skipped_node_share": round(sum(q["n_cancelled"] - q["n_cancelled_calls"]
                                        for q in multi) / planned, 4) if planned else None,
    }


def by_task(r: CellResult) -> dict[str, dict]:
    """Per task family: queries, goodput, accuracy, SLO attainment, mean latency, model mix."""
    out = {}
    for t in dict.fromkeys(q["task"] for q in r.queries):
        qs = [q for q in r.queries if q["task"] == t]
        ids = {q["query_id"] for q in qs}
        lat = [q["latency_s"] for q in qs if q["status"] != "timed_out"]
        out[t] = {
            "n_queries": len(qs),
            **_rates(qs),
            "latency_mean_s": round(float(np.mean(lat)), 3) if lat else None,
            "model_mix": _mix([c["model"] for c in r.calls if c["query_id"] in ids]),
            "strategy_mix": _mix([c["strategy"] for c in r.calls if c["query_id"] in ids]),
            **controller_terms(qs),
        }
    return out


def summarize(r: CellResult) -> dict:
    """The results.json row of one cell."""
    qs, calls = r.queries, r.calls
    n = len(qs)
    lat = np.array([q["latency_s"] for q in qs if q["status"] != "timed_out"])
    lat_all = np.where(np.isnan([q["latency_s"] for q in qs]), np.inf,
                       [q["latency_s"] for q in qs])
    queue = {m: round(float(np.mean([w for _, w, _ in s])), 2) for m, s in r.queue.items()}
    queue_max = {m: int(max(w for _, w, _ in s)) for m, s in r.queue.items()}
    return {
        "policy": r.spec.policy,
        "scheduling": r.spec.scheduling,
        "controller": r.spec.controller,
        "rate_per_min": r.spec.workload.rate_per_min,
        "load_factor": r.spec.load_factor,
        "n_queries": n,
        **_rates(qs),
        "latency_mean_s": round(float(lat.mean()), 3) if len(lat) else None,
        "latency_p95_s": round(float(np.percentile(lat_all, 95)), 3),
        "latency_p99_s": round(float(np.percentile(lat_all, 99)), 3),
        "model_mix": _mix([c["model"] for c in calls]),
        "strategy_mix": _mix([c["strategy"] for c in calls]),
        # how agent calls ended: ok, deadline (passed in a queue or the runner, or shed),
        # overloaded (a replica queue was full), rejected (does not fit the KV cache), error
        "call_status_mix": _mix([c["status"] for c in calls]),
        "topology_mix": _mix([q["topology"] for q in qs]),
        "calls_per_query": round(len(calls) / n, 3),
        # on_deadline degrade: queries with a call given up for the fastest answer
        "degraded_share": round(sum(q["degraded"] for q in qs) / n, 4),
        "timed_out": sum(q["status"] == "timed_out" for q in qs),
        "queue_depth_mean": queue,
        "queue_depth_max": queue_max,
        **controller_terms(qs),
        "wall_s": round(r.wall_s, 3),
        "simulated_s": round(r.simulated_s, 3),
        "by_task": by_task(r),
    }
