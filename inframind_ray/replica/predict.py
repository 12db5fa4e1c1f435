"""When a new request would finish at a replica, written once (the rule on counts is
``core.finish``, which the policies' price list reads too): the admission rule of the replica
queue, the ingress and the replica choice all read it.

A replica runs up to ``capacity`` requests at once, each for about ``service_s`` seconds (the
replica's EWMA of engine time per answered request); while requests wait (in the replica queue
or the engine's own, as when the KV cache rather than ``max_num_seqs`` bounds the batch), it
runs as many as it is running now (:func:`concurrency`). A new request waits behind the requests
running and those the queues' order serves first (EDF: the ones due no later); slots free at
``concurrency / service_s`` per second, so it starts once ``running + ahead - concurrency + 1``
of them have freed, then takes ``service_s`` itself. Requests that arrive later but are due earlier
overtake it under EDF: the prediction cannot know them (it is a lower bound in that sense).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from inframind_ray.core.finish import concurrency, finish_in_s
from inframind_ray.core.types import LoadSnapshot

__all__ = ["concurrency", "fastest_finish_in_s", "finish_in_s", "snapshot_finish_in_s",
           "too_late"]


def snapshot_finish_in_s(snap: LoadSnapshot, deadline_in_s: float, now: float) -> float:
    """``finish_in_s`` on a replica's (or a model's aggregate) snapshot: its waiting requests
    due before the new one (``LoadSnapshot.waiting_ahead``: the engine's own waiting ones are
    all ahead), its running ones, its concurrency (capacity 1 when the snapshot does not say)
    and its service-time EWMA."""
    ahead = snap.waiting_ahead(deadline_in_s, now)
    conc = concurrency(max(1, snap.capacity), snap.running, snap.waiting)
    return finish_in_s(ahead, snap.running, conc, snap.service_s)


def too_late(finish_in: float, time_left_s: float, margin: float | None) -> bool:
    """The admission rule: refuse when the predicted finish exceeds the time left to the
    deadline by more than ``margin`` of it (0.5: predicted over 1.5x the time left); ``margin``
    None turns the rule off."""
    if margin is None or not math.isfinite(time_left_s):
        return False
    return finish_in > time_left_s * (1.0 + margin)


def fastest_finish_in_s(models: Mapping[str, LoadSnapshot], budget_s: float,
                        now: float) -> float | None:
    """The earliest predicted finish of one call due in ``budget_s`` over the available models'
    snapshots (what the ingress admits a query by: if not even this fits, no plan does); None
    when no model is available (nothing to predict from)."""
    fin = [snapshot_finish_in_s(s, budget_s, now) for s in models.values() if s.available]
    return min(fin) if fin else None
