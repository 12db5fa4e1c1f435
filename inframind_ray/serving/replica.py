"""One Serve deployment per pool model: an engine behind the replica's admission queue (the pool's
scheduling: EDF, FCFS, PLAS or ATLAS), pushing metrics to the orchestrator at least every
``metrics_period_s``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import ray
from ray import serve

from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.core.clock import WALL_CLOCK
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.admission import DeadlineQueue
from inframind_ray.serving.engines.base import GenerateRequest, GenerateResult
from inframind_ray.serving.engines.factory import make_engine
from inframind_ray.serving.metrics import ReplicaMetrics
from inframind_ray.serving.router import routing_stats
from inframind_ray.serving.tracing import Tracing, extract

NAMESPACE = "inframind"
ORCHESTRATOR = "inframind-orchestrator"
STANDBY = f"{ORCHESTRATOR}-standby"  # the warm standby (serving/failover.py)
log = logging.getLogger("ray.serve")


def orchestrator_names(standby: bool) -> tuple[str, ...]:
    """The named orchestrator actors of a deployment (``serving.standby_orchestrator``)."""
    return (ORCHESTRATOR, STANDBY) if standby else (ORCHESTRATOR,)


def deployment_name(model: str) -> str:
    """Serve deployment name of a pool model."""
    return f"model:{model}"


async def admit(queue: DeadlineQueue, run: Callable[[GenerateRequest], Awaitable[GenerateResult]],
                req: GenerateRequest) -> GenerateResult:
    """One request through the replica's admission queue into ``run`` (the engine); the
    queue's own answers (deadline shed, overloaded, engine error) become results, and times
    count from the arrival here (the queue's wait included, as in the twin)."""
    adm = await queue.submit(req.deadline, lambda: run(req), req.program)
    if adm.result is None:
        return GenerateResult(req.request_id, adm.status, queue_wait_s=adm.waited_s,
                              latency_s=adm.latency_s, detail=adm.detail)
    res = adm.result
    queue.answered(res.status, None if res.ttft_s is None else adm.waited_s + res.ttft_s,
                   adm.latency_s, adm.waited_s, res.service_s)
    return replace(res, queue_wait_s=adm.waited_s, latency_s=adm.latency_s)


@serve.deployment(max_ongoing_requests=1024, health_check_period_s=5)
class ModelReplica:
    """Serves ``generate`` for one pool model."""

    async def __init__(self, model_cfg: dict, pool_cfg: dict) -> None:
        self.pool = PoolConfig.model_validate(pool_cfg)
        self.model = ModelConfig.model_validate(model_cfg)
        self.engine = make_engine(self.model, self.pool)
        await self.engine.start()
        self.queue = DeadlineQueue(self.engine.capacity, self.model.max_queue, clock=WALL_CLOCK,
                                   order=self.pool.engine.scheduling,
                                   margin=self.pool.engine.admission_margin,
                                   engine_load=self.engine.stats)
        ctx = serve.get_replica_context()
        self.replica_id = ctx.replica_tag
        self.node_id = ray.get_runtime_context().get_node_id()
        self.push_enabled = True
        self.last_arrival = 0.0  # epoch seconds of the latest generate call (router reports)
        self._orchestrator_names = orchestrator_names(self.pool.serving.standby_orchestrator)
        self._orchestrators: dict[str, Any] = {}
        self.metrics = ReplicaMetrics(self.model.name)
        self.tracing = Tracing(service=f"inframind-replica-{self.model.name}")
        self._pusher = asyncio.get_running_loop().create_task(self._push_loop())

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """Admit (the shared replica layer) and run one request; never raises for a
        request-level failure."""
        self.last_arrival = WALL_CLOCK.now()
        with self.tracing.tracer.start_as_current_span(
                "replica_generate", context=extract(dict(req.trace_context)), attributes={
                    "model": self.model.name, "replica_id": self.replica_id,
                    "request_id": req.request_id}) as span:
            res = await admit(self.queue, self.engine.generate, req)
            span.set_attribute("status", res.status.api)
            span.set_attribute("queue_wait_s", res.queue_wait_s)
            span.set_attribute("output_tokens", res.output_tokens)
        self.metrics.requests.inc(tags={"status": res.status.api})
        self.metrics.queue_wait.observe(res.queue_wait_s)
        return res

    async def check_health(self) -> None:
        """Serve's periodic health check (``health_check_period_s``): the engine's own check,
        and the metrics loop must be alive (a replica the orchestrator cannot see is useless).
        Raising makes Serve replace this replica."""
        if self._pusher.done():
            raise RuntimeError(f"{self.model.name}: the metrics loop stopped")
        await self.engine.check_health()

    def snapshot(self) -> LoadSnapshot:
        """This replica's load right now: its queue over its engine (epoch timestamp)."""
        return self.queue.snapshot_over(self.engine.stats(), model=self.model.name,
                                        replica_id=self.replica_id, node_id=self.node_id)

    def record_routing_stats(self) -> dict[str, Any]:
        """This replica's load for the model's request router (``serving.router``); Serve asks
        every ``metrics_period_s``."""
        return routing_stats(self.snapshot(), self.last_arrival)

    def set_push_enabled(self, enabled: bool) -> bool:
        """Stop or resume metric pushes (operators and staleness tests)."""
        self.push_enabled = enabled
        return enabled

    def where(self) -> dict:
        """Node and replica ids (placement checks)."""
        return {"node_id": self.node_id, "replica_id": self.replica_id,
                "model": self.model.name}

    async def _push_loop(self) -> None:
        period = self.pool.serving.metrics_period_s
        while True:
            await asyncio.sleep(period)
            if not self.push_enabled:
                continue
            try:
                snap = self.snapshot()
                for k, v in (("waiting", snap.waiting), ("running", snap.running),
                             ("kv_usage", snap.kv_usage), ("e2e_ewma_s", snap.e2e_s)):
                    self.metrics.gauges[k].set(v)
                self._push(snap)
            except Exception as e:  # never let the metrics loop die
                log.warning("metrics push failed: %s", e)

    def _push(self, snap: LoadSnapshot) -> None:
        """Push to every orchestrator (the active one and the warm standby) that runs; one not
        up (yet) is looked up again at the next period."""
        for name in self._orchestrator_names:
            try:
                if name not in self._orchestrators:
                    self._orchestrators[name] = ray.get_actor(name, namespace=NAMESPACE)
                self._orchestrators[name].push_metrics.remote(snap)
            except Exception:  # noqa: BLE001 - not up or restarting: look it up again
                self._orchestrators.pop(name, None)

    async def __del__(self) -> None:
        self._pusher.cancel()
        with contextlib.suppress(Exception):
            await self.engine.shutdown()
