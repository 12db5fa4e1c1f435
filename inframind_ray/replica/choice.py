"""The choice among a model's replicas, written once: join the shortest queue."""

from __future__ import annotations

from collections.abc import Sequence

from inframind_ray.core.types import LoadSnapshot


def shortest_queue(snaps: Sequence[LoadSnapshot]) -> int:
    """Index of the replica with the fewest requests (waiting + running); the first on ties."""
    if not snaps:
        raise ValueError("no replica to choose from")
    return min(range(len(snaps)), key=lambda i: snaps[i].waiting + snaps[i].running)
