"""Agent calls of the workflow runner as ``generate`` requests to the model deployments."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import ray
from opentelemetry.trace import NoOpTracer

from inframind_ray.core.clock import WALL_CLOCK, Clock
from inframind_ray.core.request import RequestStatus
from inframind_ray.core.types import prompt_tokens
from inframind_ray.orchestration.runner import AgentCall, AgentResult
from inframind_ray.replica.load_view import Track, untracked
from inframind_ray.serving.engines.base import GenerateRequest, GenerateResult
from inframind_ray.serving.tracing import inject

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4
"""A call whose replica dies is sent again (Serve routes it to a live replica of the model)
up to this many times in all, while its deadline allows."""
RETRY_BACKOFF_S = 0.05


class ServeBackend:
    """Agent calls as ``generate`` requests to the model deployments. Queries run on ``clock``
    (the wall clock): the call's deadline is an epoch instant and travels unchanged. ``track``
    (the load view's ``LoadView.track``) counts each call in the view while it is out."""

    def __init__(self, handles: dict, on_call=None, tracer=None,  # noqa: ANN001
                 clock: Clock = WALL_CLOCK,
                 on_retry: Callable[[str, bool], None] | None = None,
                 track: Track = untracked,
                 ) -> None:
        self.handles = handles
        self.track = track
        self.on_retry = on_retry  # (model, lost): a call re-sent, or given up (lost)
        self.on_call = on_call
        self.tracer = tracer or NoOpTracer()
        self.clock = clock

    async def call(self, call: AgentCall) -> AgentResult:
        """One deployment-handle hop."""
        start = self.clock.now()
        ups = [u for u in call.upstream if u.status.ok]
        up_tokens = sum(u.output_tokens for u in ups)
        with self.tracer.start_as_current_span("agent_call", attributes={
                "query_id": call.query.query_id, "node": call.node.id, "role": call.node.role,
                "model": call.model, "strategy": call.strategy.value}) as span:
            req = GenerateRequest(
                request_id=f"{call.query.query_id}/{call.node.id}",
                prompt=call.prompt,
                max_tokens=call.max_tokens,
                deadline=call.deadline,
                strategy=call.strategy.value,
                kind=call.node.kind.value,
                item_id=call.query.item_id,
                task=call.query.task,
                query_id=call.query.query_id,
                upstream_answers=tuple(u.answer for u in ups),
                prompt_tokens_hint=prompt_tokens(call.query, call.strategy, up_tokens),
                upstream_tokens=up_tokens,
                sample=call.sample,
                attained_s=call.program.attained_s,
                critical_path_s=call.program.critical_path_s,
                trace_context=tuple(inject().items()),
            )
            with self.track(call.model, call.deadline):
                res = await self._send(call.model, req, span)
            span.set_attribute("status", res.status.api)
            span.set_attribute("queue_wait_s", res.queue_wait_s)
            span.set_attribute("output_tokens", res.output_tokens)
        end = self.clock.now()
        ttft = None if res.ttft_s is None else start + res.queue_wait_s + res.ttft_s
        out = AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                          call.strategy, res.status, res.text, start, end, ttft,
                          res.prompt_tokens, res.output_tokens, res.preemptions,
                          service_s=max(0.0, res.latency_s - res.queue_wait_s))
        if self.on_call:
            self.on_call(call, res, out)
        return out

    async def _send(self, model: str, req: GenerateRequest, span) -> GenerateResult:  # noqa: ANN001
        """Send the request; when the replica dies under it, send it again to the model (a live
        replica) while the deadline allows, then answer ``ERROR`` (the step fails explicitly;
        the query goes on with what its other nodes give)."""
        attempt = 0
        while True:
            attempt += 1
            resp = self.handles[model].generate.remote(req)
            try:
                return await resp
            except asyncio.CancelledError:
                resp.cancel()
                span.set_attribute("status", "cancelled")
                raise
            except ray.exceptions.RayActorError as e:  # the replica died or is unreachable
                span.set_attribute("retries", attempt)
                lost = (attempt >= MAX_ATTEMPTS
                        or self.clock.now() + RETRY_BACKOFF_S >= req.deadline)
                if self.on_retry:
                    self.on_retry(model, lost)
                if lost:
                    log.warning("call %s on %s failed after %d attempts: %s", req.request_id,
                                model, attempt, type(e).__name__)
                    return GenerateResult(req.request_id, RequestStatus.ERROR, None,
                                          detail=f"replica lost: {type(e).__name__}")
                await asyncio.sleep(RETRY_BACKOFF_S)
