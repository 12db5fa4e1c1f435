"""The Serve request routers: the ingress's bound on queries in flight, and the choice among a
model's Serve replicas: the shared ``replica.choice.earliest_finish`` (the
request's predicted finish under each replica's EDF queue), the twin's own, as a Ray Serve
request router.

Each replica reports its load (its ``LoadSnapshot``'s waiting + running, the EDF slacks of its
queue, capacity and service-time EWMA, stamped) as Serve routing stats
(``ModelReplica.record_routing_stats``, every ``metrics_period_s``); the router adds the requests
it sent to a replica that the report cannot hold (sent after its stamp, or after the latest
arrival it reports: still in transit when it was taken) and still in flight, and takes off
those in the report it saw end after the stamp (a request's end retires its replica's oldest
send), so that requests
between two reports neither all join one queue nor avoid a queue that has just emptied.
Requests sent since the report count as waiting ahead of the new one (their deadlines are not
known here). Serve's own backpressure stays: the chosen replica is tried first, the others next.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.choice import earliest_finish


def routing_stats(snap: LoadSnapshot, last_arrival: float) -> dict[str, Any]:
    """What a replica reports to the router: its queue lengths, EDF slacks, capacity and
    service-time EWMA, when they were taken, and when its latest request arrived (epoch
    seconds; 0 before any)."""
    return {"waiting": snap.waiting, "running": snap.running, "timestamp": snap.timestamp,
            "waiting_slack_s": list(snap.waiting_slack_s), "capacity": snap.capacity,
            "service_s": snap.service_s, "last_arrival": last_arrival}


def request_deadline(pending: PendingRequest | None) -> float:
    """The deadline (epoch seconds) of a routed ``generate`` request; inf for anything else."""
    args = pending.args if pending is not None else ()
    return float(getattr(args[0], "deadline", math.inf)) if args else math.inf


class DeadlineRouter(FIFOMixin, RequestRouter):
    """Routes each request to the replica where it is predicted to end first."""

    queue_len_response_deadline_s = 0.5
    """How long Serve waits for the chosen replica's queue length before it tries the next
    rank (Serve's default 0.1 s, doubled per retry up to 1 s). A probe is one actor call; on
    the 2-core hosts this project is tested on it can take longer than 0.1 s, and the
    fallback then sends a request behind another replica's long call. Falling back to a
    replica predicted to finish later gains a deadline router nothing, so it waits longer for
    the best one's answer, within Serve's 1 s cap."""

    def initialize_state(self, **kwargs: object) -> None:
        """Per replica, [send time, end time (inf while in flight)] of this router's requests
        that the replica's last report may not show as they are now."""
        self._sent: dict[ReplicaID, list[list[float]]] = {}

    def snapshot(self, replica: RunningReplica) -> LoadSnapshot:
        """A replica's load as this router knows it: its last report, plus the requests sent to
        it since then and still in flight, less those in the report that have ended since."""
        stats = replica.routing_stats or {}
        stamp = float(stats.get("timestamp", 0.0))
        # a send can be in the report only if it arrived before the stamp: sent by then, and
        # no later than the latest arrival the replica saw (a loaded host's actor call can
        # take longer than the gap to the next report; CI, 2026-12-03 and 12-05)
        seen = min(stamp, float(stats.get("last_arrival", stamp)))
        sent = self._sent.get(replica.replica_id, [])
        sent[:] = [e for e in sent if e[1] > stamp]  # ended before the report: not in it
        fresh = sum(t > seen and end == math.inf for t, end in sent)
        retired = sum(t <= seen and stamp < end < math.inf for t, end in sent)
        waiting = int(stats.get("waiting", 0)) + fresh - retired
        running = int(stats.get("running", 0)) + min(0, waiting)
        slacks = tuple(stats.get("waiting_slack_s", ()))[:max(0, waiting)]
        return LoadSnapshot(replica.replica_id.deployment_id.name, waiting=max(0, waiting),
                            running=max(0, running), timestamp=stamp,
                            replica_id=replica.replica_id.unique_id, waiting_slack_s=slacks,
                            capacity=int(stats.get("capacity", 0)),
                            service_s=float(stats.get("service_s", 0.0)))

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """The earliest predicted finish first; the rest (Serve's lowest queue length among
        them) next."""
        if not candidate_replicas:
            return []
        if pending_request is not None:  # all replicas full: back off, do not spin
            pending_request.routing_context.should_backoff = True
        live = {r.replica_id for r in candidate_replicas}
        for rid in [r for r in self._sent if r not in live]:
            del self._sent[rid]
        best = earliest_finish([self.snapshot(r) for r in candidate_replicas],
                               request_deadline(pending_request), time.time())
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


BOUNDED_ROUTES = ("/v1/queries", "/v1/chat/completions")


class IngressRouter(FIFOMixin, RequestRouter):
    """The ingress's router, in each HTTP proxy: a query or chat goes to an ingress replica only
    while this router's requests in flight there are fewer than the bound the replica reports
    (``limit`` in its routing stats, ``serving.gate.IngressGate.limit``; ``start_limit``
    before its first report). Held requests wait in the proxy's queue, and past
    ``ingress_max_queued`` of them Serve answers 429 at once. Other routes (health, state,
    policies) are not held (but Serve's 429 counts them when the queue is full). With several
    proxies each counts only its own requests."""

    def initialize_state(self, start_limit: int | None = None, **kwargs: object) -> None:
        """This router's requests in flight, per replica; the bound before a report."""
        self._inflight: dict[ReplicaID, int] = {}
        self._start_limit = start_limit

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """The replicas under their bound, least loaded first; none (wait) when all are at it."""
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        route = pending_request.metadata.route if pending_request is not None else ""
        if not route.startswith(BOUNDED_ROUTES):
            return [candidate_replicas] if candidate_replicas else []
        under = [r for r in candidate_replicas
                 if self._inflight.get(r.replica_id, 0) < self.limit(r)]
        return [sorted(under, key=lambda r: self._inflight.get(r.replica_id, 0))] if under else []

    def limit(self, replica: RunningReplica) -> int:
        """An ingress replica's reported bound on queries in flight (``start_limit``, else its
        ``max_ongoing_requests``, until it reports)."""
        limit = (replica.routing_stats or {}).get("limit", self._start_limit)
        return int(limit) if limit is not None else replica.max_ongoing_requests

    def on_send_request(self, replica_id: ReplicaID) -> None:
        """Count a request sent to ``replica_id`` (and keep Serve's queue-length cache)."""
        super().on_send_request(replica_id)
        self._inflight[replica_id] = self._inflight.get(replica_id, 0) + 1

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """A request to ``replica_id`` ended."""
        if self._inflight.get(replica_id, 0) > 0:
            self._inflight[replica_id] -= 1

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """A dead replica's requests are no longer in flight."""
        super().on_replica_actor_died(replica_id)
        self._inflight.pop(replica_id, None)


def ingress_router_config(stats_period_s: float, start_limit: int) -> RequestRouterConfig:
    """The ingress deployment's router: the replica's bound (``start_limit`` before its first
    report), on reports every ``stats_period_s``."""
    return _config(IngressRouter, stats_period_s, start_limit=start_limit)


def router_config(stats_period_s: float) -> RequestRouterConfig:
    """The model deployments' router: the earliest predicted finish, on reports every
    ``stats_period_s``."""
    return _config(DeadlineRouter, stats_period_s)


def _config(cls: type[RequestRouter], stats_period_s: float, **kwargs: Any) -> RequestRouterConfig:
    """A router class on replica reports every ``stats_period_s`` (``kwargs`` to its state)."""
    return RequestRouterConfig(request_router_class=cls, request_router_kwargs=kwargs,
                               request_routing_stats_period_s=stats_period_s,
                               request_routing_stats_timeout_s=max(1.0, 10 * stats_period_s))
