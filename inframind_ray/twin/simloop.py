"""An asyncio event loop on a virtual clock.

The agent workflow, the policies and the engine model are ordinary asyncio code. Run on a normal
loop they see the wall clock (the serving plane); run on :class:`SimEventLoop` they see simulated
time, which jumps straight to the next scheduled timer whenever nothing is ready. This is the whole
trick: the selector's ``select(timeout)`` never blocks, it advances the clock by ``timeout``.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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

    def time(self) -> float:
        return self._vsel.now


def run_simulated(coro: Coroutine[Any, Any, T]) -> tuple[T, float]:
    """Run ``coro`` on a fresh :class:`SimEventLoop`; return (result, simulated seconds)."""
    loop = SimEventLoop()
    try:
        result = loop.run_until_complete(coro)
        return result, loop.time()
    finally:
        loop.close()
