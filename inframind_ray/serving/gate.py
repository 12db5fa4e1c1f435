"""Admission at the ingress replica, before the hop to the orchestrator: the replicas' rule
(``replica.predict.too_late``) on the control plane's own delay.

The replicas' predictions cannot see a saturated control plane (the HTTP proxy, this ingress and
the single orchestrator actor planning every query): there a query waits outside any agent call.
This ingress measures, on every answered query, the part of its latency spent outside its agent
calls (its time here less the span from its first call's start to its last call's end) and keeps
an EWMA of it; a new query cannot finish before that delay, so one whose budget the delay
exceeds by more than the admission margin is refused here, in this process, at once (HTTP 503
with Retry-After), never reaching the orchestrator. With no query in flight the EWMA is
forgotten (an idle service admits; the next answers measure it again).

The ``max_inflight_queries`` bound is checked here too (429), so that its refusal does not wait
for a busy orchestrator's event loop; the orchestrator keeps its own check for other paths."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from inframind_ray.core.request import ewma
from inframind_ray.replica.predict import too_late


class IngressGate:
    """The ingress's admission state: its queries in flight, the control-plane delay EWMA."""

    def __init__(self, margin: float | None, max_inflight: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.margin, self.max_inflight, self.clock = margin, max_inflight, clock
        self.inflight = 0
        self.delay_s = 0.0  # EWMA of answered queries' time outside their agent calls

    def refusal(self, budget_s: float) -> dict | None:
        """The 429 (``max_inflight`` queries in flight) or 503 (the rule) answer for a query due
        in ``budget_s``; None admits."""
        if self.max_inflight is not None and self.inflight >= self.max_inflight:
            return {"http_status": 429, "error": "too many queries in flight", "retry_after": 1}
        if self.inflight == 0:
            self.delay_s = 0.0
        if not too_late(self.delay_s, budget_s, self.margin):
            return None
        return {"http_status": 503, "retry_after": max(1, math.ceil(self.delay_s - budget_s)),
                "error": f"the service is saturated: queries spend {self.delay_s:.3g} s outside "
                         f"their agent calls, budget {budget_s:g} s"}

    def enter(self) -> float:
        """A query admitted and sent to the orchestrator; returns its start instant."""
        self.inflight += 1
        return self.clock()

    def leave(self, started: float, out: dict) -> None:
        """The orchestrator answered ``out`` (its ``steps``' ``start_s`` / ``end_s`` count from
        the query's arrival there) for a query sent at ``started``."""
        self.inflight -= 1
        steps = out.get("steps") or ()
        if steps:
            calls = max(s["end_s"] for s in steps) - min(s["start_s"] for s in steps)
            self.delay_s = ewma(self.delay_s, max(0.0, self.clock() - started - calls))
