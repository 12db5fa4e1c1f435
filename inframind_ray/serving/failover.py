"""The orchestrators the ingress sends work to: the active one and a warm standby.

Both are named, restartable Ray actors, loaded and fed by every replica's metric pushes, so the
standby holds a current load view. The ingress sends everything to the active one; when a call
to it fails because the actor died or is restarting, that call's query gets its explicit
retryable 503 (it may have run agent calls) and the ingress makes the other one active, so new
queries are answered at once instead of after the dead one's restart (a new worker process
importing torch, Ray Serve and the task data: 13 s under load here, docs/operations.md). The
restarted actor becomes the standby."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import ray

from inframind_ray.serving.replica import NAMESPACE, ORCHESTRATOR, STANDBY, orchestrator_names

__all__ = ["STANDBY", "Orchestrators", "orchestrator_names"]
log = logging.getLogger("ray.serve")


class Orchestrators:
    """The ingress's handles to the orchestrators and which one is active."""

    def __init__(self, handles: Sequence[Any]) -> None:
        if not handles:
            raise ValueError("no orchestrator")
        self.handles = list(handles)
        self.active = 0
        self.failovers = 0

    @classmethod
    def lookup(cls, standby: bool) -> Orchestrators:
        """The running orchestrators by name (a standby that does not run is left out)."""
        handles = []
        for name in orchestrator_names(standby):
            try:
                handles.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:
                if name == ORCHESTRATOR:
                    raise
                log.warning("no standby orchestrator %s: serving without one", name)
        return cls(handles)

    def submit(self, method: str, *args: Any) -> tuple[int, Any]:
        """Call ``method`` on the active orchestrator: (its index, the ObjectRef)."""
        i = self.active
        return i, getattr(self.handles[i], method).remote(*args)

    def failed(self, i: int) -> None:
        """Orchestrator ``i`` died or is restarting: make the next one active (once per
        failure: calls that fail later on the same dead one do not switch back)."""
        if i == self.active and len(self.handles) > 1:
            self.active = (i + 1) % len(self.handles)
            self.failovers += 1
            log.warning("orchestrator %d unavailable: switched to %d", i, self.active)
