"""OpenTelemetry traces of queries and agent calls (the SDK directly; Ray's tracing hook is
unmaintained and clashes with Serve).

Off unless ``INFRAMIND_OTEL`` is set: ``console`` prints spans to stdout, ``memory`` keeps them
in-process (tests, ``Tracing.finished()``)."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Tracing:
    """A tracer owned by the orchestrator (not the global provider)."""

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode if mode is not None else os.environ.get("INFRAMIND_OTEL", "")
        self.memory: InMemorySpanExporter | None = None
        if not self.mode:
            self.tracer = trace.NoOpTracer()
            return
        provider = TracerProvider()
        if self.mode == "memory":
            self.memory = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(self.memory))
        else:
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        self.tracer = provider.get_tracer("inframind_ray")

    def finished(self) -> list[dict]:
        """Finished spans as dicts (memory mode)."""
        if self.memory is None:
            return []
        return [{"name": s.name, "attributes": dict(s.attributes or {}),
                 "duration_s": (s.end_time - s.start_time) / 1e9,
                 "trace_id": s.context.trace_id} for s in self.memory.get_finished_spans()]
