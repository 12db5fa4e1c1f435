"""An asyncio event loop on a virtual clock.

The agent workflow, the policies and the engine model are ordinary asyncio code. Run on a normal
loop they see the wall clock (the serving plane); run on :class:`SimEventLoop` they see simulated
time, which jumps straight to the next scheduled timer whenever nothing is ready. This is the whole
trick: the selector's ``select(timeout)`` never blocks, it advances the clock by ``timeout``.

The loop can also *pause* inside a callback (:meth:`SimEventLoop.pause`): ``run_forever`` returns
right after the running callback, the rest of its batch kept, and simulated time stands still. A
driver (the RL env) answers what the paused code awaits with :meth:`SimEventLoop.resume_first`,
whose waiter then runs before that rest, exactly where a synchronous call would have returned.
A simulation driven that way runs the same callbacks in the same order as one whose decisions
block synchronously, in the caller's own thread.
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_MIN_SCHEDULED = 100  # as asyncio.base_events: compact the timer heap past this size
_MIN_CANCELLED_SHARE = 0.5  # ... when more than this share of it is cancelled


class _VirtualSelector(selectors.SelectSelector):
    """A selector whose ``select`` advances virtual time instead of waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:
            # Nothing ready and no timer: the simulation can never make progress.
            raise RuntimeError("simulation deadlock: no ready callbacks and no timers")
        if timeout > 0:
            self.now += timeout
        return []


class SimEventLoop(asyncio.SelectorEventLoop):
    """Event loop whose ``time()`` is simulated seconds since the loop was created."""

    def __init__(self) -> None:
        self._vsel = _VirtualSelector()
        super().__init__(self._vsel)
        self._batch_left = 0  # callbacks of a paused batch still to run
        self._pausing = False

    def time(self) -> float:
        return self._vsel.now

    def pause(self) -> None:
        """From inside a callback: make ``run_forever`` return after it (rest of batch kept)."""
        self._pausing = True
        self.stop()

    def resume_first(self, fut: asyncio.Future, value: Any) -> None:
        """Set ``fut``'s result and schedule its waiters ahead of the paused batch's rest."""
        n = len(self._ready)
        fut.set_result(value)
        new = [self._ready.pop() for _ in range(len(self._ready) - n)]
        self._ready.extendleft(new)  # popped last-first, so extendleft restores their order
        self._batch_left += len(new)

    def _run_once(self) -> None:
        """``BaseEventLoop._run_once`` without I/O, that can stop after any callback."""
        if not self._batch_left:
            sched = self._scheduled
            if (len(sched) > _MIN_SCHEDULED
                    and self._timer_cancelled_count / len(sched) > _MIN_CANCELLED_SHARE):
                kept = []
                for h in sched:
                    if h._cancelled:
                        h._scheduled = False
                    else:
                        kept.append(h)
                heapq.heapify(kept)
                self._scheduled = sched = kept
                self._timer_cancelled_count = 0
            else:
                while sched and sched[0]._cancelled:
                    self._timer_cancelled_count -= 1
                    heapq.heappop(sched)._scheduled = False
            timeout = None
            if self._ready or self._stopping:
                timeout = 0
            elif sched:
                timeout = min(max(0, sched[0]._when - self.time()), 86400)
            self._vsel.select(timeout)
            end_time = self.time() + self._clock_resolution
            while sched and sched[0]._when < end_time:
                h = heapq.heappop(sched)
                h._scheduled = False
                self._ready.append(h)
            self._batch_left = len(self._ready)
        ready = self._ready
        while self._batch_left:
            self._batch_left -= 1
            h = ready.popleft()
            if h._cancelled:
                continue
            h._run()
            if self._pausing:
                self._pausing = False
                break


def run_simulated(coro: Coroutine[Any, Any, T]) -> tuple[T, float]:
    """Run ``coro`` on a fresh :class:`SimEventLoop`; return (result, simulated seconds)."""
    loop = SimEventLoop()
    try:
        result = loop.run_until_complete(coro)
        return result, loop.time()
    finally:
        loop.close()
