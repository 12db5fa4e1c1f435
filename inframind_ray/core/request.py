"""One engine request and its state machine, shared by the twin and the serving plane."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from inframind_ray.core.constants import EWMA_ALPHA


def ewma(old: float, new: float, alpha: float = EWMA_ALPHA) -> float:
    """One EWMA step; the first value (``old`` 0) is taken as is."""
    return new if old == 0 else (1 - alpha) * old + alpha * new


class RequestStatus(enum.IntEnum):
    """Lifecycle of a request, end to end (engine, replica, agent call, query); every status >=
    FINISHED is terminal. The terminal ones are the outcomes every plane reports:

    - FINISHED: answered (``"ok"``);
    - DEADLINE: the deadline passed or cannot be met, whoever gave up (engine abort, replica
      queue, workflow runner); ``ABORTED`` is the engine's name for it;
    - REJECTED: the request does not fit the engine (KV cache);
    - OVERLOADED: the replica's queue is full;
    - ERROR: the engine or the endpoint failed.
    """

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    DEADLINE = 4
    ABORTED = 4  # alias of DEADLINE: the caller aborted the request at its deadline
    REJECTED = 5
    OVERLOADED = 6
    ERROR = 7

    @property
    def is_finished(self) -> bool:
        """True for terminal states."""
        return self >= RequestStatus.FINISHED

    @property
    def ok(self) -> bool:
        """Answered."""
        return self is RequestStatus.FINISHED

    @property
    def api(self) -> str:
        """The string of a terminal status in API responses, records and bench rows."""
        return API_STATUS[self]

    @classmethod
    def from_api(cls, name: str) -> RequestStatus:
        """Inverse of ``api`` (one-line ``ValueError`` for an unknown string)."""
        try:
            return _FROM_API[name]
        except KeyError:
            raise ValueError(f"unknown status {name!r}; expected one of "
                             f"{', '.join(_FROM_API)}") from None


API_STATUS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED: "ok",
    RequestStatus.DEADLINE: "deadline",
    RequestStatus.REJECTED: "rejected",
    RequestStatus.OVERLOADED: "overloaded",
    RequestStatus.ERROR: "error",
}
"""The one map from terminal statuses to their API / record strings (used only at the edges)."""

_FROM_API = {v: k for k, v in API_STATUS.items()}


@dataclass(frozen=True)
class ProgramService:
    """The program (query) an agent call belongs to and the service it has attained so far,
    travelling with the call as its deadline does (the attained-service queues rank by it).

    ``attained_s``: engine seconds of the program's calls that ended before this one was sent
    (Autellix's PLAS); ``critical_path_s``: the most engine seconds along one chain of this call's
    upstream calls (ATLAS: max over its parents of their own ``critical_path_s`` + service)."""

    program_id: str = ""
    attained_s: float = 0.0
    critical_path_s: float = 0.0


@dataclass(eq=False)
class EngineRequest:
    """A generation request as the engine sees it.

    ``deadline`` is absolute on the engine's clock (the query's arrival + budget, inherited by every
    agent call); ``output_tokens`` is how many tokens to generate (the twin knows it from the
    outcome model; a real engine stops at EOS or ``max_tokens``); ``program`` is the query's
    identity and attained service (PLAS / ATLAS queues rank by it).
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    deadline: float = float("inf")
    arrival: float = 0.0
    status: RequestStatus = RequestStatus.WAITING
    num_generated: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    finished_at: float | None = None
    num_preemptions: int = 0
    seq: int = 0
    program: ProgramService = ProgramService()
    imposed_s: float = 0.0
    """Seconds this request's presence added to the other running requests, summed over them
    (the twin engine measures it: ``TwinEngine._advance``; a real engine leaves it 0)."""
    events: list[tuple[str, float]] = field(default_factory=list)

    @property
    def context_len(self) -> int:
        """Tokens held in the KV cache once (re)computed: prompt plus generated."""
        return self.prompt_tokens + self.num_generated

    @property
    def remaining(self) -> int:
        """Tokens still to generate."""
        return self.output_tokens - self.num_generated

    def record(self, event: str, t: float) -> None:
        """Append a lifecycle event to ``events`` (the engine also sets the timing fields)."""
        self.events.append((event, t))


@dataclass(frozen=True)
class EngineResult:
    """What ``generate`` returns: status and the measured timings (seconds, engine clock)."""

    request_id: str
    status: RequestStatus
    output_tokens: int
    arrival: float
    first_token: float | None
    finished_at: float
    num_preemptions: int
    service_s: float = 0.0  # seconds in the engine, from its admission there to the end
    imposed_s: float = 0.0  # delay added to the other running requests (twin only, else 0)

    @property
    def queue_wait(self) -> float | None:
        """Arrival to first token (time to first token), if any token came."""
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        """Arrival to end."""
        return self.finished_at - self.arrival
