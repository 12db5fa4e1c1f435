"""Fakes shared by the unit tests: a settable clock and short names of the terminal statuses."""

from __future__ import annotations

from inframind_ray.core.request import RequestStatus

OK, DEADLINE, OVERLOADED = RequestStatus.FINISHED, RequestStatus.DEADLINE, RequestStatus.OVERLOADED


class Clock:
    """A settable clock (the ``core.clock.Clock`` protocol)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t
