"""Live rollouts: every decision the learned policy served, with what a learner needs, written
as Parquet batches beside the serving records (``records_dir``).

Three tables, append-only, each file written whole (a temporary name, then a rename):

- ``decisions-*.parquet``: one row per decision (the planner's, then one per agent step): the
  observation the network saw (``obs_*``, the arrays of ``policy/features.py``), the action, its
  log-probability and value, the policy version; for a step the chosen model's load when it was
  chosen (``load_*``) and the call's outcome (status, latency, TTFT, tokens).
- ``rollouts-*.parquet``: one row per query (episode): ``rollout_id``, the reward terms known at
  its end (``latency_cost`` always; ``quality`` when it was graded), status and load.
- ``feedback-*.parquet``: one row per ``POST /v1/feedback``: a client's score of a query.

A query's decision rows are written in the same flush as its rollout row, decisions first:
a reader takes decisions only of rollouts it has seen, so a crash between the two files loses
the query's rows, never half a query. ``rollout_id`` (and ``decision_id``) are unique, so a
reader that sees a file twice can drop the repeats.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from inframind_ray.config import RolloutConfig
from inframind_ray.core.types import QueryInfo
from inframind_ray.orchestration.runner import QueryResult
from inframind_ray.policy.recording import Decision
from inframind_ray.serving.canary import query_hash


def explorer(query_id: str, share: float, seed: int) -> np.random.Generator | None:
    """The generator an exploring query draws its decisions with, or None for a greedy one:
    a query explores when its seeded hash (apart from the canary's) falls below ``share``;
    the generator is seeded by the same hash, so a query id always draws alike."""
    if share <= 0:
        return None
    h = query_hash(f"explore:{seed}:{query_id}")
    return np.random.default_rng(h) if h / 2 ** 64 < share else None


_F = pa.float32()
_OBS = pa.list_(_F)
DECISIONS = pa.schema([
    ("decision_id", pa.string()), ("rollout_id", pa.string()), ("query_id", pa.string()),
    ("policy_version", pa.string()), ("index", pa.int32()), ("kind", pa.string()),
    ("node_id", pa.int32()), ("at_epoch", pa.float64()),
    ("obs_ctx", _OBS), ("obs_glob", _OBS), ("obs_rows", _OBS), ("obs_row_mask", _OBS),
    ("obs_mask", _OBS),
    ("action", pa.int32()), ("logp", pa.float32()), ("value", pa.float32()),
    ("explore_epsilon", pa.float32()),  # null: greedy; else drawn from the behaviour mix
    ("model", pa.string()), ("strategy", pa.string()),
    ("load_replicas", pa.int32()), ("load_waiting", pa.int32()), ("load_running", pa.int32()),
    ("load_kv_usage", _F), ("load_ttft_s", _F), ("load_e2e_s", _F), ("load_age_s", _F),
    ("call_status", pa.string()), ("call_latency_s", _F), ("call_ttft_s", _F),
    ("call_service_s", _F), ("prompt_tokens", pa.int32()), ("output_tokens", pa.int32()),
])
ROLLOUTS = pa.schema([
    ("rollout_id", pa.string()), ("query_id", pa.string()), ("policy_version", pa.string()),
    ("task", pa.string()), ("item_id", pa.int64()), ("arrival_epoch", pa.float64()),
    ("end_epoch", pa.float64()), ("budget_s", _F), ("latency_s", _F), ("status", pa.string()),
    ("within_budget", pa.bool_()), ("correct", pa.bool_()), ("quality", _F),
    ("latency_cost", _F), ("topology", pa.string()), ("k", pa.int32()),
    ("n_decisions", pa.int32()), ("n_calls", pa.int32()),
    ("inflight_at_arrival", pa.int32()), ("waiting_at_arrival", pa.int32()),
    ("running_at_arrival", pa.int32()),
])
FEEDBACK = pa.schema([
    ("feedback_id", pa.string()), ("rollout_id", pa.string()), ("query_id", pa.string()),
    ("score", _F), ("at_epoch", pa.float64()),
])
SCHEMAS = {"decisions": DECISIONS, "rollouts": ROLLOUTS, "feedback": FEEDBACK}
MAX_BUFFERED_FACTOR = 4  # rows held when writing fails, as a multiple of flush_rows


def written_rollouts(root: Path, n: int) -> Iterator[tuple[str, str]]:
    """(query id, rollout id) of the rollout rows written under ``root``, oldest first, from
    the newest files that hold at least ``n`` rows (files in the reader's order: by name, whose
    flush time leads). A file that cannot be read is skipped, as the learner's reader skips it."""
    tables, rows = [], 0
    for path in sorted(root.glob("rollouts-*.parquet"), reverse=True):
        if rows >= n:
            break
        try:
            t = pq.read_table(path, columns=["query_id", "rollout_id"])
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            continue
        tables.append(t)
        rows += t.num_rows
    for t in reversed(tables):
        yield from zip(t["query_id"].to_pylist(), t["rollout_id"].to_pylist(), strict=True)


def latency_cost(res: QueryResult) -> float:
    """The twin's lateness cost (learning/env.py ``query_terms``): ``min(1, latency/budget -
    1)`` for an answer, 1 for a query that was not answered."""
    if not res.status.ok:
        return 1.0
    return min(1.0, max(0.0, res.latency / res.query.budget_s - 1.0))


@dataclass
class Episode:
    """One query's rollout while it runs."""

    rollout_id: str
    query_id: str
    version: str
    arrival: float
    load_at_arrival: tuple[int, int, int]  # queries in flight, waiting and running calls
    decisions: list[Decision] = field(default_factory=list)
    at: list[float] = field(default_factory=list)


class RolloutRecorder:
    """Episodes of the queries in flight, bounded buffers of finished rows, the recent query ids
    that accept feedback (read back from ``root`` at start: feedback outlives a restart);
    ``clock`` gives epoch seconds."""

    def __init__(self, root: str | Path, cfg: RolloutConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.cfg = cfg
        self.clock = clock
        self.live: dict[str, Episode] = {}
        self.buffers: dict[str, list[dict]] = {k: [] for k in SCHEMAS}
        self.oldest: float | None = None  # when the oldest buffered row was added
        self.recent: OrderedDict[str, str] = OrderedDict()  # query id -> rollout id
        for query_id, rollout_id in written_rollouts(self.root, cfg.feedback_window):
            self._remember(query_id, rollout_id)  # a restart keeps taking their feedback
        self.counts = {"rollouts": 0, "decisions": 0, "feedback": 0, "dropped_rows": 0,
                       "not_recorded_duplicate_id": 0, "write_errors": 0,
                       "feedback_ids_restored": len(self.recent)}
        self.written: list[Path] = []
        self._part = 0

    # ------------------------------------------------------------------ episodes
    def start(self, query: QueryInfo, version: str,
              load: tuple[int, int, int]) -> Episode | None:
        """A new episode for ``query`` (None, and counted, when a query with the same id is
        already in flight: its decisions could not be told apart)."""
        if query.query_id in self.live:
            self.counts["not_recorded_duplicate_id"] += 1
            return None
        ep = Episode(uuid.uuid4().hex, query.query_id, version, query.arrival_s, load)
        self.live[query.query_id] = ep
        return ep

    def sink(self, ep: Episode) -> Callable[[Decision], None]:
        """The callback a ``RecordingPolicy`` reports the episode's decisions to."""

        def add(d: Decision) -> None:
            ep.decisions.append(d)
            ep.at.append(self.clock())

        return add

    def abandon(self, ep: Episode) -> None:
        """Forget an episode whose query failed before it had a result."""
        self.live.pop(ep.query_id, None)

    def finish(self, ep: Episode, res: QueryResult, correct: bool | None) -> None:
        """The episode's rows, with the reward terms known now, into the buffers."""
        self.live.pop(ep.query_id, None)
        q = res.query
        steps = {s.node_id: s for s in res.steps}
        for i, (d, at) in enumerate(zip(ep.decisions, ep.at, strict=True)):
            row = {"decision_id": f"{ep.rollout_id}:{i}", "rollout_id": ep.rollout_id,
                   "query_id": ep.query_id, "policy_version": ep.version, "index": i,
                   "kind": d.kind, "node_id": d.node_id, "at_epoch": at,
                   "obs_ctx": d.obs["emb" if d.kind == "plan" else "sem"],
                   "obs_glob": d.obs["glob"], "obs_rows": d.obs["rows"],
                   "obs_row_mask": d.obs["row_mask"], "obs_mask": d.obs["mask"],
                   "action": d.action, "logp": d.logp, "value": d.value,
                   "explore_epsilon": d.epsilon,
                   "model": d.model, "strategy": d.strategy}
            ld = d.state.models.get(d.model) if d.model else None
            if ld is not None:
                row |= {"load_replicas": ld.replicas, "load_waiting": ld.waiting,
                        "load_running": ld.running, "load_kv_usage": ld.kv_usage,
                        "load_ttft_s": ld.ttft_s, "load_e2e_s": ld.e2e_s,
                        "load_age_s": ld.age(d.state.now)}
            s = steps.get(d.node_id) if d.kind == "step" else None
            if s is not None:
                row |= {"call_status": s.status.api, "call_latency_s": s.end - s.start,
                        "call_ttft_s": None if s.first_token is None else s.first_token - s.start,
                        "call_service_s": s.service_s, "prompt_tokens": s.prompt_tokens,
                        "output_tokens": s.output_tokens}
            self._add("decisions", row)
        graded = correct is not None
        self._add("rollouts", {
            "rollout_id": ep.rollout_id, "query_id": ep.query_id, "policy_version": ep.version,
            "task": q.task, "item_id": q.item_id, "arrival_epoch": q.arrival_s,
            "end_epoch": res.end, "budget_s": q.budget_s, "latency_s": res.latency,
            "status": res.status.api, "within_budget": res.within_budget, "correct": correct,
            "quality": float(bool(correct) and res.within_budget) if graded else None,
            "latency_cost": latency_cost(res), "topology": res.plan.topology.value,
            "k": res.plan.k, "n_decisions": len(ep.decisions), "n_calls": len(res.steps),
            "inflight_at_arrival": ep.load_at_arrival[0],
            "waiting_at_arrival": ep.load_at_arrival[1],
            "running_at_arrival": ep.load_at_arrival[2]})
        self.counts["rollouts"] += 1
        self.counts["decisions"] += len(ep.decisions)
        self._remember(ep.query_id, ep.rollout_id)
        if self._buffered() >= self.cfg.flush_rows:
            self.flush()

    def _remember(self, query_id: str, rollout_id: str) -> None:
        """Index a recorded query for feedback (its latest rollout), the last
        ``feedback_window`` of them."""
        self.recent[query_id] = rollout_id
        self.recent.move_to_end(query_id)
        while len(self.recent) > self.cfg.feedback_window:
            self.recent.popitem(last=False)

    def feedback(self, query_id: str, score: float) -> dict | None:
        """A client's score of a recent query (None if the id is not among the last
        ``feedback_window`` recorded queries, those written before a restart included)."""
        rid = self.recent.get(query_id)
        if rid is None:
            return None
        fid = uuid.uuid4().hex
        self._add("feedback", {"feedback_id": fid, "rollout_id": rid, "query_id": query_id,
                               "score": score, "at_epoch": self.clock()})
        self.counts["feedback"] += 1
        return {"query_id": query_id, "rollout_id": rid, "feedback_id": fid, "score": score}

    # ------------------------------------------------------------------ buffers
    def _buffered(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def _add(self, kind: str, row: dict) -> None:
        if self.oldest is None:
            self.oldest = self.clock()
        self.buffers[kind].append(row)

    def due(self) -> bool:
        """Rows buffered for longer than ``flush_s``."""
        return self.oldest is not None and self.clock() - self.oldest >= self.cfg.flush_s

    def flush(self) -> list[Path]:
        """Write every non-empty buffer as one Parquet file (decisions, then rollouts, then
        feedback). A failed write stops the flush (no rollout row before its decisions) and
        keeps the rows for the next one, up to ``MAX_BUFFERED_FACTOR * flush_rows`` a table;
        past that the oldest are dropped and counted."""
        out = []
        for kind, schema in SCHEMAS.items():
            rows = self.buffers[kind]
            if not rows:
                continue
            path = self.root / (f"{kind}-{int(self.clock())}-{os.getpid()}-"
                                f"{self._part:05d}.parquet")
            tmp = path.with_name(f".{path.name}.tmp")
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
                os.replace(tmp, path)
            except OSError:
                self.counts["write_errors"] += 1
                cap = MAX_BUFFERED_FACTOR * self.cfg.flush_rows
                for kept in self.buffers.values():
                    if len(kept) > cap:
                        self.counts["dropped_rows"] += len(kept) - cap
                        del kept[:len(kept) - cap]
                break
            self._part += 1
            rows.clear()
            out.append(path)
        self.oldest = None if not self._buffered() else self.oldest
        self.written += out
        return out

    def describe(self) -> dict:
        """Counters and buffer sizes (``/v1/state``)."""
        return {"dir": str(self.root), "in_flight": len(self.live),
                "buffered_rows": self._buffered(), **self.counts}
