"""The learner's side of the live rollouts (serving/rollouts.py): read the Parquet files as
they appear, hand out whole episodes in batches, and acknowledge them together with the
learner's own state, so that a learner restart neither loses nor double-counts a rollout.

Exactly once, in the sense that matters: a rollout counts when the learner state it changed is
committed. ``Ledger.commit`` writes the acknowledged rollout ids and the learner's payload (its
counters, or the path of the weights it saved first) in ONE file, replaced atomically. A learner
killed before a commit loses the update and the batch's rollouts come again after the restart
(they were never acknowledged); one killed after it finds them acknowledged and skips them.
A rollout's unique ``rollout_id`` also drops a file read twice.

An episode is handed out once its rollout row and all its ``n_decisions`` decision rows are in;
``min_age_s`` holds it back that long after its query ended, so a client's ``POST
/v1/feedback`` can arrive first (the latest score wins; a later one is not seen by this
learner). ``max_age_s`` drops episodes older than that when they are read (off-policy data
past a stated age), counted in ``dropped_old``; an episode whose decision rows are still
missing ``incomplete_after_s`` after its query ended (the writer dropped them on a failing disk)
is dropped, counted in ``incomplete``. A file that cannot be read as Parquet (writers rename
whole files into place, so only a disk fault makes one) is skipped, counted in ``unreadable``,
and not read again.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

KINDS = ("decisions", "rollouts", "feedback")


@dataclass(frozen=True)
class Episode:
    """One query's rollout: its row, its decision rows in order, the client's latest score."""

    rollout: dict
    decisions: list[dict]
    feedback: float | None = None

    @property
    def rollout_id(self) -> str:
        return self.rollout["rollout_id"]


@dataclass(frozen=True)
class RolloutBatch:
    """Episodes handed out together; acknowledge them with ``Ledger.commit``."""

    batch_id: str
    episodes: list[Episode]

    @property
    def rollout_ids(self) -> list[str]:
        return [e.rollout_id for e in self.episodes]


class Ledger:
    """The learner's committed state: acknowledged rollout ids and a JSON payload, in one file
    (``path``) replaced atomically (temporary file, fsync, rename, fsync of the folder)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.acked: set[str] = set()
        self.payload: dict = {}
        self.commits = 0
        if self.path.is_file():
            doc = json.loads(self.path.read_text())
            self.acked = set(doc["acked"])
            self.payload = doc["payload"]
            self.commits = doc["commits"]

    def commit(self, batch: RolloutBatch, payload: dict) -> None:
        """Acknowledge ``batch`` together with the learner's new ``payload``."""
        acked = self.acked | set(batch.rollout_ids)
        doc = {"acked": sorted(acked), "payload": payload, "commits": self.commits + 1,
               "last_batch": batch.batch_id}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.acked, self.payload, self.commits = acked, payload, self.commits + 1


@dataclass
class RolloutReader:
    """Reads ``root`` (a serving ``records_dir``); see the module docstring."""

    root: Path
    acked: Iterable[str] = ()
    min_age_s: float = 0.0
    max_age_s: float | None = None
    incomplete_after_s: float = 600.0
    clock: Callable[[], float] = time.time
    _seen_files: set[str] = field(default_factory=set)
    _rollouts: dict[str, dict] = field(default_factory=dict)  # waiting to be handed out
    _decisions: dict[str, list[dict]] = field(default_factory=dict)
    _feedback: dict[str, tuple[float, float]] = field(default_factory=dict)  # id -> (at, score)
    _done: set[str] = field(default_factory=set)  # acknowledged or handed out
    counts: dict[str, int] = field(default_factory=lambda: {"duplicates": 0, "dropped_old": 0,
                                                            "incomplete": 0, "unreadable": 0})

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._done = set(self.acked)

    def poll(self) -> int:
        """Read the files written since the last poll (whole files only: writers rename them
        into place); returns how many."""
        new = 0
        for kind in KINDS:  # decisions before rollouts, as the writer flushes them
            for path in sorted(self.root.glob(f"{kind}-*.parquet")):
                if path.name in self._seen_files:
                    continue
                self._seen_files.add(path.name)
                try:
                    table = pq.read_table(path)
                except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
                    self.counts["unreadable"] += 1
                    continue
                new += 1
                for row in table.to_pylist():
                    self._take(kind, row)
        return new

    def _take(self, kind: str, row: dict) -> None:
        rid = row["rollout_id"]
        if kind == "feedback":
            at, _ = self._feedback.get(rid, (float("-inf"), 0.0))
            if row["at_epoch"] >= at:
                self._feedback[rid] = (row["at_epoch"], row["score"])
            return
        if rid in self._done:
            self.counts["duplicates"] += kind == "rollouts"
            return
        if kind == "decisions":
            rows = self._decisions.setdefault(rid, [])
            if all(d["decision_id"] != row["decision_id"] for d in rows):
                rows.append(row)
            return
        if rid in self._rollouts:
            self.counts["duplicates"] += 1
            return
        if self.max_age_s is not None and self.clock() - row["end_epoch"] > self.max_age_s:
            self.counts["dropped_old"] += 1
            self._done.add(rid)
            self._decisions.pop(rid, None)
            return
        self._rollouts[rid] = row

    def pending(self) -> int:
        """Episodes read and not handed out yet (incomplete or too young included)."""
        return len(self._rollouts)

    def ready(self) -> list[str]:
        """Rollout ids complete and old enough to hand out, in arrival order."""
        now = self.clock()
        out = []
        for rid, r in list(self._rollouts.items()):
            if len(self._decisions.get(rid, ())) != r["n_decisions"]:
                if now - r["end_epoch"] > self.incomplete_after_s:
                    del self._rollouts[rid]
                    self._decisions.pop(rid, None)
                    self._done.add(rid)
                    self.counts["incomplete"] += 1
            elif now - r["end_epoch"] >= self.min_age_s:
                out.append(rid)
        return out

    def next_batch(self, max_episodes: int) -> RolloutBatch | None:
        """Up to ``max_episodes`` ready episodes, never handed out before by this reader nor
        acknowledged; None when there are none (call ``poll`` for new files)."""
        ids = self.ready()[:max_episodes]
        if not ids:
            return None
        episodes = []
        for rid in ids:
            row = self._rollouts.pop(rid)
            decisions = sorted(self._decisions.pop(rid), key=lambda d: d["index"])
            score = self._feedback.get(rid)
            episodes.append(Episode(row, decisions, None if score is None else score[1]))
            self._done.add(rid)
        return RolloutBatch(uuid.uuid4().hex, episodes)
