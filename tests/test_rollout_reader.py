"""The rollout reader (no Ray): whole episodes with the client's latest score, a file read
twice counted once, age limits; and exactly once across a learner killed mid-batch."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from live_data import serve_queries, shipped_policy

from inframind_ray.config import RolloutConfig
from inframind_ray.learning.rollout_reader import Ledger, RolloutReader
from inframind_ray.serving.rollouts import RolloutRecorder

LEARNER = Path(__file__).parent / "rollout_learner.py"


@pytest.fixture(scope="module")
def served():
    """The shipped learned policy on the test pool."""
    return shipped_policy()


def test_whole_episodes_feedback_duplicates_and_age(served, tmp_path):
    """Episodes come whole and in order with the latest client score; a file copied in again
    adds nothing; min_age_s holds episodes back, max_age_s drops old ones, and episodes whose
    decisions never come are dropped after incomplete_after_s."""
    now = [time.time() + 10]
    rec = RolloutRecorder(tmp_path, RolloutConfig(flush_rows=10_000))
    ids = serve_queries(rec, served, 0, 4)
    rec.feedback("q1", 0.25)
    rec.feedback("q1", 0.75)
    rec.flush()
    for p in list(tmp_path.glob("[dr]*.parquet")):  # the same files again, under new names
        shutil.copy(p, p.with_name(p.name.replace(".parquet", "-again.parquet")))
    reader = RolloutReader(tmp_path, min_age_s=30, clock=lambda: now[0])
    assert reader.poll() == 5 and reader.counts["duplicates"] == 4
    assert reader.next_batch(10) is None  # not 30 s old yet
    now[0] += 30
    batch = reader.next_batch(10)
    assert batch.rollout_ids == ids and reader.next_batch(10) is None
    for e in batch.episodes:
        assert [d["index"] for d in e.decisions] == list(range(e.rollout["n_decisions"]))
        assert e.decisions[0]["kind"] == "plan" and e.rollout["quality"] in (0.0, 1.0)
    assert [e.feedback for e in batch.episodes] == [None, 0.75, None, None]
    old = RolloutReader(tmp_path, max_age_s=5, clock=lambda: now[0])
    old.poll()
    assert old.next_batch(10) is None and old.counts["dropped_old"] == 4
    lone = tmp_path / "lone"  # rollout rows whose decisions never came
    lone.mkdir()
    shutil.copy(next(tmp_path.glob("rollouts-*.parquet")), lone / "rollouts-1-1-00001.parquet")
    orphan = RolloutReader(lone, incomplete_after_s=60, clock=lambda: now[0])
    orphan.poll()
    assert orphan.next_batch(10) is None and orphan.pending() == 4
    now[0] += 60
    assert orphan.next_batch(10) is None and orphan.pending() == 0
    assert orphan.counts["incomplete"] == 4


def test_feedback_outlives_an_orchestrator_restart(served, tmp_path):
    """A recorder started on a records dir (an orchestrator restarted) takes feedback for the
    newest ``feedback_window`` queries already written there, and the reader gives each score
    to the right rollout; an older id or one never recorded is refused; a corrupt rollout file
    is skipped by both the recorder and the reader."""
    rec = RolloutRecorder(tmp_path, RolloutConfig(flush_rows=10_000))
    ids = serve_queries(rec, served, 0, 3) + serve_queries(rec, served, 3, 2)  # two files
    (tmp_path / "rollouts-9999999999-1-00099.parquet").write_bytes(b"not parquet")
    again = RolloutRecorder(tmp_path, RolloutConfig(flush_rows=10_000, feedback_window=4))
    assert again.counts["feedback_ids_restored"] == 4
    assert again.feedback("q0", 1.0) is None  # the fifth newest: past the window
    assert again.feedback("never", 1.0) is None
    assert again.feedback("q4", 0.5)["rollout_id"] == ids[4]
    assert again.feedback("q1", 0.25)["rollout_id"] == ids[1]  # in the older file
    again.flush()
    reader = RolloutReader(tmp_path, clock=lambda: time.time() + 10)  # the calls end at +0.5 s
    assert reader.poll() == 5 and reader.counts["unreadable"] == 1
    batch = reader.next_batch(10)
    assert batch.rollout_ids == ids
    assert [e.feedback for e in batch.episodes] == [None, 0.25, None, None, 0.5]
    assert RolloutRecorder(tmp_path / "new", RolloutConfig()).counts[
        "feedback_ids_restored"] == 0


def test_learner_killed_mid_batch_trains_each_rollout_once(served, tmp_path):
    """Rollouts stream in while a learner trains; it is killed (SIGKILL) between taking a batch
    and committing it, and restarted. In the end every rollout was trained on exactly once:
    none acknowledged was lost, the killed batch came again, none counted twice."""
    root, ledger, events, stop = (tmp_path / "rec", tmp_path / "ledger.json",
                                  tmp_path / "events.log", tmp_path / "stop")
    rec = RolloutRecorder(root, RolloutConfig(flush_rows=10_000))
    written = serve_queries(rec, served, 0, 6)

    def learner() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(LEARNER), str(root), str(ledger),
                                 str(events), str(stop)])

    def log() -> list[str]:
        return events.read_text().splitlines() if events.exists() else []

    proc = learner()
    try:
        end, i = time.time() + 60, 6
        while not (sum(x.startswith("committed") for x in log()) >= 2
                   and log()[-1].startswith("took")):
            assert time.time() < end and proc.poll() is None, log()
            written += serve_queries(rec, served, i, 3)  # the stream goes on
            i += 3
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # mid-batch: taken, not committed
        proc.wait(timeout=30)
        killed = log()[-1].split()[1:]
        assert not set(killed) & Ledger(ledger).acked
        proc = learner()
        written += serve_queries(rec, served, i, 5)
        stop.touch()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    final = Ledger(ledger)
    counts = final.payload["counts"]
    assert len(written) == len(set(written))
    assert final.acked == set(written) == set(counts)
    assert set(counts.values()) == {1}
    taken = [rid for x in log() if x.startswith("took") for rid in x.split()[1:]]
    assert all(taken.count(rid) == 2 for rid in killed)  # the killed batch came again, once


def test_exploring_queries_draw_from_the_softmax_and_record_its_logp(served):
    """``rollouts.explore_share``: a seeded hash of the query id picks about that share of the
    queries (the same id always alike); such a query's decisions are drawn from (1 - eps) x the
    network's softmax + eps x uniform over the valid actions, each recorded with its
    log-probability under that mixture (never a masked action); a greedy query takes the
    argmax with the softmax's log-probability."""
    import numpy as np
    import torch

    from inframind_ray.core.types import LoadSnapshot, SystemState
    from inframind_ray.policy.recording import RecordingPolicy
    from inframind_ray.serving.rollouts import explorer
    from inframind_ray.tasks.registry import family

    picked = [explorer(f"q{i}", 0.25, 0) is not None for i in range(4000)]
    assert 0.22 < np.mean(picked) < 0.28 and explorer("q1", 0.0, 0) is None
    a, b = explorer("q7", 1.0, 0), explorer("q7", 1.0, 0)
    assert a.random() == b.random() and explorer("q7", 1.0, 1).random() != a.random()

    pool, policy = served
    fam = family("mmlu_pro")
    now = time.time()
    state = SystemState(now, {m: LoadSnapshot(m, timestamp=now) for m in pool.names})
    greedy_off = explored_off = 0
    for i, item in enumerate(fam.split_ids("test")[:60]):
        q = fam.query(int(item), f"x{i}", 30.0, now)
        for rng in (None, np.random.default_rng(i)):
            got = []
            RecordingPolicy(policy, got.append, explore=rng, epsilon=0.3).plan(q, state)
            d = got[0]
            logits, _ = policy._forward("planner", d.obs)
            soft = torch.softmax(logits[0].double(), -1).numpy()
            valid = (logits[0] > -1e8).numpy()
            assert valid[d.action]
            want = soft[d.action] if rng is None else 0.7 * soft[d.action] + 0.3 / valid.sum()
            assert d.logp == pytest.approx(float(np.log(want)), abs=1e-5)
            off = d.action != int(logits[0].argmax())
            greedy_off += off and rng is None
            explored_off += off and rng is not None
    assert greedy_off == 0 and explored_off > 0
