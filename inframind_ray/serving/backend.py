"""Agent calls of the workflow runner as ``generate`` requests to the model deployments."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import NoOpTracer

from inframind_ray.core.clock import WALL_CLOCK, Clock
from inframind_ray.core.types import prompt_tokens
from inframind_ray.orchestration.runner import AgentCall, AgentResult
from inframind_ray.serving.engines.base import GenerateRequest, GenerateResult


class ServeBackend:
    """Agent calls as ``generate`` requests to the model deployments. Queries run on ``clock``
    (the wall clock): the call's deadline is an epoch instant and travels unchanged."""

    def __init__(self, handles: dict, on_call=None, tracer=None,  # noqa: ANN001
                 clock: Clock = WALL_CLOCK) -> None:
        self.handles = handles
        self.on_call = on_call
        self.tracer = tracer or NoOpTracer()
        self.clock = clock

    async def call(self, call: AgentCall) -> AgentResult:
        """One deployment-handle hop."""
        start = self.clock.now()
        ups = [u for u in call.upstream if u.status.ok]
        up_tokens = sum(u.output_tokens for u in ups)
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
        )
        with self.tracer.start_as_current_span("agent_call", attributes={
                "query_id": call.query.query_id, "node": call.node.id, "role": call.node.role,
                "model": call.model, "strategy": call.strategy.value}) as span:
            resp = self.handles[call.model].generate.remote(req)
            try:
                res: GenerateResult = await resp
            except asyncio.CancelledError:
                resp.cancel()
                span.set_attribute("status", "cancelled")
                raise
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
