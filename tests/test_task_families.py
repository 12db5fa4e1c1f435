"""The task families beside MMLU-Pro: items and splits, mixed workloads, the twin's replay of
recorded answers per family (stand-ins named by the pool), and its answers graded by the real
graders."""

from __future__ import annotations

import numpy as np
import pytest

from inframind_ray import data
from inframind_ray.config import ModelConfig, load_pool, validated
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.errors import ConfigError
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.registry import FAMILIES, family, parse_mix
from inframind_ray.tasks.workload import (
    WorkloadSpec,
    family_counts,
    make_queries,
    sample_items,
    sample_task_items,
)
from inframind_ray.twin.outcome import OutcomeModel

ITEM_FAMILIES = ("gsm8k", "math", "humaneval", "mbpp")


def test_parse_mix():
    assert parse_mix("mmlu_pro") == {"mmlu_pro": 1.0}
    assert parse_mix("gsm8k,math") == {"gsm8k": 0.5, "math": 0.5}
    mix = parse_mix("gsm8k=0.4,mmlu_pro=0.3,math,humaneval")
    assert mix["gsm8k"] == pytest.approx(0.4) and mix["math"] == pytest.approx(0.15)
    assert sum(mix.values()) == pytest.approx(1.0)
    assert parse_mix("gsm8k=2,math=2") == {"gsm8k": 0.5, "math": 0.5}
    for bad, field in (("gsm9k", "tasks"), ("gsm8k=x", "mix"), ("gsm8k=0", "mix"),
                       ("gsm8k,gsm8k", "tasks"), ("", "tasks"), ("gsm8k=1,math", "mix")):
        with pytest.raises(ConfigError) as e:
            parse_mix(bad)
        assert e.value.field == field


def test_splits_are_disjoint_and_replayable():
    for name in ITEM_FAMILIES:
        fam = family(name)
        split = {s: set(fam.split_ids(s).tolist()) for s in ("train", "val", "test")}
        assert all(split.values()), name
        assert not (split["train"] & split["test"]) and not (split["val"] & split["test"])
        # only items with records are drawn (code: 29 HumanEval and 89 MBPP tasks)
        recorded = set(fam.ids[fam.recorded].tolist())
        assert set().union(*split.values()) == recorded


def test_mixed_workload_draws_the_stated_mix():
    spec = WorkloadSpec(100, 200, seed=3, tasks=(("gsm8k", 0.4), ("mmlu_pro", 0.3),
                                                 ("math", 0.1), ("humaneval", 0.1),
                                                 ("mbpp", 0.1)))
    counts = family_counts(spec)
    assert counts == {"gsm8k": 80, "mmlu_pro": 60, "math": 20, "humaneval": 20, "mbpp": 20}
    items = sample_task_items(spec)
    assert len(items) == 200
    for t, n in counts.items():
        drawn = [i for f, i in items if f == t]
        assert len(drawn) == n
        assert set(drawn) <= set(family(t).split_ids("test").tolist())
    # the same items at every rate (paired comparison), other items with another seed
    assert sample_task_items(WorkloadSpec(300, 200, seed=3, tasks=spec.tasks)) == items
    assert sample_task_items(WorkloadSpec(100, 200, seed=4, tasks=spec.tasks)) != items
    qs = make_queries(spec)
    assert [(q.task, q.item_id) for q in qs] == items
    q = next(q for q in qs if q.task == "math")
    assert q.category == "math" and q.fewshot_tokens == 0 and q.embedding is not None
    # MMLU-Pro alone draws exactly as before
    mm = WorkloadSpec(100, 50, seed=3)
    assert [i for _, i in sample_task_items(mm)] == [int(x) for x in sample_items(mm)]


def test_unknown_task_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown task 'gsm9k'"):
        WorkloadSpec(10, 5, tasks=(("gsm9k", 1.0),)).validate()
    with pytest.raises(ValueError, match="unknown task"):
        family("gsm9k")
    with pytest.raises(KeyError, match="unknown humaneval item id 999"):
        family("humaneval").index(999)


def test_default_pool_names_stand_ins(pool):
    by = {m.name: m for m in pool.models}
    assert by["llama-3.1-70b"].recorded_for("gsm8k") == "Meta-Llama-3_1-70B-Instruct"
    assert by["phi-3-mini"].recorded_for("gsm8k") == "Phi-3.5-mini-instruct"
    assert by["phi-3-mini"].recorded_for("math") == "Phi-3-mini-4k-instruct"
    assert by["mixtral-8x7b"].recorded_for("gsm8k") == "Mixtral-8x7B-Instruct-v0.1"
    for m in pool.models:
        assert all(m.recorded_for(f) for f in ITEM_FAMILIES), m.name
    with pytest.raises(ConfigError, match="stand_ins"):
        validated(ModelConfig, {"name": "x", "recorded": "Yi-34B", "profile": "llama3-8b@h100x1",
                                "stand_ins": {"gsm8k": "No-Such-Model"}})


def test_model_cards_per_family(pool):
    info = build_pool_info(pool)
    big = info[info.strongest]
    assert big.name == "llama-3.1-70b"
    for f in FAMILIES:
        card = big.card(f)
        assert 0 < card.accuracy < 1 and card.max_tokens[Strategy.DEEPTHINK] > 0
    # train-split priors: GSM8K close to the top for the 8B, MATH far below
    small = info["llama-3.1-8b"]
    assert big.card("gsm8k").accuracy - small.card("gsm8k").accuracy < 0.12
    assert big.card("math").accuracy - small.card("math").accuracy > 0.15
    assert big.card("gsm8k").retention[Strategy.FLASH] < big.card("mmlu_pro").retention[
        Strategy.FLASH]


@pytest.fixture(scope="module")
def outcome():
    return OutcomeModel.for_models(load_pool("default").models)


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_deepthink_replays_the_recorded_answer(outcome, name):
    """A lone DeepThink agent is right exactly where the recorded greedy answer was."""
    fam = family(name)
    rec = data.task_outcomes(name)["Meta-Llama-3_1-70B-Instruct"]["correct"]
    ids = fam.split_ids("test")
    got = [outcome.would_be_correct(int(i), "llama-3.1-70b", Strategy.DEEPTHINK, name)
           for i in ids]
    want = [bool(rec[fam.index(int(i))]) for i in ids]
    assert got == want


def test_code_outcomes_draw_the_recorded_pass_rate(outcome):
    """Code: each sample passes with the recorded pass@1 (independent draws per sample)."""
    fam = family("mbpp")
    p = data.task_outcomes("mbpp")["Meta-Llama-3_1-70B-Instruct"]["pass_at_1"]
    ids = [int(i) for i in fam.ids[fam.recorded]]
    rep = outcome.family("mbpp")
    draws = np.array([[rep.sample("llama-3.1-70b", i, k)[0] for k in range(40)] for i in ids])
    expected = np.array([p[fam.index(i)] for i in ids])
    assert abs(draws.mean() - expected.mean()) < 0.03
    hard = expected < 0.2
    assert draws[hard].mean() < draws[~hard].mean()


@pytest.mark.parametrize("name", ITEM_FAMILIES)
def test_twin_answers_grade_as_the_twin_says(outcome, name):
    """The twin's texts go through the real grader (code: the sandbox) with the verdict the twin
    itself records: the correct response passes, every wrong one fails, and the extracted
    answer round-trips through ``render``."""
    fam = family(name)
    rep = outcome.family(name)
    ids = [int(i) for i in fam.split_ids("test")[:4]]
    for i in ids:
        right, wrong = fam.correct_text(i), fam.wrong_text(i, 7, "llama-3.1-70b")
        assert fam.grade(i, right) and rep.is_correct(i, fam.extract(right))
        assert not fam.grade(i, wrong) and not rep.is_correct(i, fam.extract(wrong))
        assert fam.extract(fam.render(fam.extract(wrong))) == fam.extract(wrong)
        text, tokens = outcome.reply(i, "llama-3.1-8b", Strategy.DEEPTHINK, NodeKind.SOLVER, (),
                                     10_000, 0, name)
        assert tokens > 0 and fam.grade(i, text) == rep.is_correct(i, fam.extract(text))


def test_voting_and_refiners_on_numeric_answers(outcome):
    """An aggregator takes the plurality of extracted answers; a pool without records of a
    family (and no stand-in) is refused with the fix named."""
    fam = family("gsm8k")
    i = int(fam.split_ids("test")[0])
    right = fam.extract(fam.correct_text(i))
    wrong = fam.extract(fam.wrong_text(i, 3, "x"))
    text, _ = outcome.reply(i, "phi-3-mini", Strategy.FLASH, NodeKind.AGGREGATOR,
                            (right, right, wrong), 10_000, 0, "gsm8k")
    assert fam.extract(text) == right
    lonely = OutcomeModel({"m": "Yi-34B"})
    with pytest.raises(ValueError, match="stand_ins"):
        lonely.family("gsm8k")


@pytest.mark.parametrize("name", FAMILIES)
def test_always_strongest_at_idle_matches_its_recorded_accuracy(pool, name):
    """At 10 req/min always-strongest's accuracy per family equals the recorded accuracy of its
    model (the 70B) on the test split, within sampling error (3 standard errors)."""
    from inframind_ray.bench.runner import CellSpec, run_cell

    fam = family(name)
    ids = fam.split_ids("test")
    n = min(len(ids), 300) if name != "mmlu_pro" else 300
    if name in ("humaneval", "mbpp"):
        n = 120  # few recorded test tasks: every one several times (fresh draws per query)
    res = run_cell(CellSpec(pool, "always-strongest",
                            WorkloadSpec(10, n, seed=0, tasks=((name, 1.0),))))
    got = res.summary["accuracy"]
    if name == "mmlu_pro":
        rec = data.outcomes()["Meta-Llama-3_1-70B-Instruct"]["correct"]
        want = float(np.mean([rec[fam.index(int(i))] for i in ids]))
    else:
        col = "pass_at_1" if name in ("humaneval", "mbpp") else "correct"
        rec = data.task_outcomes(name)["Meta-Llama-3_1-70B-Instruct"][col]
        want = float(np.mean([rec[fam.index(int(i))] for i in ids]))
    se = np.sqrt(want * (1 - want) / n) if n < len(ids) or name in ("humaneval", "mbpp") else 0
    assert res.summary["slo_attainment"] > 0.95
    assert abs(got - want) <= 3 * se + 1e-4, (name, got, want, n)  # summary: 4 decimals
