"""Waiting queues: FCFS (vLLM's default) and EDF (earliest deadline first), one class each."""

from __future__ import annotations

import enum
import heapq
import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator

from inframind_ray.core.constants import SLACK_CAP
from inframind_ray.core.request import EngineRequest


class SchedulingPolicy(enum.StrEnum):
    """Order of the waiting queue (and of preemption victims)."""

    FCFS = "fcfs"
    EDF = "edf"


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


def create_request_queue(policy: SchedulingPolicy | str) -> RequestQueue:
    """Factory keyed by :class:`SchedulingPolicy`."""
    policy = SchedulingPolicy(policy)
    return FCFSQueue() if policy is SchedulingPolicy.FCFS else EDFQueue()


def earliest_slacks(deadlines: Iterable[float], now: float) -> tuple[float, ...]:
    """The ``SLACK_CAP`` smallest ``deadline - now``, ascending: what a replica's load snapshot
    lists of its EDF queue, so a policy can count the requests due before a new one."""
    return tuple(d - now for d in heapq.nsmallest(SLACK_CAP, deadlines))
