"""A replica's admission queue in front of its engine, the same on both clocks.

Bounded; admits requests to the engine in deadline order (EDF; on request FCFS, or Autellix's
program-level attained-service orders PLAS and ATLAS, with their anti-starvation on this queue's
clock) up to the engine's capacity; a request whose deadline cannot be met (less than
``min_service_s`` left, or a predicted finish past the time left by more than ``margin`` of it:
``replica.predict``, the requests ahead of it in the queue's order and the queue's EWMA of engine
time per answer) is answered at once with ``DEADLINE`` instead of occupying the engine, or when
its deadline passes while it waits (whatever the order: every scheduler gets the same deadline
admission); a full queue answers ``OVERLOADED`` at once. The heap is the shared
``core.request_queue`` queue. The queue knows nothing of the engine's request type: ``submit``
takes a deadline, the program's attained service and a coroutine factory and says how the request
left (:class:`Admission`).
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from inframind_ray.core.clock import Clock
from inframind_ray.core.request import EngineRequest, ProgramService, RequestStatus, ewma
from inframind_ray.core.request_queue import (
    SchedulingPolicy,
    create_request_queue,
    earliest_slacks,
)
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.predict import concurrency, finish_in_s, too_late

R = TypeVar("R")


@dataclass(frozen=True)
class Admission(Generic[R]):
    """How one request left the queue. ``result`` is the engine's answer when it was admitted
    (``status`` None: the caller reads the engine's status); otherwise ``status`` is the queue's
    own terminal answer (DEADLINE, OVERLOADED, or ERROR when the engine raised)."""

    result: R | None
    status: RequestStatus | None
    waited_s: float  # in this queue, before the engine got it
    latency_s: float  # arrival here to the end
    detail: str = ""


class DeadlineQueue:
    """Admission control of one replica on an injected clock (deadlines on that clock)."""

    def __init__(self, capacity: int, max_queue: int, *, clock: Clock,
                 min_service_s: float = 0.0,
                 order: SchedulingPolicy | str = SchedulingPolicy.EDF,
                 margin: float | None = None,
                 engine_load: Callable[[], LoadSnapshot] | None = None) -> None:
        if capacity < 1 or max_queue < 0:
            raise ValueError("capacity must be >= 1 and max_queue >= 0")
        self.capacity = capacity
        self.max_queue = max_queue
        self.min_service_s = min_service_s
        self.margin = margin  # the admission rule's (None: refuse only hopeless deadlines)
        self.engine_load = engine_load  # the engine's own snapshot (its waiting and running)
        self.clock = clock
        self.order = SchedulingPolicy(order)
        self.in_engine = 0
        self.waiting = create_request_queue(self.order, clock.now)
        self._futures: dict[int, asyncio.Future[bool]] = {}
        self._seq = itertools.count()
        self.counts: Counter[RequestStatus] = Counter()
        # TTFT and end-to-end latency of answered requests from their arrival here, so that the
        # wait in this queue counts (``answered``); 0 until the first answer
        self.ttft_ewma = 0.0
        self.e2e_ewma = 0.0
        self.service_ewma = 0.0  # engine seconds per answered request (admission's predictor)
        self.predicted_refusals = 0  # requests refused by the predicted-finish rule

    def __len__(self) -> int:
        return len(self.waiting)

    def slacks(self, now: float) -> tuple[float, ...]:
        """Seconds to the earliest waiting deadlines (the replica snapshot's EDF view)."""
        if self.order is not SchedulingPolicy.EDF:
            return ()
        return earliest_slacks(self.waiting.deadlines(), now)

    def finish_in_s(self, deadline: float, now: float) -> float:
        """Predicted seconds until a new request due at ``deadline`` would end here
        (``replica.predict``): the requests running in the engine, those waiting ahead of it in
        this queue's order (EDF: due no later; any other order: all of them) and in the
        engine's own queue (``engine_load``, when given), the service-time EWMA."""
        if self.order is SchedulingPolicy.EDF:
            ahead = sum(d <= deadline for d in self.waiting.deadlines())
        else:
            ahead = len(self.waiting)
        running, waiting = self.in_engine, len(self.waiting)
        if self.engine_load is not None:
            eng = self.engine_load()
            running, waiting = eng.running, waiting + eng.waiting
            ahead += eng.waiting_ahead(deadline - now, eng.timestamp)  # taken just now
        return finish_in_s(ahead, running, concurrency(self.capacity, running, waiting),
                           self.service_ewma)

    def snapshot_over(self, engine: LoadSnapshot, **identity: str) -> LoadSnapshot:
        """The replica's snapshot: the engine's, plus this queue's waiting requests and EDF
        slacks, TTFT / E2E from arrival here (the engine's own until a request was answered),
        stamped now, with the replica's ``identity`` (model, replica_id, node_id)."""
        now = self.clock.now()
        return LoadSnapshot(
            model=identity.get("model", engine.model), replicas=1,
            waiting=len(self) + engine.waiting, running=engine.running,
            kv_usage=engine.kv_usage, ttft_s=self.ttft_ewma or engine.ttft_s,
            tpot_s=engine.tpot_s, e2e_s=self.e2e_ewma or engine.e2e_s, timestamp=now,
            waiting_slack_s=self.slacks(now), replica_id=identity.get("replica_id", ""),
            node_id=identity.get("node_id", ""), num_preemptions=engine.num_preemptions,
            service_s=self.service_ewma or engine.e2e_s, capacity=self.capacity)

    def answered(self, status: RequestStatus, ttft_s: float | None, latency_s: float,
                 waited_s: float = 0.0, service_s: float | None = None) -> None:
        """Count an admitted request's outcome; fold an answer's latencies (from arrival here,
        ``waited_s`` of it in this queue) and its engine time (``service_s`` when the engine
        says, else the latency less the wait here) into the EWMAs."""
        self.counts[status] += 1
        if status.ok:
            self.e2e_ewma = ewma(self.e2e_ewma, latency_s)
            self.service_ewma = ewma(self.service_ewma, max(0.0, latency_s - waited_s)
                                     if service_s is None else service_s)
            if ttft_s is not None:
                self.ttft_ewma = ewma(self.ttft_ewma, ttft_s)

    async def submit(self, deadline: float, run: Callable[[], Awaitable[R]],
                     program: ProgramService = ProgramService()) -> Admission[R]:
        """Queue a request due at ``deadline`` of ``program`` (its attained service ranks it
        under PLAS / ATLAS) and ``await run()`` once admitted (or answer at once). An exception
        of ``run`` becomes an ERROR admission, never a lost request."""
        t0 = self.clock.now()
        if deadline - t0 <= self.min_service_s:
            return self._refuse(RequestStatus.DEADLINE, t0, "deadline cannot be met")
        if self.margin is not None:
            left, finish = deadline - t0, self.finish_in_s(deadline, t0)
            if too_late(finish, left, self.margin):
                self.predicted_refusals += 1
                return self._refuse(RequestStatus.DEADLINE, t0, (
                    f"predicted finish in {finish:.3g} s, {left:.3g} s to the deadline "
                    f"(margin {self.margin:g})"))
        if self.in_engine < self.capacity and not len(self.waiting):
            self.in_engine += 1
            return await self._run(run, t0)
        if len(self.waiting) >= self.max_queue:
            return self._refuse(RequestStatus.OVERLOADED, t0, "replica queue full")
        entry = EngineRequest("", 0, 1, deadline=deadline, arrival=t0, seq=next(self._seq),
                              program=program)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._futures[id(entry)] = fut
        self.waiting.add(entry)
        timeout = deadline - t0 if math.isfinite(deadline) else None
        try:
            await asyncio.wait({fut}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(entry, fut)
            raise
        if not fut.done():  # deadline passed while waiting
            self._abandon(entry, fut)
            return self._refuse(RequestStatus.DEADLINE, t0, "deadline passed in the replica queue")
        return await self._run(run, t0)

    def _abandon(self, entry: EngineRequest, fut: asyncio.Future) -> None:
        """Leave the queue; if a slot was already granted, give it back."""
        self._futures.pop(id(entry), None)
        if fut.done():
            self.in_engine -= 1
            self._release()
        else:
            fut.cancel()
            self.waiting.remove(entry)

    async def _run(self, run: Callable[[], Awaitable[R]], t0: float) -> Admission[R]:
        waited = self.clock.now() - t0
        try:
            res = await run()
        except Exception as e:  # an engine failure answers this request, never loses it
            self.counts[RequestStatus.ERROR] += 1
            return Admission(None, RequestStatus.ERROR, waited, self.clock.now() - t0,
                             f"{type(e).__name__}: {e}")
        finally:
            self.in_engine -= 1
            self._release()
        return Admission(res, None, waited, self.clock.now() - t0)

    def _release(self) -> None:
        """Admit the first waiting requests (in the queue's order) while the engine has room."""
        while self.in_engine < self.capacity and len(self.waiting):
            entry = self.waiting.pop()
            fut = self._futures.pop(id(entry), None)
            if fut is None or fut.done():
                continue
            self.in_engine += 1
            fut.set_result(True)

    def _refuse(self, status: RequestStatus, t0: float, detail: str) -> Admission:
        self.counts[status] += 1
        waited = self.clock.now() - t0
        return Admission(None, status, waited, waited, detail)
