"""The load view: the latest snapshot of every replica, aggregated per model, with staleness,
availability and eviction of replicas that are gone. The same class serves the twin (loop clock)
and the orchestrator (wall clock)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, replace

from inframind_ray.core.clock import Clock
from inframind_ray.core.constants import STALE_AFTER_S, UNAVAILABLE_AFTER_S
from inframind_ray.core.types import LoadSnapshot, SystemState

EVICT_AFTER_STALE = 2.0
"""A replica silent for longer than this many ``stale_after_s`` is gone (see ``LoadView``)."""

Track = Callable[[str, float], AbstractContextManager[None]]
"""``LoadView.track``'s shape: counts a call to a model, due at a deadline, while it is out."""


def untracked(model: str, deadline: float) -> AbstractContextManager[None]:
    """A ``Track`` that counts nothing (a backend without a load view)."""
    return nullcontext()


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

    Calls the view's owner sent (``track``) and that no snapshot can show yet count on top of
    the snapshots: the dispatcher's own accounting, as Serve's router counts the requests it
    sent a replica before the replica reports them. Without it a burst routed within one
    metrics period sees an idle pool and sends every call to the same model. A call counts
    from its dispatch until it ends or until every fresh replica of its model has reported
    after the dispatch (then a snapshot shows it):
    in a free slot (``running``) while the model's capacity has room and nothing waits, else
    waiting with its deadline in the EDF slacks. With several replicas a call may count twice
    for up to one period (the replicas that report before the one that got it): a predicted
    finish errs late, not early.
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
        self._sent: dict[str, dict[int, tuple[float, float]]] = {m: {} for m in self.models}
        self._ids = itertools.count()

    @contextmanager
    def track(self, model: str, deadline: float) -> Iterator[None]:
        """Count a call sent to ``model`` (due at ``deadline``, on the view's clock) while the
        block runs (see the class docstring)."""
        sent, key = self._sent.get(model), next(self._ids)
        if sent is not None:
            sent[key] = (self.clock.now(), deadline)
        try:
            yield
        finally:
            if sent is not None:
                sent.pop(key, None)

    def set_models(self, models: Iterable[str]) -> None:
        """The pool changed: keep the replicas of models that stay, start empty for new ones,
        forget removed ones (their later snapshots are ignored)."""
        self.models = tuple(models)
        self._snaps = {m: self._snaps.get(m, {}) for m in self.models}
        self._received = {m: self._received.get(m, {}) for m in self.models}
        self._sent = {m: self._sent.get(m, {}) for m in self.models}

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
        agg = LoadSnapshot.aggregate(model, snaps, stamp,
                                     available=now - newest <= self.unavailable_after_s)
        return self._with_unseen(agg, snaps, now)

    def _with_unseen(self, agg: LoadSnapshot, snaps: list[LoadSnapshot],
                     now: float) -> LoadSnapshot:
        """``agg`` plus the tracked calls no snapshot shows yet: those sent after the oldest
        fresh replica's snapshot (every replica's when none is fresh)."""
        sent = self._sent[agg.model]
        if not sent:
            return agg
        fresh = [s.timestamp for s in snaps if now - s.timestamp <= self.stale_after_s]
        seen_at = min(fresh or [s.timestamp for s in snaps], default=-float("inf"))
        due = sorted(d for t, d in sent.values() if t > seen_at)
        if not due:
            return agg
        room = max(0, agg.capacity - agg.running) if agg.waiting == 0 else 0
        run, wait = due[:room], due[room:]  # EDF: the earliest due take the free slots
        slack = tuple(sorted((*agg.waiting_slack_s, *(d - agg.timestamp for d in wait))))
        return replace(agg, running=agg.running + len(run), waiting=agg.waiting + len(wait),
                       waiting_slack_s=slack)

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

