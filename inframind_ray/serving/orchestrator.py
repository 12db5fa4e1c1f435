"""The orchestrator actor: embeds a query, plans with the load summary, runs the agent DAG through
deployment handles with the SAME workflow code as the twin, grades, records, and aggregates the
replicas' metrics."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from pathlib import Path

from inframind_ray.config import PoolConfig
from inframind_ray.core.clock import WALL_CLOCK
from inframind_ray.core.types import LoadSnapshot, QueryInfo
from inframind_ray.errors import InframindError
from inframind_ray.orchestration.controller import ExecutionController
from inframind_ray.orchestration.runner import (
    AgentCall,
    AgentResult,
    QueryResult,
    degrade_of,
    run_query,
)
from inframind_ray.policy.base import Policy
from inframind_ray.policy.baselines import make_policy
from inframind_ray.policy.learned import CheckpointError, LearnedPolicy
from inframind_ray.policy.recording import RecordingPolicy
from inframind_ray.policy.registry import RegistryError
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.replica.load_view import LoadView
from inframind_ray.replica.predict import fastest_finish_in_s, too_late
from inframind_ray.serving.backend import ServeBackend
from inframind_ray.serving.canary import CanaryRunner
from inframind_ray.serving.engines.base import GenerateResult
from inframind_ray.serving.metrics import OrchestratorMetrics
from inframind_ray.serving.queries import (
    NotFound,
    UserError,
    grade_answer,
    grade_final,
    query_info,
    response_body,
)
from inframind_ray.serving.records import RecordWriter
from inframind_ray.serving.replica import deployment_name
from inframind_ray.serving.rollouts import RolloutRecorder, explorer
from inframind_ray.serving.tracing import Tracing
from inframind_ray.serving.versions import ServedVersion

log = logging.getLogger(__name__)

APP_NAME = "inframind"


class Orchestrator:
    """Ray actor (created by :func:`inframind_ray.serving.app.start`)."""

    def __init__(self, pool_cfg: dict, otel: str | None = None) -> None:
        self.cfg = PoolConfig.model_validate(pool_cfg)
        self.pool_info = build_pool_info(self.cfg)
        self.degrade = degrade_of(self.cfg.engine)  # engine.on_deadline: degrade, or None
        s = self.cfg.serving
        self.loads = LoadView(self.pool_info.names, clock=WALL_CLOCK,
                              stale_after_s=s.stale_after_s,
                              unavailable_after_s=s.unavailable_after_s)
        self.records = RecordWriter(Path(s.records_dir))
        self.rollouts = RolloutRecorder(Path(s.records_dir), s.rollouts)
        self.policies: dict[str, Policy] = {}
        self.default_policy = s.default_policy
        self.policy_status = "ok"
        self.inflight = 0
        self.served = 0
        self.counters: Counter[str] = Counter()  # agent_call_retries, _lost, explored_queries
        self.metrics = OrchestratorMetrics()
        self.versions = ServedVersion(self.cfg, self.metrics)  # serving/versions.py
        self._handles: dict | None = None
        self.tracing = Tracing(otel)
        self._embedder_ready: asyncio.Future | None = None
        self._policy(self.default_policy)  # fail early on a bad default
        self.versions.resume_canary(self.pool_info)  # a restarted one takes up the canary
        self._gauges_at = 0.0  # when the orchestrator's gauges were last set (_refresh_gauges)
        self._controller: ExecutionController | None = None
        if s.controller == "on":  # fail early on a bad checkpoint
            self._get_controller()

    # ------------------------------------------------------------------ plumbing
    def _policy(self, name: str) -> Policy:
        if name not in self.policies:
            try:
                if name == LearnedPolicy.name:
                    self.policies[name] = self.versions.load(self.pool_info)
                else:
                    self.policies[name] = make_policy(
                        name, self.pool_info, 0, is_correct=self._oracle_hook(name))
            except CheckpointError as e:
                # the learned policy cannot load: serve with the infra-aware heuristic, say so
                fallback = self.cfg.serving.fallback_policy
                self.policy_status = f"fallback to {fallback}: {e}"
                log.warning("policy %s: %s", name, self.policy_status)
                self.policies[name] = self._policy(fallback)
            except ValueError as e:
                raise UserError(str(e)) from None
        return self.policies[name]

    @property
    def canary(self) -> CanaryRunner:
        """The served version's canary (``serving/canary.py``)."""
        return self.versions.canary

    @property
    def policy_version(self) -> str | None:
        """The registry version the learned policy is (None: it does not serve)."""
        return self.versions.version

    def _sync_registry(self) -> None:
        """Serve the registry's active version if it changed: the next queries get the new
        policy, queries in flight finish with the one they started with. A version that cannot
        serve leaves the incumbent serving, with the reason in ``policy_status``."""
        try:
            policy = self.versions.changed(self.pool_info)
        except RegistryError as e:
            self.policy_status = (f"registry version not served: {e}; still serving "
                                  f"{self.policy_version or self.cfg.serving.fallback_policy}")
            log.warning("%s", self.policy_status)
            return
        if policy is not None:
            self.policies[LearnedPolicy.name] = policy
            self.policy_status = "ok"
            self._gauges_at = 0.0  # show the new version at once

    def _get_controller(self) -> ExecutionController:
        """The run-time execution controller (loaded once; ``serving.controller_checkpoint`` or
        the shipped one)."""
        if self._controller is None:
            try:
                self._controller = ExecutionController.load(
                    self.cfg.serving.controller_checkpoint)
            except InframindError as e:
                raise UserError(str(e)) from None
        return self._controller

    def _oracle_hook(self, name: str):  # noqa: ANN202
        """The recorded-outcome hook of the ``oracle`` policy, built only when it is asked for
        (through the twin engine adapter: it knows what the twin engines will answer); None for
        every other policy."""
        if name != "oracle":
            return None
        from inframind_ray.serving.engines.twin import recorded_oracle

        return recorded_oracle(self.cfg)

    def _backend(self) -> ServeBackend:
        if self._handles is None:
            from ray import serve

            self._handles = {m: serve.get_deployment_handle(deployment_name(m),
                                                            deployment_name(m))
                             for m in self.pool_info.names}
        return ServeBackend(self._handles, self._record_call, self.tracing.tracer,
                            on_retry=self._on_retry, track=self.loads.track)

    def _on_retry(self, model: str, lost: bool) -> None:
        self.counters["agent_calls_lost" if lost else "agent_call_retries"] += 1
        self.metrics.retries.inc(tags={"model": model})

    async def ready(self) -> bool:
        """Warm up (embedding model) and report readiness."""
        if self.cfg.serving.embed:
            await self._embed("warm up")
        return True

    async def _embed(self, text: str):  # noqa: ANN202
        from inframind_ray.embed import embed_texts

        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(None, embed_texts, [text]))[0]

    # ------------------------------------------------------------------ metrics
    def push_metrics(self, snap: LoadSnapshot) -> None:
        """Called by replicas (fire and forget); also the orchestrator's clock for its gauges."""
        self.loads.push(snap)
        self._refresh_gauges()

    def _refresh_gauges(self) -> None:
        """Set the orchestrator's gauges again at most once a second: Ray exports a gauge only
        while it is being set (one set in ``__init__``, or once, disappears from the export)."""
        now = time.monotonic()
        if now - self._gauges_at >= 1.0:
            self._sync_registry()
            if self.rollouts.due():
                self.rollouts.flush()
            self._gauges_at = now
            self.metrics.set_policy(self.default_policy, self.policy_status)
            self.metrics.set_version(self.policy_version, self.versions.pinned())
            self.metrics.inflight.set(self.inflight)

    def state(self) -> dict:
        """Live per-model metrics and orchestrator status (``GET /v1/state``)."""
        return {"models": self.loads.describe(), "inflight_queries": self.inflight,
                "served_queries": self.served, "default_policy": self.default_policy,
                "policy_status": self.policy_status,
                "stale_after_s": self.cfg.serving.stale_after_s, "counters": dict(self.counters),
                "policy_version": self.policy_version, "policy_pinned": self.versions.pinned(),
                "policy_note": self.versions.note,
                **self.canary.describe(),
                "rollouts": self.rollouts.describe()}

    # ------------------------------------------------------------------ policy registry
    def policies_list(self) -> dict:
        """``GET /v1/policies``: the registry's versions and which one serves here."""
        return self.versions.listing()

    def policy_op(self, op: str, version: str | None = None) -> dict:
        """``POST /v1/policies/{promote,canary,rollback,pin,unpin}``: the registry operation,
        then the new active version served from the next query on (a canary: the candidate on
        ``serving.canary.share`` of them) (404: no such version; 409: refused, with the one-line
        reason; the incumbent keeps serving)."""
        refused = self.versions.operate(op, version, self.pool_info)
        if refused is not None:
            return refused
        self._sync_registry()
        self._gauges_at = 0.0
        self._refresh_gauges()
        return self.policies_list()

    def feedback(self, query_id: str, score: float) -> dict:
        """``POST /v1/feedback``: a client's score in [0, 1] of a recent query's answer."""
        out = self.rollouts.feedback(query_id, score)
        if out is None:
            return {"http_status": 404, "error": f"unknown query_id {query_id!r} (not among the "
                    f"last {self.cfg.serving.rollouts.feedback_window} recorded queries)"}
        return out

    def set_pool(self, pool_cfg: dict) -> dict:
        """Change the running pool (a model added or removed): new model cards, the load view
        keeps the snapshots of the models that stay, policies are rebuilt for the new pool from
        the next query on (queries in flight finish with the pool they started with); a
        running canary starts afresh."""
        cfg = PoolConfig.model_validate(pool_cfg)
        self.cfg = cfg
        self.pool_info = build_pool_info(cfg)
        self.degrade = degrade_of(cfg.engine)
        self.loads.set_models(self.pool_info.names)
        self.policies.clear()
        self.versions.forget()
        self.policy_status = "ok"
        self._handles = None
        self.canary.reset()  # its arms' outcomes were on the old pool
        self._policy(self.default_policy)
        self.versions.resume_canary(self.pool_info)
        self.metrics.set_policy(self.default_policy, self.policy_status)
        return self.state()

    def traces(self) -> list[dict]:
        """Finished spans (when INFRAMIND_OTEL has memory); exports buffered OTLP spans."""
        self.tracing.flush()
        return self.tracing.finished()

    def set_default_policy(self, name: str) -> str:
        """Switch the default policy."""
        self.metrics.set_policy(self.default_policy, "replaced")
        self._policy(name)
        self.default_policy = name
        self.metrics.set_policy(name, self.policy_status)
        return name

    def flush_records(self) -> list[str]:
        """Write buffered Parquet rows (records and rollouts) now."""
        return [str(p) for p in (*self.records.flush(), *self.rollouts.flush())]

    # ------------------------------------------------------------------ queries
    async def grade(self, payload: dict) -> dict:
        """``POST /v1/grade`` (``serving/queries.py``)."""
        return await grade_answer(payload)

    async def query(self, payload: dict) -> dict:
        """Answer one query end to end, on the wall clock (arrival and deadline are epoch
        instants from here to the engine; arrival is the ingress's ``request_start`` when it
        read one: the query's budget then counts from the client's stamp). Returns a dict with
        ``http_status``."""
        arrival = WALL_CLOCK.now()
        if payload.get("request_start") is not None:
            arrival = min(arrival, float(payload["request_start"]))
        if self.inflight >= self.cfg.serving.max_inflight_queries:
            self.metrics.shed.inc(tags={"reason": "max_inflight_queries"})
            return {"http_status": 429, "error": "too many queries in flight", "retry_after": 1}
        try:
            q = query_info(payload, arrival)
            policy = self._policy(payload.get("policy") or self.default_policy)
            controller = (self._get_controller() if (payload.get("controller")
                                                     or self.cfg.serving.controller) == "on"
                          else None)
        except UserError as e:
            return {"http_status": 404 if isinstance(e, NotFound) else 400, "error": str(e)}
        version = self.policy_version
        if payload.get("policy_version") is not None:  # one version asked for: no canary
            if policy.name != LearnedPolicy.name:
                return {"http_status": 400, "error": "policy_version applies to the learned "
                        f"policy ({LearnedPolicy.name}) only, not {policy.name}"}
            version = payload["policy_version"]
            policy = self.versions.version_policy(version, self.pool_info)
            if isinstance(policy, dict):
                return policy
        refusal = self._admit(q)
        if refusal is not None:
            return refusal
        canaried = (self.canary.running is not None
                    and policy is self.policies.get(LearnedPolicy.name))
        to_candidate = canaried and self.canary.route(q.query_id)
        if to_candidate:
            policy, version = self.canary.policy, self.canary.running.candidate
        ep, served = self._recording(q, policy, version)
        self.inflight += 1
        self.metrics.inflight.set(self.inflight)

        try:
            if self.cfg.serving.embed:
                from dataclasses import replace

                q = replace(q, embedding=await self._embed(q.text))
            with self.tracing.tracer.start_as_current_span("query", attributes={
                    "query_id": q.query_id, "policy": policy.name, "budget_s": q.budget_s}):
                res = await run_query(q, served, self._backend(), self.loads.system_state,
                                      abort_on_deadline=True, clock=WALL_CLOCK,
                                      controller=controller, degrade=self.degrade)
            final = res.text
            correct = await asyncio.get_running_loop().run_in_executor(
                None, grade_final, res.query, final, payload.get("reference"))
        except BaseException:
            if ep is not None:
                self.rollouts.abandon(ep)
            raise
        finally:
            self.inflight -= 1
            self.metrics.inflight.set(self.inflight)
        if ep is not None:
            self.rollouts.finish(ep, res, correct)
        if canaried and self.canary.observe(to_candidate, bool(res.within_budget), correct,
                                            self.pool_info):
            self._sync_registry()  # a promotion serves from the next query on
        self.served += 1
        out = self._respond(res, policy.name, correct)
        out["policy_version"] = version if policy.name == LearnedPolicy.name else None
        return out

    def _admit(self, q: QueryInfo) -> dict | None:
        """The ingress's admission by predicted finish (``replica.predict``, the replicas'
        rule): a query whose budget not even one call on the fastest available model is
        predicted to meet (past ``engine.admission_margin``) is refused now with 503 and a
        Retry-After of the predicted excess (at least 1 s), or with 422 when not even an idle
        replica's service time fits (no retry would help); None admits it (the policy then fits
        the plan to the load: cheaper models or strategies when it is tight)."""
        margin = self.cfg.engine.admission_margin
        state = self.loads.system_state()
        left = q.budget_s - max(0.0, state.now - q.arrival_s)  # less any wait before here
        finish = fastest_finish_in_s(state.models, left, state.now)
        if finish is None or not too_late(finish, left, margin):
            return None
        idle = min(s.service_s for s in state.models.values() if s.available)
        if too_late(idle, q.budget_s, margin):  # no load would make it fit: the budget's fault
            self.metrics.shed.inc(tags={"reason": "budget_below_service_time"})
            return {"http_status": 422,
                    "error": f"budget_s: {q.budget_s:g} s is shorter than any model of this pool "
                             f"answers in even when idle (the fastest takes {idle:.3g} s)"}
        self.metrics.shed.inc(tags={"reason": "predicted_deadline_miss"})
        return {"http_status": 503, "retry_after": max(1, math.ceil(finish - left)),
                "error": f"no model is predicted to answer within the budget: the fastest "
                         f"finishes in {finish:.3g} s, budget {q.budget_s:g} s"
                         + (f" ({left:.3g} s left)" if left < q.budget_s - 1e-3 else "")}

    def _recording(self, q: QueryInfo, policy: Policy, version: str | None):  # noqa: ANN202
        """(episode, the policy to run): the learned registry policy (``version``: the active
        one, the canary's candidate, or the one the query asked for) wrapped to record its
        decisions when rollouts are on, drawing them from its softmax on
        ``rollouts.explore_share`` of the queries (both arms of a canary alike); (None, policy)
        otherwise."""
        if not (self.cfg.serving.rollouts.enabled and version is not None
                and (policy is self.policies.get(LearnedPolicy.name)
                     or policy is self.canary.policy or self.versions.asked_for(policy))):
            return None, policy
        models = self.loads.system_state().models.values()
        ep = self.rollouts.start(q, version, (
            self.inflight, sum(m.waiting for m in models), sum(m.running for m in models)))
        if ep is None:
            return None, policy
        r = self.cfg.serving.rollouts
        rng = explorer(q.query_id, r.explore_share, r.explore_seed)
        if rng is not None:
            self.counters["explored_queries"] += 1
        return ep, RecordingPolicy(policy, self.rollouts.sink(ep), explore=rng,
                                   epsilon=r.explore_epsilon)

    def _respond(self, res: QueryResult, policy: str, correct: bool | None) -> dict:
        q = res.query
        out = response_body(res, policy, correct)
        m = self.metrics
        m.queries.inc(tags={"policy": policy, "task": q.task, "status": res.status.api,
                            "within_budget": str(bool(res.within_budget)).lower()})
        m.query_latency.observe(res.latency, tags={"policy": policy, "task": q.task})
        for st in res.steps:
            if st.degraded_from:
                m.degraded.inc(tags={"model": st.degraded_from})
        if out["http_status"] == 503:
            m.shed.inc(tags={"reason": "replica_overloaded"})
            out["retry_after"] = 1
            out["error"] = "a model replica is overloaded"
        self.records.add("queries", {
            "query_id": q.query_id, "task": q.task, "item_id": q.item_id, "policy": policy,
            "arrival_epoch": q.arrival_s,
            "budget_s": q.budget_s, "latency_s": res.latency, "status": res.status.api,
            "answer": res.answer, "correct": correct, "within_budget": res.within_budget,
            "topology": res.plan.topology.value, "k": res.plan.k, "n_calls": len(res.steps),
            "stopped_early": res.stopped_early, "n_cancelled_calls": len(res.cancelled_calls),
            "degraded": res.degraded})
        return out

    def _record_call(self, call: AgentCall, res: GenerateResult, out: AgentResult) -> None:
        self.metrics.calls.inc(tags={"model": call.model, "strategy": call.strategy.value,
                                     "status": res.status.api})
        self.metrics.call_latency.observe(out.end - out.start, tags={"model": call.model})
        self.records.add("calls", {
            "query_id": call.query.query_id, "node_id": call.node.id, "role": call.node.role,
            "kind": call.node.kind.value, "model": call.model, "strategy": call.strategy.value,
            "deadline_in_s": call.deadline - out.start, "status": res.status.api,
            "queue_wait_s": res.queue_wait_s, "ttft_s": res.ttft_s,
            "latency_s": out.end - out.start, "replica_latency_s": res.latency_s,
            "prompt_tokens": res.prompt_tokens, "output_tokens": res.output_tokens,
            "preemptions": res.preemptions})

    # ------------------------------------------------------------------ overhead
    async def measure_overhead(self, n: int, model: str, warmup: int = 20,
                               rollouts: bool = False) -> dict:
        """The serving overhead, measured in this actor (``serving/overhead.py``)."""
        from inframind_ray.serving.overhead import measure_overhead

        return await measure_overhead(self, n, model, warmup, rollouts)
