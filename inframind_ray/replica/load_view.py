"""The load view: the latest snapshot of every replica, aggregated per model, with staleness,
availability and eviction of replicas that are gone. The same class serves the twin (loop clock)
and the orchestrator (wall clock)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict

from inframind_ray.core.clock import Clock
from inframind_ray.core.constants import STALE_AFTER_S, UNAVAILABLE_AFTER_S
from inframind_ray.core.types import LoadSnapshot, SystemState

EVICT_AFTER_STALE = 2.0
"""A replica silent for longer than this many ``stale_after_s`` is gone (see ``LoadView``)."""


class LoadView:
    """Latest snapshot per (model, replica_id); per-model aggregates whose age policies see.

    A replica whose snapshot is older than ``stale_after_s`` is stale: it still counts (its last
    numbers are the best guess) but the model's timestamp is its oldest stale snapshot's, so the
    policy sees the age. A replica silent (nothing received) for longer than ``evict_after_s``
    (default ``EVICT_AFTER_STALE`` x ``stale_after_s``) while another replica of its model still
    reports within that time is gone (killed, restarted under a new id, scaled down): it is
    dropped, so its waiting requests, age and replica count no longer count, and the model is
    fresh again as soon as its live replicas are. A model none of whose replicas reports keeps
    its last snapshots (the age grows) and is unavailable once none is younger than
    ``unavailable_after_s`` (policies mask it). Snapshots of unknown models are ignored.
    """

    def __init__(self, models: Iterable[str], *, clock: Clock,
                 stale_after_s: float = STALE_AFTER_S,
                 unavailable_after_s: float = UNAVAILABLE_AFTER_S,
                 evict_after_s: float | None = None) -> None:
        self.models = tuple(models)
        self.clock = clock
        self.stale_after_s = stale_after_s
        self.unavailable_after_s = unavailable_after_s
        self.evict_after_s = (EVICT_AFTER_STALE * stale_after_s if evict_after_s is None
                              else evict_after_s)
        self._snaps: dict[str, dict[str, LoadSnapshot]] = {m: {} for m in self.models}
        self._received: dict[str, dict[str, float]] = {m: {} for m in self.models}

    def set_models(self, models: Iterable[str]) -> None:
        """The pool changed: keep the replicas of models that stay, start empty for new ones,
        forget removed ones (their later snapshots are ignored)."""
        self.models = tuple(models)
        self._snaps = {m: self._snaps.get(m, {}) for m in self.models}
        self._received = {m: self._received.get(m, {}) for m in self.models}

    def push(self, snap: LoadSnapshot) -> None:
        """Record a replica's snapshot."""
        if snap.model in self._snaps:
            self._snaps[snap.model][snap.replica_id] = snap
            self._received[snap.model][snap.replica_id] = self.clock.now()

    def replicas(self, model: str, now: float | None = None) -> list[LoadSnapshot]:
        """The model's replicas that count now (gone ones are evicted first)."""
        self._evict(model, self.clock.now() if now is None else now)
        return list(self._snaps[model].values())

    def _evict(self, model: str, now: float) -> None:
        received = self._received[model]
        if len(received) < 2:
            return
        gone = [r for r, t in received.items() if now - t > self.evict_after_s]
        if len(gone) < len(received):  # some replica still reports: the silent ones are gone
            for r in gone:
                del received[r], self._snaps[model][r]

    def load(self, model: str, now: float | None = None) -> LoadSnapshot:
        """Aggregate of one model's replicas (timestamp on the view's clock)."""
        now = self.clock.now() if now is None else now
        snaps = self.replicas(model, now)
        if not snaps:
            return LoadSnapshot.aggregate(model, (), 0.0)
        newest = max(s.timestamp for s in snaps)
        stale = any(now - s.timestamp > self.stale_after_s for s in snaps)
        stamp = min(s.timestamp for s in snaps) if stale else newest
        return LoadSnapshot.aggregate(model, snaps, stamp,
                                      available=now - newest <= self.unavailable_after_s)

    def system_state(self) -> SystemState:
        """Every model's load now."""
        now = self.clock.now()
        return SystemState(now, {m: self.load(m, now) for m in self.models})

    def describe(self) -> dict:
        """JSON view for ``GET /v1/state``."""
        now = self.clock.now()
        out = {}
        for m in self.models:
            ld = self.load(m, now)
            reps = self._snaps[m]
            out[m] = {
                **{k: v for k, v in asdict(ld).items()
                   if k not in ("model", "timestamp", "waiting_slack_s", "replica_id",
                                "node_id")},
                "age_s": round(now - ld.timestamp, 3) if reps else None,
                "stale": (not reps) or now - ld.timestamp > self.stale_after_s,
                "replica_nodes": sorted({s.node_id for s in reps.values()}),
                "replica_ids": sorted(reps),
            }
        return out
