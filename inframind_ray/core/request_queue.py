"""Waiting queues, one class each: FCFS (vLLM's default), EDF (earliest deadline first), and
Autellix's program-level attained-service orders, PLAS (the program's cumulative service) and ATLAS
(service along the call's critical path), on discretised levels with anti-starvation."""

from __future__ import annotations

import enum
import heapq
import itertools
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from inframind_ray.core.constants import (
    LAS_FIRST_S,
    LAS_LEVELS,
    LAS_RATIO,
    SLACK_CAP,
    STARVATION_RATIO,
)
from inframind_ray.core.request import EngineRequest


class SchedulingPolicy(enum.StrEnum):
    """Order of the waiting queue (and of preemption victims)."""

    FCFS = "fcfs"
    EDF = "edf"
    PLAS = "plas"
    ATLAS = "atlas"


class RequestQueue(ABC):
    """A waiting queue. ``pop``/``peek`` on an empty queue raise ``IndexError``."""

    @abstractmethod
    def add(self, req: EngineRequest) -> None:
        """Enqueue a new request."""

    @abstractmethod
    def prepend(self, req: EngineRequest) -> None:
        """Re-enqueue a preempted request (FCFS puts it first; EDF by its key)."""

    @abstractmethod
    def peek(self) -> EngineRequest:
        """The next request to admit."""

    @abstractmethod
    def pop(self) -> EngineRequest:
        """Remove and return the next request to admit."""

    @abstractmethod
    def remove(self, req: EngineRequest) -> None:
        """Remove a request (abort)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[EngineRequest]: ...

    @staticmethod
    @abstractmethod
    def victim_key(req: EngineRequest) -> tuple:
        """Preemption picks the running request with the LARGEST key (lowest priority)."""


class FCFSQueue(RequestQueue):
    """Arrival order on a deque; preempted requests go back to the front."""

    def __init__(self) -> None:
        self._q: deque[EngineRequest] = deque()

    def add(self, req: EngineRequest) -> None:
        self._q.append(req)

    def prepend(self, req: EngineRequest) -> None:
        self._q.appendleft(req)

    def peek(self) -> EngineRequest:
        if not self._q:
            raise IndexError("peek from an empty queue")
        return self._q[0]

    def pop(self) -> EngineRequest:
        if not self._q:
            raise IndexError("pop from an empty queue")
        return self._q.popleft()

    def remove(self, req: EngineRequest) -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[EngineRequest]:
        return iter(self._q)

    @staticmethod
    def victim_key(req: EngineRequest) -> tuple:
        return (req.arrival, req.seq)


class EDFQueue(RequestQueue):
    """Heap keyed by (deadline, arrival, seq); removal is lazy (stale entries are skipped)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, float, int, int, EngineRequest]] = []
        self._live: dict[int, int] = {}  # id(request) -> its live heap entry number
        self._entries = itertools.count()

    def add(self, req: EngineRequest) -> None:
        entry = next(self._entries)
        self._live[id(req)] = entry
        heapq.heappush(self._heap, (req.deadline, req.arrival, req.seq, entry, req))

    prepend = add

    def _clean(self) -> None:
        while self._heap and self._live.get(id(self._heap[0][4])) != self._heap[0][3]:
            heapq.heappop(self._heap)

    def peek(self) -> EngineRequest:
        self._clean()
        if not self._heap:
            raise IndexError("peek from an empty queue")
        return self._heap[0][4]

    def pop(self) -> EngineRequest:
        self._clean()
        if not self._heap:
            raise IndexError("pop from an empty queue")
        req = heapq.heappop(self._heap)[4]
        del self._live[id(req)]
        return req

    def remove(self, req: EngineRequest) -> None:
        if self._live.pop(id(req), None) is None:
            raise ValueError("request not in queue")

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[EngineRequest]:
        return (e[4] for e in sorted(self._entries_live(), key=lambda e: e[:4]))

    def _entries_live(self) -> list[tuple]:
        return [e for e in self._heap if self._live.get(id(e[4])) == e[3]]

    def deadlines(self) -> Iterator[float]:
        """Deadlines of the waiting requests, unordered (no sort: for load snapshots)."""
        return (e[0] for e in self._entries_live())

    @staticmethod
    def victim_key(req: EngineRequest) -> tuple:
        return (req.deadline, req.arrival, req.seq)


def priority_level(service_s: float) -> int:
    """The discretised priority level of a program with ``service_s`` attained (0 = highest):
    0 below ``LAS_FIRST_S``, then one level per factor ``LAS_RATIO``, at most ``LAS_LEVELS - 1``."""
    if not service_s >= LAS_FIRST_S:
        return 0
    return min(LAS_LEVELS - 1, 1 + math.floor(math.log(service_s / LAS_FIRST_S, LAS_RATIO)
                                              + 1e-9))


class AttainedServiceQueue(RequestQueue):
    """Autellix's least-attained-service order over programs: a request ranks by the priority
    level of its program's attained service (``service``), then by arrival (FCFS within a level).
    Anti-starvation: a request that has waited ``STARVATION_RATIO`` x its attained service is
    promoted to the top level (where it ranks by its arrival), read on ``now`` at every peek;
    without ``now`` no request is promoted. Removal is lazy, as in :class:`EDFQueue`."""

    def __init__(self, now: Callable[[], float] | None = None) -> None:
        self._now = now
        self._levels: list[list[tuple[float, int, int, EngineRequest]]] = [
            [] for _ in range(LAS_LEVELS)]
        self._promote: list[tuple[float, int, int, EngineRequest]] = []
        self._where: dict[int, tuple[int, int]] = {}  # id(request) -> (live entry, its level)
        self._entries = itertools.count()

    @staticmethod
    @abstractmethod
    def service(req: EngineRequest) -> float:
        """The attained service the request ranks by."""

    def add(self, req: EngineRequest) -> None:
        entry, s = next(self._entries), self.service(req)
        level = priority_level(s)
        self._where[id(req)] = (entry, level)
        heapq.heappush(self._levels[level], (req.arrival, req.seq, entry, req))
        if level:
            heapq.heappush(self._promote,
                           (req.arrival + STARVATION_RATIO * s, req.seq, entry, req))

    prepend = add  # a preempted request keeps its arrival: first of its level

    def _promote_starved(self) -> None:
        if self._now is None:
            return
        now = self._now()
        while self._promote and self._promote[0][0] <= now:
            _, seq, entry, req = heapq.heappop(self._promote)
            where = self._where.get(id(req))
            if where is not None and where[0] == entry and where[1]:
                self._where[id(req)] = (entry, 0)
                heapq.heappush(self._levels[0], (req.arrival, seq, entry, req))

    def _head(self) -> list:
        self._promote_starved()
        for level, heap in enumerate(self._levels):
            while heap and self._where.get(id(heap[0][3])) != (heap[0][2], level):
                heapq.heappop(heap)
            if heap:
                return heap
        raise IndexError("empty queue")

    def peek(self) -> EngineRequest:
        return self._head()[0][3]

    def pop(self) -> EngineRequest:
        req = heapq.heappop(self._head())[3]
        del self._where[id(req)]
        return req

    def remove(self, req: EngineRequest) -> None:
        if self._where.pop(id(req), None) is None:
            raise ValueError("request not in queue")

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[EngineRequest]:
        self._promote_starved()
        live = [(level, *e[:3], e[3]) for level, heap in enumerate(self._levels) for e in heap
                if self._where.get(id(e[3])) == (e[2], level)]
        return (e[4] for e in sorted(live, key=lambda e: e[:4]))

    def deadlines(self) -> Iterator[float]:
        """Deadlines of the waiting requests, unordered."""
        return (r.deadline for r in self)

    def victim_key(self, req: EngineRequest) -> tuple:
        """Preempt the most attained service first, the latest arrival among equals."""
        return (priority_level(self.service(req)), req.arrival, req.seq)


class PLASQueue(AttainedServiceQueue):
    """Program-level least attained service: the program's cumulative service (all its calls
    that ended before this one was sent)."""

    @staticmethod
    def service(req: EngineRequest) -> float:
        return req.program.attained_s


class ATLASQueue(AttainedServiceQueue):
    """Attained service along the critical path: the most service on one chain of the call's
    upstream calls (parallel branches do not add up)."""

    @staticmethod
    def service(req: EngineRequest) -> float:
        return req.program.critical_path_s


def create_request_queue(policy: SchedulingPolicy | str,
                         now: Callable[[], float] | None = None) -> RequestQueue:
    """Factory keyed by :class:`SchedulingPolicy`; ``now`` (the owner's clock) drives the
    attained-service queues' anti-starvation."""
    policy = SchedulingPolicy(policy)
    if policy is SchedulingPolicy.FCFS:
        return FCFSQueue()
    if policy is SchedulingPolicy.EDF:
        return EDFQueue()
    return (PLASQueue if policy is SchedulingPolicy.PLAS else ATLASQueue)(now)


def earliest_slacks(deadlines: Iterable[float], now: float) -> tuple[float, ...]:
    """The ``SLACK_CAP`` smallest ``deadline - now``, ascending: what a replica's load snapshot
    lists of its EDF queue, so a policy can count the requests due before a new one."""
    return tuple(d - now for d in heapq.nsmallest(SLACK_CAP, deadlines))
