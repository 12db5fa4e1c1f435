"""Metrics plane: replica snapshots, aggregated per model in the orchestrator, with staleness."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from inframind_ray.core.types import ModelLoad, SystemState


@dataclass(frozen=True)
class ReplicaSnapshot:
    """What a replica pushes at least every ``metrics_period_s`` (timestamp: epoch seconds)."""

    model: str
    replica_id: str
    waiting: int  # replica EDF queue + engine waiting queue
    running: int
    kv_usage: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    num_preemptions: int
    timestamp: float
    node_id: str = ""
    waiting_slack_s: tuple[float, ...] = ()  # the replica EDF queue's earliest deadlines, s


class MetricsHub:
    """Latest snapshot per replica; per-model aggregates whose age the policy can see.

    A replica whose snapshot is older than ``stale_after_s`` is stale: it still counts (its last
    numbers are the best guess) but the model's timestamp is its oldest stale snapshot's, so the
    policy sees the age. A model with no snapshot younger than ``unavailable_after_s`` is marked
    unavailable (masked out by policies).
    """

    def __init__(self, models: Iterable[str], stale_after_s: float = 1.0,
                 unavailable_after_s: float = 10.0, clock: Callable[[], float] = time.time):
        self.models = tuple(models)
        self.stale_after_s = stale_after_s
        self.unavailable_after_s = unavailable_after_s
        self.clock = clock
        self._snaps: dict[str, dict[str, ReplicaSnapshot]] = {m: {} for m in self.models}
        self._received: dict[str, dict[str, float]] = {m: {} for m in self.models}

    def push(self, snap: ReplicaSnapshot) -> None:
        """Record a replica's snapshot (unknown models are ignored)."""
        if snap.model in self._snaps:
            self._snaps[snap.model][snap.replica_id] = snap
            self._received[snap.model][snap.replica_id] = self.clock()

    def load(self, model: str, now: float | None = None) -> ModelLoad:
        """Aggregate of one model's replicas (timestamp on the epoch clock)."""
        now = self.clock() if now is None else now
        snaps = list(self._snaps[model].values())
        if not snaps:
            return ModelLoad(model, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, available=False)
        newest = max(s.timestamp for s in snaps)
        fresh = [s for s in snaps if now - s.timestamp <= self.stale_after_s]
        stamp = min(s.timestamp for s in snaps) if len(fresh) < len(snaps) else newest
        return ModelLoad.from_replicas(model, snaps, stamp,
                                       available=now - newest <= self.unavailable_after_s)

    def system_state(self, loop_now: float) -> SystemState:
        """Loads with timestamps moved onto the caller's loop clock (``loop.time()``)."""
        now = self.clock()
        loads = {}
        for m in self.models:
            ld = self.load(m, now)
            loads[m] = ModelLoad(**{**asdict(ld), "timestamp": loop_now - (now - ld.timestamp)})
        return SystemState(loop_now, loads)

    def describe(self) -> dict:
        """JSON view for ``GET /v1/state``."""
        now = self.clock()
        out = {}
        for m in self.models:
            ld = self.load(m, now)
            reps = self._snaps[m]
            out[m] = {
                **{k: v for k, v in asdict(ld).items()
                   if k not in ("model", "timestamp", "waiting_slack_s")},
                "age_s": round(now - ld.timestamp, 3) if reps else None,
                "stale": (not reps) or now - ld.timestamp > self.stale_after_s,
                "replica_nodes": sorted({s.node_id for s in reps.values()}),
            }
        return out
