"""Engine model: one vLLM-style continuous-batching replica, driven by its asyncio loop's clock.

No prefill or decode *phase* exists: every iteration admits waiting requests in queue order while
there is a free sequence slot, KV room and token budget (their whole context is prefilled in that
iteration), and every running request emits one token. Under KV pressure the request with the
lowest priority (latest deadline under EDF, latest arrival under FCFS, most attained service of its
program under PLAS / ATLAS) is preempted by recompute.

Speed comes from skipping: when no admission can happen until some request finishes (or the KV
cache fills), a *span* of k identical decode iterations is scheduled as one timer. A new arrival or
an abort truncates the span to the next iteration boundary, so behaviour matches iteration-level
simulation except that a span's iteration time uses the KV size at its midpoint.

The same class runs on the simulated clock (twin) and on the wall clock (the serving plane's twin
engine): it only calls ``loop.time()`` and ``loop.call_at``.
"""

from __future__ import annotations

import asyncio
import itertools
import math

from inframind_ray.core.profile import IterationProfile
from inframind_ray.core.request import EngineRequest, EngineResult, RequestStatus, ewma
from inframind_ray.core.request_queue import (
    SchedulingPolicy,
    create_request_queue,
    earliest_slacks,
)
from inframind_ray.core.types import LoadSnapshot

LATE_S = 1e-6
"""A span's timer that runs later than this after its planned end was delayed by the process
(wall clock); below it, the simulated loop's float rounding (``_on_span_end``)."""


def _span_end(span: tuple[float, float, int]) -> float:
    """When a span ``(start, dt, k)`` ends."""
    return span[0] + span[1] * span[2]


class TwinEngine:
    """A simulated engine replica. ``await generate(req)`` returns when the request ends."""

    max_span: int | None = None  # cap on iterations per timer (1 = plain iteration-level)

    def __init__(
        self,
        name: str,
        profile: IterationProfile,
        *,
        max_num_seqs: int,
        kv_capacity_tokens: int,
        max_batched_tokens: int = 8192,
        scheduling: SchedulingPolicy | str = SchedulingPolicy.EDF,
    ) -> None:
        if max_num_seqs < 1 or kv_capacity_tokens < 1 or max_batched_tokens < 1:
            raise ValueError("max_num_seqs, kv_capacity_tokens, max_batched_tokens must be >= 1")
        self.name = name
        self.profile = profile
        self.max_num_seqs = max_num_seqs
        self.kv_capacity = kv_capacity_tokens
        self.max_batched_tokens = max_batched_tokens
        self.policy = SchedulingPolicy(scheduling)
        self.waiting = create_request_queue(
            self.policy, lambda: self._loop.time() if self._loop else 0.0)
        self.running: list[EngineRequest] = []
        self.kv_used = 0
        self.max_kv_used = 0
        self.num_preemptions = 0
        self._counter = itertools.count()
        self._futures: dict[int, asyncio.Future] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._span: tuple[float, float, int] | None = None  # (start, dt, k)
        self._prefilling: set[int] = set()
        self._ewma = {"ttft": 0.0, "tpot": 0.0, "e2e": 0.0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_arrival = -math.inf
        self.trace: list[tuple[float, str, str]] | None = None  # (time, event, request id)

    # ------------------------------------------------------------------ public API
    async def generate(self, req: EngineRequest) -> EngineResult:
        """Submit ``req`` and wait for it to finish; cancelling the caller aborts the request."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        now = loop.time()
        req.arrival = self._last_arrival = now
        req.seq = next(self._counter)
        req.record("arrival", now)
        if req.prompt_tokens + req.output_tokens > self.kv_capacity or req.output_tokens < 1:
            req.status = RequestStatus.REJECTED
            return self._result(req, now)
        fut = loop.create_future()
        self._futures[id(req)] = fut
        self.waiting.add(req)
        self._log(now, "arrive", req)
        self._wake(now)
        try:
            return await fut
        except asyncio.CancelledError:
            self.abort(req)
            raise

    def abort(self, req: EngineRequest) -> None:
        """Remove a waiting or running request and free its KV cache."""
        if req.status.is_finished:
            return
        now = self._loop.time() if self._loop else 0.0
        if req.status == RequestStatus.RUNNING:
            self._settle_span(now)
            if req.status.is_finished:
                return
            self.running.remove(req)
            self._prefilling.discard(id(req))
            self.kv_used -= req.context_len
        else:
            self.waiting.remove(req)
        req.status = RequestStatus.ABORTED
        self._log(now, "abort", req)
        self._finish(req, now)
        self._wake(now)

    def seed_history(self, ttft_s: float, tpot_s: float, e2e_s: float) -> None:
        """Start the latency EWMAs as if the replica had served requests before (a served pool
        is never fresh: its idle models still report their last latencies)."""
        self._ewma = {"ttft": ttft_s, "tpot": tpot_s, "e2e": e2e_s}

    def snapshot(self, slacks: bool = True) -> LoadSnapshot:
        """Current load and latency EWMAs (model and replica id: the engine's name); the EDF
        slacks of the engine's own queue unless ``slacks`` is false (a replica's snapshot lists
        only its admission queue's: ``DeadlineQueue.snapshot_over``)."""
        now = self._loop.time() if self._loop else 0.0
        return LoadSnapshot(
            model=self.name,
            waiting=len(self.waiting),
            running=len(self.running),
            kv_usage=self.kv_used / self.kv_capacity,
            ttft_s=self._ewma["ttft"],
            tpot_s=self._ewma["tpot"],
            e2e_s=self._ewma["e2e"],
            timestamp=now,
            waiting_slack_s=earliest_slacks(self.waiting.deadlines(), now)
            if slacks and self.policy is SchedulingPolicy.EDF else (),
            replica_id=self.name,
            num_preemptions=self.num_preemptions,
        )

    # ------------------------------------------------------------------ scheduling
    def _log(self, t: float, event: str, req: EngineRequest) -> None:
        if self.trace is not None:
            self.trace.append((t, event, req.request_id))

    def _wake(self, now: float) -> None:
        """React to a new arrival or an abort: schedule now if idle, else cut the span short."""
        if self._timer is None:
            self._schedule(now)
            return
        start, dt, k = self._span
        done = math.floor((now - start) / dt + 1e-9)
        if done + 1 < k:
            self._timer.cancel()
            self._span = (start, dt, done + 1)
            self._timer = self._loop.call_at(start + (done + 1) * dt, self._on_span_end)

    def _settle_span(self, now: float) -> None:
        """Apply the iterations of the current span completed by ``now`` (before an abort)."""
        if self._span is None:
            return
        start, dt, k = self._span
        done = min(k, math.floor((now - start) / dt + 1e-9))
        if done <= 0 or self._prefilling:
            return
        self._timer.cancel()
        boundary = start + done * dt
        self._advance(done, boundary)
        self._schedule(boundary)

    def _admit(self, now: float) -> int:
        """Admit waiting requests in queue order; return prompt tokens to prefill."""
        budget = self.max_batched_tokens
        prefill = 0
        while len(self.waiting) and len(self.running) < self.max_num_seqs:
            req = self.waiting.peek()
            need = req.context_len
            if self.kv_used + need + len(self.running) + 1 > self.kv_capacity:
                break  # head-of-line blocking on KV, as vLLM does
            if prefill and prefill + need > budget:
                break
            self.waiting.pop()
            req.status = RequestStatus.RUNNING
            if req.first_scheduled is None:
                req.first_scheduled = now
            req.record("scheduled", now)
            self._log(now, "schedule", req)
            self.running.append(req)
            self._prefilling.add(id(req))
            self.kv_used += need
            prefill += need
        return prefill

    def _preempt_for(self, growth: int, now: float) -> None:
        """Preempt lowest-priority running requests until ``growth`` more tokens fit."""
        key = self.waiting.victim_key
        while self.running and self.kv_used + growth > self.kv_capacity:
            victim = max(self.running, key=key)
            self.running.remove(victim)
            self._prefilling.discard(id(victim))
            self.kv_used -= victim.context_len
            victim.status = RequestStatus.PREEMPTED
            victim.num_preemptions += 1
            self.num_preemptions += 1
            victim.record("preempted", now)
            self._log(now, "preempt", victim)
            self.waiting.prepend(victim)
            growth = len(self.running)

    def _schedule(self, now: float) -> None:
        """Plan the next iteration (or span of decode iterations) starting at ``now``."""
        self._timer = None
        self._span = None
        prefill = self._admit(now)
        if not self.running:
            return
        self._preempt_for(len(self.running), now)
        if not self.running:
            self._schedule(now)
            return
        prefill = sum(r.context_len for r in self.running if id(r) in self._prefilling)
        n = len(self.running)
        decode = n - len(self._prefilling)
        if prefill:
            k = 1
            dt = self.profile.iteration_time(prefill, decode, self.kv_used)
        else:
            k = min(r.remaining for r in self.running)
            k = max(1, min(k, (self.kv_capacity - self.kv_used) // n, self.max_span or k))
            dt = self.profile.iteration_time(0, n, self.kv_used + n * (k - 1) / 2)
        self._span = (now, dt, k)
        self._timer = self._loop.call_at(now + k * dt, self._on_span_end)

    def _advance(self, k: int, t_end: float) -> None:
        """Every running request emits ``k`` tokens by ``t_end``; finished ones leave. Each is
        charged the delay its presence added to the ``n - 1`` others (``imposed_s``): its
        marginal iteration time (``IterationProfile.marginal_rates``) over the ``k`` iterations,
        its KV at the span's midpoint."""
        done: list[EngineRequest] = []
        others = k * (len(self.running) - 1)
        c_pre, c_dec, c_kv = self.profile.marginal_rates(not self._prefilling, len(self.running))
        mid = (k - 1) / 2
        for req in self.running:
            if others:
                ctx = req.context_len
                own = c_pre * ctx if id(req) in self._prefilling else c_dec
                req.imposed_s += others * (own + c_kv * (ctx + mid))
            if req.first_token is None:
                req.first_token = t_end
                req.record("first_token", t_end)
            req.num_generated += k
            self.kv_used += k
            if req.remaining <= 0:
                done.append(req)
        self._prefilling.clear()
        self.max_kv_used = max(self.max_kv_used, self.kv_used)
        for req in done:
            self.running.remove(req)
            self.kv_used -= req.context_len
            req.status = RequestStatus.FINISHED
            self._log(t_end, "finish", req)
            self._finish(req, t_end)

    def _on_span_end(self) -> None:
        # The span ends at its planned instant, not when the callback runs. On the simulated
        # clock they are one (lateness under LATE_S is its float rounding: the loop's time is
        # kept, so the twin's results do not change); on the wall clock a busy process runs
        # timers late, and starting the next span from the late instant would add every delay
        # to the engine's pace. A late engine catches up: it runs the spans already over in one
        # callback.
        now = self._loop.time()
        while True:
            k, end = self._span[2], _span_end(self._span)
            late = now - end > LATE_S
            # never before an arrival it has seen (one admitted then would start before it came)
            t_end = max(end, self._last_arrival) if late else now
            self._advance(k, t_end)
            self._schedule(t_end)
            if not late or self._span is None or _span_end(self._span) > now:
                return
            self._timer.cancel()  # the next span is over too: run it here

    def _finish(self, req: EngineRequest, now: float) -> None:
        req.finished_at = now
        req.record("finished", now)
        if req.status == RequestStatus.FINISHED:
            ttft = req.first_token - req.arrival
            tpot = (now - req.first_token) / max(1, req.num_generated - 1)
            for key, v in (("ttft", ttft), ("tpot", tpot), ("e2e", now - req.arrival)):
                self._ewma[key] = ewma(self._ewma[key], v)
        fut = self._futures.pop(id(req), None)
        if fut is not None and not fut.done():
            fut.set_result(self._result(req, now))

    @staticmethod
    def _result(req: EngineRequest, now: float) -> EngineResult:
        return EngineResult(
            request_id=req.request_id,
            status=req.status,
            output_tokens=req.num_generated,
            arrival=req.arrival,
            first_token=req.first_token,
            finished_at=now,
            num_preemptions=req.num_preemptions,
            service_s=now - req.arrival,
            imposed_s=req.imposed_s,
        )
