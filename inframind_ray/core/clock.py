"""The two clocks a deadline lives on, and the one conversion between them.

A deadline is an absolute instant on the driving clock from the API to the engine: simulated
seconds in the twin (``LoopClock`` on a ``SimEventLoop``), epoch seconds when served
(``WallClock``). asyncio timers run on the loop's own clock, so a wall-clock instant becomes
loop time in exactly one place: :func:`loop_time_at`.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time (seconds)."""

    def now(self) -> float:
        """The current instant."""
        ...


class LoopClock:
    """The running asyncio loop's time: simulated seconds on the twin's loop."""

    def now(self) -> float:
        """``loop.time()`` of the running loop."""
        return asyncio.get_running_loop().time()


class WallClock:
    """Epoch seconds (``time.time``): the clock deadlines cross processes on when served."""

    def now(self) -> float:
        """``time.time()``."""
        return time.time()


LOOP_CLOCK = LoopClock()
WALL_CLOCK = WallClock()


def loop_time_at(epoch_s: float) -> float:
    """The running loop's time at the wall-clock instant ``epoch_s`` (for ``call_at``,
    ``asyncio.timeout_at`` and engines that schedule on the loop); infinities stay."""
    if not math.isfinite(epoch_s):
        return epoch_s
    return asyncio.get_running_loop().time() + (epoch_s - time.time())
