"""The replica's EDF request queue in front of its engine.

Bounded; admits requests to the engine in deadline order up to the engine's capacity; a request
whose deadline cannot be met is answered at once with an explicit ``deadline`` result instead of
occupying the engine, or when its deadline passes while it waits; a full queue answers
``overloaded`` at once. The heap is the shared ``core.request_queue.EDFQueue``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from inframind_ray.core.request import EngineRequest, ewma
from inframind_ray.core.request_queue import EDFQueue, earliest_slacks
from inframind_ray.serving.engines.base import GenerateRequest, GenerateResult

RunFn = Callable[[GenerateRequest], Awaitable[GenerateResult]]


class DeadlineQueue:
    """EDF admission control for one replica. ``clock`` returns epoch seconds."""

    def __init__(self, capacity: int, max_queue: int, *, min_service_s: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        if capacity < 1 or max_queue < 0:
            raise ValueError("capacity must be >= 1 and max_queue >= 0")
        self.capacity = capacity
        self.max_queue = max_queue
        self.min_service_s = min_service_s
        self.clock = clock
        self.in_engine = 0
        self.waiting = EDFQueue()
        self._futures: dict[int, asyncio.Future[bool]] = {}
        self._seq = itertools.count()
        self.counts = {"ok": 0, "deadline": 0, "overloaded": 0, "error": 0}
        # TTFT and end-to-end latency of answered requests from their arrival here, so that
        # the wait in this queue counts, as in the twin's engine (its EWMAs start at arrival)
        self.ttft_ewma = 0.0
        self.e2e_ewma = 0.0

    def __len__(self) -> int:
        return len(self.waiting)

    def slacks(self, now: float) -> tuple[float, ...]:
        """Seconds to the earliest waiting deadlines (the replica snapshot's EDF view)."""
        return earliest_slacks(self.waiting.deadlines(), now)

    async def submit(self, req: GenerateRequest, run: RunFn) -> GenerateResult:
        """Queue ``req`` and run it with ``run`` once admitted (or answer at once)."""
        t0 = self.clock()
        if req.deadline - t0 <= self.min_service_s:
            return self._answer(req, "deadline", t0, "deadline cannot be met")
        if self.in_engine < self.capacity and not len(self.waiting):
            self.in_engine += 1
            return await self._run(req, run, t0)
        if len(self.waiting) >= self.max_queue:
            return self._answer(req, "overloaded", t0, "replica queue full")
        entry = EngineRequest(req.request_id, 0, 1, deadline=req.deadline, arrival=t0,
                              seq=next(self._seq))
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._futures[id(entry)] = fut
        self.waiting.add(entry)
        try:
            await asyncio.wait({fut}, timeout=max(0.0, req.deadline - self.clock()))
        except asyncio.CancelledError:
            self._abandon(entry, fut)
            raise
        if not fut.done():  # deadline passed while waiting
            self._abandon(entry, fut)
            return self._answer(req, "deadline", t0, "deadline passed in the replica queue")
        return await self._run(req, run, t0)

    def _abandon(self, entry: EngineRequest, fut: asyncio.Future) -> None:
        """Leave the queue; if a slot was already granted, give it back."""
        self._futures.pop(id(entry), None)
        if fut.done():
            self.in_engine -= 1
            self._release()
        else:
            fut.cancel()
            self.waiting.remove(entry)

    async def _run(self, req: GenerateRequest, run: RunFn, t0: float) -> GenerateResult:
        waited = self.clock() - t0
        try:
            res = await run(req)
        except Exception as e:  # an engine failure answers this request, never loses it
            res = GenerateResult(req.request_id, "error", detail=f"{type(e).__name__}: {e}")
        finally:
            self.in_engine -= 1
            self._release()
        self.counts[res.status if res.status in self.counts else "error"] += 1
        latency = self.clock() - t0
        if res.status == "ok":
            self.e2e_ewma = ewma(self.e2e_ewma, latency)
            if res.ttft_s is not None:
                self.ttft_ewma = ewma(self.ttft_ewma, waited + res.ttft_s)
        return replace(res, queue_wait_s=waited, latency_s=latency)

    def _release(self) -> None:
        """Admit the earliest deadlines while the engine has room."""
        while self.in_engine < self.capacity and len(self.waiting):
            entry = self.waiting.pop()
            fut = self._futures.pop(id(entry), None)
            if fut is None or fut.done():
                continue
            self.in_engine += 1
            fut.set_result(True)

    def _answer(self, req: GenerateRequest, status: str, t0: float, detail: str
                ) -> GenerateResult:
        self.counts[status] += 1
        return GenerateResult(req.request_id, status, latency_s=self.clock() - t0,
                              queue_wait_s=self.clock() - t0, detail=detail)
