"""Recorded-outcome replay, the split, and arrival statistics."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import pytest
from scipy import stats

from inframind_ray import data
from inframind_ray.assumptions import TOKENS_PER_WORD
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.pools.recorded import recorded_model
from inframind_ray.tasks.mmlu_pro import mmlu_pro
from inframind_ray.tasks.workload import (
    WorkloadSpec,
    arrival_times,
    make_queries,
    sample_items,
    split_items,
)
from inframind_ray.twin.outcome import OutcomeModel, plurality

POOL = {"strong": "Meta-Llama-3_1-70B-Instruct", "small": "Phi-3-mini-4k-instruct"}


@pytest.fixture(scope="module")
def outcome():
    return OutcomeModel(POOL)


def test_replay_returns_exactly_the_recorded_answers(outcome):
    """DeepThink solver answers ARE the recorded letters and lengths, for every item."""
    t = pq.read_table(data.DATA / "mmlu_pro" / "outcomes.parquet")
    models = np.array(t.column("model").to_pylist())
    for pool_name, rec in POOL.items():
        sel = models == rec
        qids = t.column("question_id").to_numpy()[sel]
        preds = np.array(t.column("pred").to_pylist())[sel]
        words = t.column("gen_words").to_numpy()[sel]
        n_trunc = 0
        for qid, pred, w in zip(qids[::7], preds[::7], words[::7], strict=True):
            letter, tokens = outcome.respond(int(qid), pool_name, Strategy.DEEPTHINK,
                                             NodeKind.SOLVER)
            full = max(8, int(np.ceil(w * TOKENS_PER_WORD)))
            if full > outcome.max_tokens[pool_name][Strategy.DEEPTHINK]:
                n_trunc += 1
                assert letter is None
                continue
            assert letter == (pred or None)
            assert tokens == full
        assert n_trunc / len(qids[::7]) < 0.005


def test_recorded_accuracy_matches_summary(outcome):
    """The shipped outcomes reproduce the published per-model accuracy."""
    acc = {r: float(data.outcomes()[r]["correct"].mean()) for r in POOL.values()}
    assert acc["Meta-Llama-3_1-70B-Instruct"] == pytest.approx(0.6282, abs=1e-4)
    assert acc["Phi-3-mini-4k-instruct"] == pytest.approx(0.4148, abs=1e-4)


def test_strategies_follow_assumptions(outcome):
    """Flash keeps ~80 % of recorded-correct answers and never fixes a wrong one."""
    ids = split_items("val")[:1500]
    kept = fixed = n_correct = 0
    for qid in ids:
        pred, correct, _ = outcome.recorded("strong", int(qid))
        flash, tokens = outcome.strategy_answer(int(qid), "strong", Strategy.FLASH)
        assert tokens <= 12
        if correct:
            n_correct += 1
            kept += flash == pred
        else:
            fixed += outcome.is_correct(int(qid), flash)
    assert fixed == 0
    assert kept / n_correct == pytest.approx(0.80, abs=0.04)


def test_every_item_answers_under_every_strategy(outcome):
    """No item breaks a strategy: a one-option item (the train split has five) has no wrong
    option to lose a Flash or Concise answer to, so it keeps the recorded one."""
    q = data.questions()
    n_opts = np.array([len(o) for o in q["options"]])
    one = [int(x) for x in q["question_id"][n_opts == 1]]
    assert one, "the data has one-option items"
    for qid in one + [int(x) for x in q["question_id"][::97]]:
        for m in POOL:
            for s in Strategy:
                letter, _ = outcome.strategy_answer(qid, m, s)
                assert letter is None or len(letter) == 1
    for qid in one:
        pred, _, _ = outcome.recorded("strong", qid)
        assert all(outcome.strategy_answer(qid, "strong", s)[0] in (pred, None) for s in Strategy)


def test_fresh_samples_keep_accuracy_and_voting_gains_a_little(outcome):
    """Re-sampling diversity (assumptions SAMPLE_*): slot 0 is the recorded answer; slots >= 1
    keep the model's accuracy, agree with a correct recorded answer ~85 % of the time, and a
    3-sample plurality vote gains a few points on the 70B stand-in, 5 samples a little more."""
    from inframind_ray import assumptions as A

    ids = [int(x) for x in split_items("val")[:3000]]
    rec = np.array([outcome.recorded("strong", q)[1] for q in ids])
    slot0 = np.array([outcome.sample("strong", q, 0)[1] for q in ids])
    assert (slot0 == rec).all()
    votes = {k: [outcome.sample("strong", q, k)[0] for q in ids] for k in range(5)}
    for k in (1, 2, 4):
        ok = np.array([outcome.is_correct(q, x) for q, x in zip(ids, votes[k], strict=True)])
        assert ok.mean() == pytest.approx(rec.mean(), abs=0.025)
        assert ok[rec].mean() == pytest.approx(A.SAMPLE_KEEPS_CORRECT, abs=0.03)
        assert ok[~rec].mean() > 0.1  # a fresh sample can fix a recorded wrong answer
    assert votes[1] != votes[2]  # samples differ from one another, not only from slot 0

    def vote_acc(n: int) -> float:
        return float(np.mean([outcome.is_correct(q, plurality([votes[k][i] for k in range(n)]))
                              for i, q in enumerate(ids)]))

    gain3, gain5 = vote_acc(3) - rec.mean(), vote_acc(5) - rec.mean()
    assert 0.005 < gain3 < 0.05 and gain3 <= gain5 < 0.07, (gain3, gain5)
    # a solver in slot k answers from its own sample; the same slot always gives the same answer
    a = outcome.respond(ids[0], "strong", Strategy.DEEPTHINK, NodeKind.SOLVER, sample=3)
    assert a == outcome.respond(ids[0], "strong", Strategy.DEEPTHINK, NodeKind.SOLVER, sample=3)


def test_aggregator_plurality():
    """Aggregator ties go to its own answer, else the earliest."""
    assert plurality(["A", "B", "B"]) == "B"
    assert plurality(["A", "B"], prefer="B") == "B"
    assert plurality(["A", "B"]) == "A"
    assert plurality([]) is None


def test_split_is_fixed_disjoint_and_complete():
    """Splits partition the items by the written-down hash rule, 60/20/20."""
    q = data.questions()
    for qid, split in zip(q["question_id"][::50], q["split"][::50], strict=True):
        h = int(hashlib.sha256(f"inframind-mmlu-pro-v1:{qid}".encode()).hexdigest(), 16) % 100
        assert split == ("train" if h < 60 else "val" if h < 80 else "test")
    sets = [set(split_items(s).tolist()) for s in ("train", "val", "test")]
    assert sum(len(s) for s in sets) == len(q["question_id"])
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert len(sets[2]) / len(q["question_id"]) == pytest.approx(0.2, abs=0.01)


def test_workload_never_leaks_and_priors_use_train_only(outcome):
    """Bench queries come from the test split only; policy priors from train only."""
    test_ids = set(split_items("test").tolist())
    spec = WorkloadSpec(100, 500, split="test", seed=3)
    assert set(sample_items(spec).tolist()) <= test_ids
    qs = make_queries(spec)
    assert all(q.item_id in test_ids for q in qs)
    train = mmlu_pro().splits == "train"
    acc = recorded_model(POOL["strong"]).accuracy
    assert acc == pytest.approx(data.outcomes()[POOL["strong"]]["correct"][train].mean())


def test_poisson_interarrivals():
    """Poisson arrivals: exponential gaps with the requested mean (KS test), CV ~ 1."""
    spec = WorkloadSpec(rate_per_min=120, n_queries=20_000, seed=1)
    gaps = np.diff(np.concatenate([[0.0], arrival_times(spec)]))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert stats.kstest(gaps, "expon", args=(0, 0.5)).pvalue > 0.01


def test_trace_replay_rate_and_burstiness():
    """Trace replay keeps the trace's burstiness and hits the requested mean rate."""
    spec = WorkloadSpec(rate_per_min=60, n_queries=5000, arrivals="trace:azure_conv", seed=0)
    t = arrival_times(spec)
    gaps = np.diff(t)
    assert len(t) / t[-1] * 60 == pytest.approx(60, rel=0.15)
    assert gaps.std() / gaps.mean() > 1.0  # burstier than Poisson
