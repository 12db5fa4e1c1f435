"""The choice among a model's replicas, written once: the earliest predicted finish of the
request under each replica's queue (EDF order), the shortest queue on ties. The twin's pool and
the Serve request router both call :func:`earliest_finish`."""

from __future__ import annotations

from collections.abc import Sequence

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
    service-time EWMA); the fewest requests, then the first, on ties. With no service time
    known anywhere this is the shortest queue."""
    if not snaps:
        raise ValueError("no replica to choose from")
    left = deadline - now
    return min(range(len(snaps)), key=lambda i: (snapshot_finish_in_s(snaps[i], left, now),
                                                 snaps[i].waiting + snaps[i].running))
