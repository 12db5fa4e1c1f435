"""The choice among a model's replicas, written once: the earliest predicted finish of the
request under each replica's queue (EDF order), the shortest queue on ties. The twin's pool and
the Serve request router both call :func:`earliest_finish`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.predict import snapshot_finish_in_s


def shortest_queue(snaps: Sequence[LoadSnapshot]) -> int:
    """Index of the replica with the fewest requests (waiting + running); the first on ties."""
    if not snaps:
        raise ValueError("no replica to choose from")
    return min(range(len(snaps)), key=lambda i: snaps[i].waiting + snaps[i].running)


def earliest_finish(snaps: Sequence[LoadSnapshot], deadline: float, now: float) -> int:
    """Index of the replica where a request due at ``deadline`` is predicted to end first
    (``replica.predict.snapshot_finish_in_s``: requests due before it, running ones, capacity,
    service-time EWMA); the fewest requests, then the first, on ties. A replica that has not
    answered yet (service time 0) is taken to serve as fast as its siblings do on average (one
    model, one engine: an unknown time is not an instant one); with no service time known
    anywhere this is the shortest queue."""
    if not snaps:
        raise ValueError("no replica to choose from")
    known = [s.service_s for s in snaps if s.service_s > 0]
    if known and len(known) < len(snaps):
        mean = sum(known) / len(known)
        snaps = [s if s.service_s > 0 else replace(s, service_s=mean) for s in snaps]
    left = deadline - now
    return min(range(len(snaps)), key=lambda i: (snapshot_finish_in_s(snaps[i], left, now),
                                                 snaps[i].waiting + snaps[i].running))
