"""Shipped pools, memory shares on shared GPUs, the model catalog and the random-pool sampler."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from inframind_ray import data
from inframind_ray.config import load_pool, shipped_pools
from inframind_ray.errors import ConfigError
from inframind_ray.pools.catalog import catalog
from inframind_ray.pools.hardware import derive_hardware, kv_tokens
from inframind_ray.pools.sampler import (
    HELDOUT_GPUS,
    VLLM_DEFAULTS,
    SamplerRanges,
    heldout_model_sets,
    is_heldout,
    min_tensor_parallel,
    sample_pool,
)


def _arch(profile: str) -> str:
    return data.profiles()["profiles"][profile]["architecture"]


def test_shipped_pools_load_and_fit():
    """Every shipped pool (held-out ones included) validates and every model's weights leave a
    KV cache; the default keeps the constrained pool's models, names and order (the positional
    checkpoint loads on both) with vLLM's default slots."""
    names = shipped_pools()
    assert {"default", "constrained", "shared_gpu"} <= set(names)
    held = [n for n in names if n.startswith("heldout/")]
    assert len(held) >= 3
    for n in names:
        for m in load_pool(n).models:
            assert derive_hardware(m).kv_capacity >= 2048, (n, m.name)
    d, c = load_pool("default"), load_pool("constrained")
    assert [(m.name, m.recorded) for m in d.models] == [(m.name, m.recorded) for m in c.models]
    assert [m.max_num_seqs for m in c.models][-1] == 6
    assert all(m.max_num_seqs == VLLM_DEFAULTS[m.gpu][0] for m in d.models)
    assert d.engine.max_batched_tokens == VLLM_DEFAULTS["H100-80GB"][1]
    sizes = {len(load_pool(n).models) for n in held}
    assert len(sizes) == len(held)  # different sizes
    assert any(m.gpu in HELDOUT_GPUS for n in held for m in load_pool(n).models)


def test_pool_models_follow_the_catalog():
    """A model that a pool shares with the catalog replays the same records and stand-ins and
    runs on a profile of the same architecture; every catalog model covers every family."""
    cat = catalog()
    assert len(cat) >= 10
    for n in shipped_pools():
        for m in load_pool(n).models:
            e = cat[m.name]
            assert (m.recorded, m.stand_ins) == (e.recorded, dict(e.stand_ins)), (n, m.name)
            assert _arch(m.profile) == _arch(e.profile), (n, m.name)
    for e in cat.values():
        for fam in data.TASK_FAMILIES:
            assert e.recorded in data.task_outcomes(fam) or fam in dict(e.stand_ins)


def _write(tmp_path, body: str):
    p = tmp_path / "pool.yaml"
    p.write_text(body)
    return p


SHARED = """name: s
models:
  - {name: a, recorded: Meta-Llama-3_1-8B-Instruct, profile: llama3-8b@h100x1, gpu_ids: [0],
     gpu_memory_utilization: %s}
  - {name: b, recorded: Mistral-7B-Instruct-v0.2, profile: mistral-7b@h100x1, gpu_ids: [0],
     gpu_memory_utilization: 0.5, stand_ins: {gsm8k: gemma-2-2b-it, math: gemma-2-2b-it}}
"""


def test_memory_shares_over_one_gpu_are_refused(tmp_path):
    """Two engines on GPU 0 whose shares sum past 1.0: one clear line naming the GPU."""
    with pytest.raises(ConfigError) as e:
        load_pool(_write(tmp_path, SHARED % "0.6"))
    msg = str(e.value)
    assert "GPU 0" in msg and "a, b" in msg and "1.10 > 1.0" in msg and "\n" not in msg
    cfg = load_pool(_write(tmp_path, SHARED % "0.4"))
    assert [m.memory_share for m in cfg.models] == [0.4, 0.5]
    bad = SHARED.replace("gpu_ids: [0],\n     gpu_memory_utilization: %s", "gpu_ids: [0, 1]")
    with pytest.raises(ConfigError, match="gpu_ids lists 2 GPUs"):
        load_pool(_write(tmp_path, bad))


def test_kv_capacity_follows_the_memory_share():
    """A model's KV tokens (card and twin engine alike) are its share of the GPU less the
    activation reserve and weights; a smaller share gives a smaller cache."""
    from inframind_ray.twin.pool import build_engines

    shared, default = load_pool("shared_gpu"), load_pool("default")
    m = next(x for x in shared.models if x.name == "llama-3.1-8b")
    assert m.memory_share == 0.35
    kv = derive_hardware(m).kv_capacity
    assert kv == kv_tokens(m.recorded, m.gpu, 1, 0.35)
    assert kv < derive_hardware(next(x for x in default.models if x.name == m.name)).kv_capacity
    assert build_engines(shared)["llama-3.1-8b"].engines[0].kv_capacity == kv
    per_gpu: dict[int, float] = {}
    for x in shared.models:
        for g in x.gpu_ids:
            per_gpu[g] = per_gpu.get(g, 0) + x.memory_share
    assert len(per_gpu) == 4 and max(per_gpu.values()) <= 1.0


def test_sampler_is_deterministic_and_within_its_ranges():
    """Same generator seed, same pool; every draw a valid pool within the stated ranges whose
    models all fit their GPUs; a draw takes under 5 ms."""
    a = [sample_pool(np.random.default_rng(7)).model_dump() for _ in range(2)]
    assert a[0] == a[1]
    r = SamplerRanges()
    rng = np.random.default_rng(0)
    sizes = set()
    t0 = time.perf_counter()
    pools = [sample_pool(rng) for _ in range(300)]
    per_draw = (time.perf_counter() - t0) / 300
    assert per_draw < 0.005, per_draw
    for p in pools:
        sizes.add(len(p.models))
        assert r.min_models <= len(p.models) <= r.max_models
        assert len({m.gpu for m in p.models}) == 1 and p.models[0].gpu in r.gpus
        assert not is_heldout(p)
        for m in p.models:
            tp = min_tensor_parallel(m.recorded, m.gpu)
            assert m.gpus_per_replica in (tp, 2 * tp) and m.gpus_per_replica <= 8
            assert 1 <= m.replicas <= r.max_replicas_small
            assert m.max_num_seqs in (*r.slots, VLLM_DEFAULTS[m.gpu][0])
            assert m.max_num_seqs <= VLLM_DEFAULTS[m.gpu][0]
            assert derive_hardware(m).kv_capacity >= 2048
    assert sizes == set(range(1, 9))


def test_sampler_never_draws_a_heldout_model_set():
    """Pairs only: the held-out pair is one of 91 catalog pairs, so 2,000 unfiltered draws would
    hit it; the sampler never returns it (nor a held-out GPU type)."""
    held = heldout_model_sets()
    pair = next(s for s in held if len(s) == 2)
    rng = np.random.default_rng(1)
    ranges = SamplerRanges(min_models=2, max_models=2)
    drawn = [frozenset(m.name for m in sample_pool(rng, ranges).models) for _ in range(2000)]
    assert pair not in drawn and not held & set(drawn)
    assert len(set(drawn)) > 80  # the other pairs do come up
    with pytest.raises(ValueError, match="held out"):
        sample_pool(rng, SamplerRanges(gpus=HELDOUT_GPUS))


def test_moa_on_a_pool_larger_than_a_plan():
    """MoA on the seven-model held-out pool: the six most accurate models on the query's family
    propose (a plan holds at most six agents), the strongest aggregates."""
    from inframind_ray.core.topology import MAX_AGENTS, build_graph
    from inframind_ray.core.types import QueryInfo, StepContext, SystemState
    from inframind_ray.policy.baselines import MoA
    from inframind_ray.pools.cards import build_pool_info

    info = build_pool_info(load_pool("heldout/h100-seven"))
    pol = MoA(info)
    q = QueryInfo("q", "text", 60.0, 0.0, category="math", item_id=None, task="gsm8k")
    plan = pol.plan(q, SystemState(0.0, {}))
    assert plan.k == MAX_AGENTS < len(info.models)
    graph = build_graph(plan)
    chosen = {pol.decide(StepContext(q, plan, n, 1, 0.0, SystemState(0.0, {}))).model
              for n in graph.nodes if n.kind.value != "aggregator"}
    weakest = min(info.models, key=lambda m: m.expected_accuracy(q)).name
    assert len(chosen) == MAX_AGENTS and weakest not in chosen


def test_a_model_with_a_card_and_no_records(tmp_path):
    """A pool model with a card (``inframind calibrate``'s YAML) and no recorded answers: the
    twin replays its recorded model re-weighted to the card's accuracy per family (assumption
    CARD_OUTCOMES), keeps the dependence CARD_DEPENDENCE on that model's answers, leaves the
    families the card did not measure alone, runs in a bench cell, and a bad card fails at
    load in one line."""
    import yaml

    from inframind_ray import assumptions as A
    from inframind_ray.bench.runner import CellSpec, run_cell
    from inframind_ray.pools.cards import build_pool_info
    from inframind_ray.pools.recorded import recorded_model, recorded_task_model
    from inframind_ray.tasks.workload import WorkloadSpec

    card = {"model": "new-8b", "split": "val", "families": {
        "mmlu_pro": {"n": 40, "accuracy": 0.30}, "gsm8k": {"n": 40, "accuracy": 0.95},
        "humaneval": {"n": 20, "accuracy": 0.40}}}
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "new-8b.yaml").write_text(yaml.safe_dump(card))
    entry = {"name": "new-8b", "recorded": "Meta-Llama-3_1-8B-Instruct", "card":
             "cards/new-8b.yaml", "profile": "llama3-8b@h100x1", "max_num_seqs": 16}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump({"models": [entry]}))
    m = load_pool(tmp_path / "pool.yaml").models[0]
    assert m.card == str((tmp_path / "cards" / "new-8b.yaml").resolve())
    key = m.recorded_for("mmlu_pro")
    assert key.startswith("card:Meta-Llama-3_1-8B-Instruct:") and m.recorded_for("math") == \
        "Meta-Llama-3_1-8B-Instruct"  # the card did not measure MATH: replayed as recorded
    base, new = recorded_model("Meta-Llama-3_1-8B-Instruct"), recorded_model(key)
    sd = (0.3 * 0.7 / len(new.correct)) ** 0.5  # binomial spread of 12k seeded draws
    assert abs(float(new.correct.mean()) - 0.30) < 4 * sd  # the card's accuracy
    (tmp_path / "elsewhere").mkdir()  # the same card at another path replays the same answers
    (tmp_path / "elsewhere" / "new-8b.yaml").write_text(yaml.safe_dump(card))
    (tmp_path / "elsewhere" / "pool.yaml").write_text(yaml.safe_dump(
        {"models": [{**entry, "card": "new-8b.yaml"}]}))
    moved = load_pool(tmp_path / "elsewhere" / "pool.yaml").models[0].recorded_for("mmlu_pro")
    assert moved != key and (recorded_model(moved).correct == new.correct).all()
    k_w = new.correct[~base.correct].mean() / new.correct.mean()
    assert abs(k_w - A.CARD_DEPENDENCE) < 0.05  # right where the recorded model is wrong
    assert (new.pred[new.correct & ~base.correct] != base.pred[new.correct & ~base.correct]).all()
    g0 = recorded_task_model("gsm8k", "Meta-Llama-3_1-8B-Instruct")
    g1 = recorded_task_model("gsm8k", m.recorded_for("gsm8k"))
    assert g1.accuracy > g0.accuracy and abs(g1.accuracy - 0.95) < 0.03
    h1 = recorded_task_model("humaneval", m.recorded_for("humaneval"))
    assert abs(h1.accuracy - 0.40) < 0.06
    info = build_pool_info(load_pool(tmp_path / "pool.yaml"))  # what policies see
    assert abs(info.models[0].accuracy - 0.30) < 0.02
    assert abs(info.models[0].tasks["gsm8k"].accuracy - 0.95) < 0.03
    w = WorkloadSpec(60, 12, "poisson", "test", (60.0, 90.0), 0,
                     (("mmlu_pro", 0.5), ("gsm8k", 0.5)))
    res = run_cell(CellSpec(load_pool(tmp_path / "pool.yaml"), "always-strongest", w))
    assert res.summary["n_queries"] == 12 and res.summary["model_mix"] == {"new-8b": 1.0}

    for text, msg in (("families: {mmlu_pro: {accuracy: 1.5}}", "must be in [0, 1]"),
                      ("[1, 2]", "is not a model card"), ("families: {chess: {accuracy: 0.5}}",
                                                          "unknown task family 'chess'")):
        (tmp_path / "cards" / "bad.yaml").write_text(text)
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(
            {"models": [{**entry, "card": "cards/bad.yaml"}]}))
        from inframind_ray.model_card import card_accuracy
        card_accuracy.cache_clear()
        with pytest.raises(ConfigError, match=re.escape(msg)) as e:
            load_pool(tmp_path / "bad.yaml")
        assert "\n" not in str(e.value)
