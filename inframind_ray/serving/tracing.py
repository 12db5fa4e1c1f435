"""OpenTelemetry traces of queries, agent calls and the replicas' work on them (the SDK
directly; Ray's tracing hook is unmaintained and clashes with Serve).

Off unless ``INFRAMIND_OTEL`` is set to one or more comma-separated exporters: ``otlp`` sends
spans over OTLP/HTTP to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``
(the SDK's standard variables; default ``http://localhost:4318``), ``console`` prints them,
``memory`` keeps them in-process (tests, ``Tracing.finished()``). The orchestrator's agent-call
span travels with the request (W3C trace context in ``GenerateRequest.trace_context``), so a
replica's ``replica_generate`` span is its child in the same trace."""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

MODES = ("otlp", "console", "memory")
PROPAGATOR = TraceContextTextMapPropagator()


def inject() -> dict[str, str]:
    """The current span's context as W3C headers (empty without a recording span)."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier)
    return carrier


def extract(carrier: dict[str, str] | None):  # noqa: ANN201 - an otel Context
    """The parent context carried by a request (None: a new trace)."""
    return PROPAGATOR.extract(carrier) if carrier else None


class Tracing:
    """A tracer owned by the orchestrator (not the global provider)."""

    def __init__(self, mode: str | None = None, service: str = "inframind-orchestrator") -> None:
        self.mode = mode if mode is not None else os.environ.get("INFRAMIND_OTEL", "")
        self.memory: InMemorySpanExporter | None = None
        self.provider: TracerProvider | None = None
        modes = [m.strip() for m in self.mode.split(",") if m.strip()]
        if bad := [m for m in modes if m not in MODES]:
            raise ValueError(f"INFRAMIND_OTEL: unknown exporter {bad[0]!r} (use {MODES})")
        if not modes:
            self.tracer = trace.NoOpTracer()
            return
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        if "memory" in modes:
            self.memory = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(self.memory))
        if "console" in modes:
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        if "otlp" in modes:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(),
                                                           schedule_delay_millis=500))
        self.provider = provider
        self.tracer = provider.get_tracer("inframind_ray")

    def flush(self) -> None:
        """Export the spans still buffered (OTLP batches)."""
        if self.provider is not None:
            self.provider.force_flush(timeout_millis=5000)

    def finished(self) -> list[dict]:
        """Finished spans as dicts (memory mode)."""
        if self.memory is None:
            return []
        return [{"name": s.name, "attributes": dict(s.attributes or {}),
                 "duration_s": (s.end_time - s.start_time) / 1e9,
                 "trace_id": s.context.trace_id} for s in self.memory.get_finished_spans()]
