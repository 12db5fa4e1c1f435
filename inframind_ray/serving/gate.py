"""Admission at the ingress replica, before the hop to the orchestrator: the replicas' rule
(``replica.predict.too_late``) on the control plane's own delay.

The replicas' predictions cannot see a saturated control plane (the HTTP proxy, this ingress and
the single orchestrator actor planning every query): there a query waits outside any agent call.
This ingress predicts that delay two ways and takes the larger: measured, the EWMA of answered
queries' time outside their agent calls (their time here less the span from their first call's
start to their last call's end; it lags by a query's latency); and ahead of it, by Little's law,
the backlog's excess wait: the queries in flight over the rate at which they completed in the
last ``window_s``, less the EWMA of their calls' span (at a steady load the two cancel; when
arrivals outrun the control plane, the queries in flight grow at once while completions do
not). For a refusal the backlog is predicted at the throughput's upper 95 % Poisson bound, not
its point estimate: a few seconds with few completions (a cold start, a replica's calls stalled
by its death) are no evidence of a saturated control plane (docs/operations.md, the replica
kill). A fallback's given-up call counts as agent-call time (``steps[].given_up_start_s``).
A new query cannot finish before that delay, so one whose budget the delay exceeds by more
than the admission margin is refused here, in this process, at once (HTTP 503 with
Retry-After), never reaching the orchestrator. With no query in flight both are forgotten (an
idle service admits; the next answers measure them again).

The ``max_inflight_queries`` bound is checked here too (429), so that its refusal does not wait
for a busy orchestrator's event loop; the orchestrator keeps its own check for other paths.
With ``serving.adaptive_inflight`` a second, lower bound is steered at run time for the HTTP
proxies' routers (``serving.router.IngressRouter``), which hold queries past it: every
``update_s`` the bound is multiplied by ``(span + target_delay_s) / (span + backlog)``, the
ratio of the latency the control plane should give to the one Little's law predicts now
(the backlog's excess wait above, not the measured EWMA, which lags by a query's latency and
would make the bound swing; ``span`` the calls' EWMA), kept within [0.5, 2], plus
``sqrt(bound)`` of headroom when it grows (the gradient limit of Netflix's concurrency-limits
and Envoy's adaptive concurrency filter). It grows only while at least half of it is in use
(an idle service gives no evidence that more would be served in time) and moves only when a
query completed in the last ``window_s``; it starts at ``min_inflight``, its floor, and
``max_inflight_queries`` is its ceiling. At a saturated control plane of throughput X it
settles where Little's law puts it, ``X * (span + target_delay_s)``. Past the requests a
router holds (``ingress_max_queued``) Serve answers 429 in the proxy at once. With several
proxies each holds its own requests at the bound, so together they may admit more."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from scipy.special import gammaincinv

from inframind_ray.config import AdaptiveInflightConfig
from inframind_ray.core.request import ewma
from inframind_ray.replica.predict import too_late

REFUSAL_CONFIDENCE = 0.95  # the throughput's upper bound a backlog refusal is predicted at


class IngressGate:
    """The ingress's admission state: its queries in flight, the control-plane delay EWMA."""

    def __init__(self, margin: float | None, max_inflight: int | None = None,
                 window_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 adaptive: AdaptiveInflightConfig | None = None) -> None:
        self.margin, self.max_inflight, self.clock = margin, max_inflight, clock
        self.window_s, self.adaptive = window_s, adaptive
        self._limit = self.start_limit(max_inflight, adaptive)
        self._stepped = -math.inf
        self.inflight = 0
        self.delay_s = 0.0  # EWMA of answered queries' time outside their agent calls
        self.span_s = 0.0  # EWMA of answered queries' span of agent calls
        self._done: deque[float] = deque(maxlen=100_000)  # completion instants (bounded)

    def backlog_s(self, confidence: float | None = None) -> float:
        """Little's law's excess: ``inflight / throughput - span_s`` over the last
        ``window_s`` (0 when nothing completed in it). The throughput is the completions' count
        over the window, or with ``confidence`` its upper Poisson bound at that level (Garwood:
        the gamma quantile of count + 1), so that the excess is one the evidence shows: a
        refusal from a few seconds with few completions needs that many more in flight."""
        now = self.clock()
        while self._done and self._done[0] < now - self.window_s:
            self._done.popleft()
        if not self._done:
            return 0.0
        n = len(self._done)
        done = n if confidence is None else float(gammaincinv(n + 1, confidence))
        return max(0.0, self.inflight * self.window_s / done - self.span_s)

    @staticmethod
    def start_limit(max_inflight: int | None, adaptive: AdaptiveInflightConfig | None
                    ) -> int | None:
        """The bound before any step: the adaptive floor, else ``max_inflight``."""
        return adaptive.min_inflight if adaptive is not None else max_inflight

    def _forget_if_idle(self) -> None:
        """With nothing in flight, the measurements are forgotten."""
        if self.inflight == 0:
            self.delay_s = self.span_s = 0.0
            self._done.clear()

    def predicted_delay_s(self) -> float:
        """The control plane's predicted delay for a new query, what it is refused by: the
        larger of the two, the backlog's at the throughput's upper ``REFUSAL_CONFIDENCE`` bound
        (a refusal is final for its query; the adaptive bound steers by the point estimate)."""
        return self._delays()[0]

    def _delays(self) -> tuple[float, float]:
        """(the predicted delay, the backlog's part of it at ``REFUSAL_CONFIDENCE``)."""
        self._forget_if_idle()
        backlog = self.backlog_s(REFUSAL_CONFIDENCE)
        return max(self.delay_s, backlog), backlog

    def limit(self) -> int | None:
        """The bound on queries in flight now (None: unbounded); steps it when due."""
        a = self.adaptive
        if a is None or self.max_inflight is None:
            return self.max_inflight
        now = self.clock()
        if now - self._stepped >= a.update_s:
            self._stepped = now
            self._step(a)
        return self._limit

    def _step(self, a: AdaptiveInflightConfig) -> None:
        """One step of the adaptive bound (the module's docstring)."""
        self._forget_if_idle()
        delay = self.backlog_s()  # the leading signal: the measured EWMA lags and would swing
        if not self._done:  # no query completed in the window: no evidence either way
            return
        gain = (self.span_s + a.target_delay_s) / max(1e-3, self.span_s + delay)
        gain = min(2.0, max(0.5, gain))
        if gain >= 1.0 and self.inflight < self._limit / 2:
            return  # the bound is not what limits the traffic
        new = self._limit * gain + (math.sqrt(self._limit) if gain >= 1.0 else 0.0)
        self._limit = int(min(self.max_inflight, max(a.min_inflight, round(new))))

    def refusal(self, budget_s: float) -> dict | None:
        """The 429 (``max_inflight`` queries in flight) or 503 (the rule) answer for a query
        due in ``budget_s``; None admits. The adaptive bound is not checked here: the proxies'
        routers hold queries at it, and a router's view lags the replica's by the routing
        stats' round trip (through Serve's controller, seconds on loaded cores), so refusing
        here by it would answer the 429s late, after their wait in the proxy."""
        if self.max_inflight is not None and self.inflight >= self.max_inflight:
            return {"http_status": 429, "error": "too many queries in flight", "retry_after": 1}
        delay, backlog = self._delays()
        if not too_late(delay, budget_s, self.margin):
            return None
        return {"http_status": 503, "retry_after": max(1, math.ceil(delay - budget_s)),
                "error": f"the service is saturated: a new query is predicted to wait "
                         f"{delay:.3g} s outside its agent calls, budget {budget_s:g} s "
                         f"(measured {self.delay_s:.3g} s; backlog {backlog:.3g} s: "
                         f"{self.inflight} in flight, {len(self._done)} answered in the last "
                         f"{self.window_s:g} s)"}

    def enter(self) -> float:
        """A query admitted and sent to the orchestrator; returns its start instant."""
        self.inflight += 1
        return self.clock()

    def leave(self, started: float, out: dict) -> None:
        """The orchestrator answered ``out`` (its ``steps``' ``start_s`` / ``end_s`` count from
        the query's arrival there) for a query sent at ``started``."""
        self.inflight -= 1
        now = self.clock()
        self._done.append(now)
        steps = out.get("steps") or ()
        if steps:  # a fallback's span starts at its given-up call's: both are agent calls
            calls = max(s["end_s"] for s in steps) - min(
                s["start_s"] if s.get("given_up_start_s") is None else s["given_up_start_s"]
                for s in steps)
            self.span_s = ewma(self.span_s, calls)
            self.delay_s = ewma(self.delay_s, max(0.0, now - started - calls))
