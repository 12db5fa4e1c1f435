"""The choice among a model's Serve replicas: the shared ``replica.choice.shortest_queue``, the
twin's own, as a Ray Serve request router.

Each replica reports its load (its ``LoadSnapshot``'s waiting + running, stamped) as Serve
routing stats (``ModelReplica.record_routing_stats``, every ``metrics_period_s``); the router adds
the requests it sent to a replica after that stamp and still in flight, and takes off those it
saw end after the stamp (a request's end retires its replica's oldest send), so that requests
between two reports neither all join one queue nor avoid a queue that has just emptied.
Serve's own backpressure stays: the shortest queue is tried first, the other replicas next.
"""

from __future__ import annotations

import math
import time

from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.choice import shortest_queue


def routing_stats(snap: LoadSnapshot) -> dict[str, float]:
    """What a replica reports to the router: its queue lengths and when they were taken."""
    return {"waiting": snap.waiting, "running": snap.running, "timestamp": snap.timestamp}


class ShortestQueueRouter(FIFOMixin, RequestRouter):
    """Routes each request to the replica with the fewest requests (waiting + running)."""

    def initialize_state(self, **kwargs: object) -> None:
        """Per replica, [send time, end time (inf while in flight)] of this router's requests
        that the replica's last report may not show as they are now."""
        self._sent: dict[ReplicaID, list[list[float]]] = {}

    def snapshot(self, replica: RunningReplica) -> LoadSnapshot:
        """A replica's load as this router knows it: its last report, plus the requests sent to
        it since then and still in flight, less those in the report that have ended since."""
        stats = replica.routing_stats or {}
        stamp = float(stats.get("timestamp", 0.0))
        sent = self._sent.get(replica.replica_id, [])
        sent[:] = [e for e in sent if e[1] > stamp]  # ended before the report: in it, or not
        fresh = sum(t > stamp and end == math.inf for t, end in sent)
        retired = sum(t <= stamp < end < math.inf for t, end in sent)
        waiting = int(stats.get("waiting", 0)) + fresh - retired
        running = int(stats.get("running", 0)) + min(0, waiting)
        return LoadSnapshot(replica.replica_id.deployment_id.name, waiting=max(0, waiting),
                            running=max(0, running), timestamp=stamp,
                            replica_id=replica.replica_id.unique_id)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """The shortest queue first; the rest (Serve's lowest queue length among them) next."""
        if not candidate_replicas:
            return []
        live = {r.replica_id for r in candidate_replicas}
        for rid in [r for r in self._sent if r not in live]:
            del self._sent[rid]
        best = shortest_queue([self.snapshot(r) for r in candidate_replicas])
        rest = candidate_replicas[:best] + candidate_replicas[best + 1:]
        return [[candidate_replicas[best]], rest] if rest else [[candidate_replicas[best]]]

    def on_send_request(self, replica_id: ReplicaID) -> None:
        """Count a request sent to ``replica_id`` (and keep Serve's queue-length cache)."""
        super().on_send_request(replica_id)
        self._sent.setdefault(replica_id, []).append([time.time(), math.inf])

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """A request to ``replica_id`` ended: its oldest send in flight is retired now."""
        for e in self._sent.get(replica_id, ()):
            if e[1] == math.inf:
                e[1] = time.time()
                return


def router_config(stats_period_s: float) -> RequestRouterConfig:
    """The model deployments' router: the shortest queue, on reports every ``stats_period_s``."""
    return RequestRouterConfig(request_router_class=ShortestQueueRouter,
                               request_routing_stats_period_s=stats_period_s,
                               request_routing_stats_timeout_s=max(1.0, 10 * stats_period_s))
