"""The learned policy's networks: per-model rows of fixed shape for any pool of 1-8 models,
action masking, safetensors checkpoints that load on any pool, and that the (untrained) policy
runs inside the twin through the common interface."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch

from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind, Plan, Topology, build_graph
from inframind_ray.core.types import LoadSnapshot, StepContext, StepDecision, SystemState
from inframind_ray.errors import ConfigError
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.features import (
    EXEC_ROW,
    EXECUTOR_OBS,
    MAX_MODELS,
    PLAN_ACTIONS,
    PLANNER_OBS,
    FeatureBuilder,
)
from inframind_ray.policy.latency import congestion, latency_terms
from inframind_ray.policy.learned import (
    DEFAULT_CHECKPOINT,
    EXECUTOR_KEYS,
    PLANNER_KEYS,
    CheckpointError,
    LearnedPolicy,
)
from inframind_ray.policy.positional import V1_CHECKPOINT, PositionalPolicy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.prompts import extract_answer
from inframind_ray.tasks.workload import WorkloadSpec, make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import build_engines
from inframind_ray.twin.simloop import run_simulated


@pytest.fixture(scope="module")
def setup(pool):
    outcome = OutcomeModel({m.name: m.recorded for m in pool.models})
    info = build_pool_info(pool)
    queries = make_queries(WorkloadSpec(10, 8, seed=2))
    rng = np.random.default_rng(0)
    queries = [replace(q, embedding=rng.normal(size=384).astype(np.float32)) for q in queries]
    return pool, outcome, info, queries


def _state(info, now=0.0, unavailable=()):
    return SystemState(now, {m: LoadSnapshot(m, 1, 3, 5, 0.2, 0.5, 0.03, 4.0, now,
                                          available=m not in unavailable) for m in info.names})


def _pool_of(info, n):
    """A pool of n models: the default's, then renamed copies (different names, same cards)."""
    models = list(info.models) + [replace(m, name=f"{m.name}-b") for m in info.models]
    return replace(info, models=tuple(models[:n]))


def _ctx(q, info, topology=Topology.COT, **kw):
    plan = Plan.make(topology)
    return StepContext(q, plan, build_graph(plan).nodes[0], 1, 0.0, _state(info, **kw))


@pytest.mark.parametrize("n", [1, 3, 5, 8])
def test_fixed_shapes_and_padding_rows_masked(setup, n):
    """Every pool of 1-8 models gives the same shapes; padding rows are zero and masked."""
    _, _, info, queries = setup
    pool = _pool_of(info, n)
    f = FeatureBuilder(pool)
    po = f.planner(queries[0], _state(pool))
    eo = f.executor(_ctx(queries[0], pool, Topology.IO))
    assert {k: v.shape for k, v in po.items()} == {k: (d,) for k, d in PLANNER_OBS.items()}
    assert {k: v.shape for k, v in eo.items()} == {k: (d,) for k, d in EXECUTOR_OBS.items()}
    for o in (po, eo):
        assert o["row_mask"].tolist() == [1.0] * n + [0.0] * (MAX_MODELS - n)
        rows = o["rows"].reshape(MAX_MODELS, -1)
        assert not rows[n:].any() and rows[:n].any()
    assert eo["mask"].reshape(MAX_MODELS, 3)[:n].all() and not eo["mask"][n * 3:].any()
    pol = LearnedPolicy(pool, seed=n)
    logits, v = pol.executor(*(torch.as_tensor(np.stack([eo[k]] * 4)) for k in EXECUTOR_KEYS))
    assert logits.shape == (4, MAX_MODELS * 3) and v.shape == (4,)
    assert (logits[:, n * 3:] < -1e8).all()
    logits, v = pol.planner(*(torch.as_tensor(np.stack([po[k]] * 4)) for k in PLANNER_KEYS))
    assert logits.shape == (4, len(PLAN_ACTIONS)) and v.shape == (4,)
    assert pol.decide(_ctx(queries[0], pool)).model in pool.names


def test_too_many_models_refused(setup, tmp_path):
    _, _, info, _ = setup
    nine = replace(info, models=(*_pool_of(info, 8).models, replace(info.models[0], name="x")))
    with pytest.raises(ConfigError, match="pools of 1 to 8 models; this pool has 9"):
        FeatureBuilder(nine)
    LearnedPolicy(info).save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="pools of 1 to 8 models"):
        LearnedPolicy.load(tmp_path / "ck", nine)


def test_shapes_and_masks(setup):
    """Masked actions (a model down, a strategy the topology forbids) are never chosen."""
    _, _, info, queries = setup
    ctx = _ctx(queries[0], info, unavailable=("llama-3.1-70b",))
    for seed in range(8):  # random weights: whatever it prefers, masked actions never win
        d = LearnedPolicy(info, seed=seed).decide(ctx)
        assert d.strategy is not Strategy.FLASH and d.model != "llama-3.1-70b"


def test_price_list_matches_latency_terms(setup):
    """The rows' price and toll are policy.latency's KV-aware price list (the teacher's),
    computed per row: with a queue the engine runs what it runs now."""
    _, _, info, queries = setup
    state = SystemState(3.0, {m: LoadSnapshot(m, 2, 40 + i, 30, 0.5, 0.8, 0.03, 6.0, 2.5)
                              for i, m in enumerate(info.names)})
    plan = Plan.make(Topology.IO)
    ctx = StepContext(queries[1], plan, build_graph(plan).nodes[0], 2, 3.0, state)
    rows = FeatureBuilder(info).executor(ctx)["rows"].reshape(MAX_MODELS, EXEC_ROW)
    per_step = ctx.remaining_budget_s / 2
    for i, m in enumerate(info.models):
        ld = state.models[m.name]
        for j, s in enumerate(Strategy):
            service, wait = latency_terms(m, ld, ctx.prompt_tokens(s),
                                          m.call_tokens(s, False, ctx.query.task), "service",
                                          kv=True)
            price, toll = rows[i, EXEC_ROW - 15 + 5 * j + 3: EXEC_ROW - 15 + 5 * j + 5]
            assert price == pytest.approx(min((service + wait) / per_step, 5.0), rel=1e-4)
            cong = congestion(m, ld, kv=True)
            n = min(ld.running, 2 * m.max_num_seqs)  # a queue: what it runs now, at most slots
            assert cong == pytest.approx((ld.running + ld.waiting + 1 - n) / n)
            assert toll == pytest.approx(min(cong * service / 10, 10), rel=1e-4, abs=1e-6)


def test_one_checkpoint_any_pool(setup, tmp_path):
    """A checkpoint saved on pool A loads and decides on pool B (other models, other order);
    a model marked down or missing from the state is never chosen; reordering the pool keeps
    the choice; the network is the same whatever the pool."""
    _, _, info, queries = setup
    LearnedPolicy(info, seed=5, hidden=32).save(tmp_path / "ck")
    sub = replace(info, models=tuple(reversed(info.models[1:4])))
    for pool in (sub, _pool_of(info, 8), _pool_of(info, 1)):
        pol = LearnedPolicy.load(tmp_path / "ck", pool)
        assert pol.plan(queries[0], _state(pool)) in PLAN_ACTIONS
        assert pol.decide(_ctx(queries[0], pool)).model in pool.names
    a = LearnedPolicy.load(tmp_path / "ck", sub)
    b = LearnedPolicy.load(tmp_path / "ck", replace(sub, models=tuple(reversed(sub.models))))
    for q in queries:
        for topology in (Topology.IO, Topology.COT):
            da = a.decide(_ctx(q, sub, topology))
            db = b.decide(_ctx(q, b.pool, topology))
            assert (da.model, da.strategy) == (db.model, db.strategy)
            down = a.decide(_ctx(q, sub, topology, unavailable=(da.model,)))
            assert down.model != da.model
            gone = SystemState(0.0, {m: ld for m, ld in _state(sub).models.items()
                                     if m != da.model})
            plan = Plan.make(topology)
            ctx = StepContext(q, plan, build_graph(plan).nodes[0], 1, 0.0, gone)
            assert a.decide(ctx).model != da.model
    assert a.planner.state_dict().keys() == LearnedPolicy(info, hidden=32).planner.state_dict(
    ).keys()


def test_shipped_checkpoint_follows_load_on_a_pool_it_never_saw(setup):
    """The shipped checkpoint on three of the five models, in another order (a model set no
    training pool had): an idle 70B gets every step-by-step call; with 120 requests waiting
    at the 70B the calls go elsewhere; the 70B marked down is never chosen; the pool's order
    does not change a choice."""
    _, _, info, _ = setup
    keep = ("llama-3.1-70b", "llama-3.1-8b", "phi-3-mini")
    sub = replace(info, models=tuple(m for m in reversed(info.models) if m.name in keep))
    pols = [LearnedPolicy.load(DEFAULT_CHECKPOINT, p)
            for p in (sub, replace(sub, models=tuple(reversed(sub.models))))]
    queries = make_queries(WorkloadSpec(60, 10, split="val", seed=3,
                                        tasks=(("gsm8k", 0.5), ("mmlu_pro", 0.5))))
    plan = Plan.make(Topology.IO)

    def choose(pol, q, waiting, down=()):
        state = SystemState(0.0, {m: LoadSnapshot(m, 1, waiting if m == keep[0] else 0,
                                                  6 if m == keep[0] and waiting else 0, 0.3,
                                                  0.5, 0.03, 8.0, 0.0, available=m not in down)
                                  for m in sub.names})
        return pol.decide(StepContext(q, plan, build_graph(plan).nodes[0], 1, 0.0, state)).model

    for q in queries:
        idle, busy = (choose(pols[0], q, w) for w in (0, 120))
        assert idle == keep[0] and busy != keep[0]
        assert choose(pols[1], q, 0) == idle and choose(pols[1], q, 120) == busy
        assert choose(pols[0], q, 0, down=(keep[0],)) != keep[0]


def test_positional_checkpoint_refused_and_kept_as_v1(setup, tmp_path):
    """The previous positional checkpoint is refused in one line; policy inframind-v1 runs it
    on its own pool only."""
    _, _, info, queries = setup
    with pytest.raises(CheckpointError, match="positional v1 checkpoint") as e:
        LearnedPolicy.load(V1_CHECKPOINT, info)
    assert "\n" not in str(e.value)
    old = PositionalPolicy.load(V1_CHECKPOINT, info)
    assert old.decide(_ctx(queries[0], info)).model in info.names
    with pytest.raises(CheckpointError, match="trained for models"):
        PositionalPolicy.load(V1_CHECKPOINT, replace(info, models=info.models[:3]))


def test_checkpoint_round_trip_and_bad_checkpoints(setup, tmp_path):
    """safetensors + spec round-trip gives identical decisions; bad checkpoints say why."""
    _, _, info, queries = setup
    a = LearnedPolicy(info, seed=3)
    a.save(tmp_path / "ck")
    b = LearnedPolicy.load(tmp_path / "ck", info)
    for q in queries:
        assert a.plan(q, _state(info)) == b.plan(q, _state(info))
    with pytest.raises(CheckpointError, match="no spec.json"):
        LearnedPolicy.load(tmp_path / "missing", info)
    (tmp_path / "ck" / "policy.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(CheckpointError, match="corrupt"):
        LearnedPolicy.load(tmp_path / "ck", info)
    LearnedPolicy(info, hidden=16).save(tmp_path / "ck2")
    spec = tmp_path / "ck2" / "spec.json"
    spec.write_text(spec.read_text().replace('"hidden": 16', '"hidden": 32'))
    with pytest.raises(CheckpointError, match="weights do not fit"):
        LearnedPolicy.load(tmp_path / "ck2", info)


def test_runs_in_the_twin(setup):
    """The policy plans and routes real queries in the twin through the common interface."""
    pool, outcome, info, queries = setup
    pol = LearnedPolicy(info, seed=0)

    async def main():
        loop = asyncio.get_running_loop()
        engines = build_engines(pool)
        backend = TwinBackend(engines, outcome)
        state = lambda: SystemState(loop.time(), {m: r.load() for m, r in engines.items()})  # noqa: E731
        return await asyncio.gather(*(run_query(q, pol, backend, state) for q in queries))

    results, _ = run_simulated(main())
    assert len(results) == len(queries)
    assert all(r.steps and r.steps[-1].model in info.names for r in results)


def test_token_budget(setup, tmp_path):
    """A policy with a token budget caps its DeepThink calls below the serving cap, prices them
    with the capped length, keeps the setting through a checkpoint, and the twin cuts a call
    at the budget (a cut answer says nothing)."""
    _, outcome, info, queries = setup
    m = info["llama-3.1-70b"]
    cap = m.max_tokens[Strategy.DEEPTHINK]
    assert 0 < m.budget_tokens < cap
    assert m.budget_expected_tokens < m.expected_tokens[Strategy.DEEPTHINK]
    assert m.call_tokens(Strategy.DEEPTHINK, True) == m.budget_expected_tokens
    assert m.call_tokens(Strategy.CONCISE, True) == m.expected_tokens[Strategy.CONCISE]

    plan = Plan.make(Topology.COT)
    ctx = StepContext(queries[0], plan, build_graph(plan).nodes[0], 1, 0.0, _state(info))
    capped, free = LearnedPolicy(info, seed=0, token_budget=True), LearnedPolicy(info, seed=0)
    d, e = capped.decide(ctx), free.decide(ctx)  # same weights, same choice
    assert (d.model, d.strategy) == (e.model, e.strategy) and e.max_tokens is None
    if d.strategy is Strategy.DEEPTHINK:
        assert d.max_tokens == info[d.model].budget_tokens
    else:
        assert d.max_tokens is None
    # the price list sees the capped expectation
    assert not np.array_equal(capped.features.executor(ctx)["rows"],
                              free.features.executor(ctx)["rows"])

    capped.save(tmp_path / "ck")
    assert LearnedPolicy.load(tmp_path / "ck", info).token_budget
    spec = (tmp_path / "ck" / "spec.json")
    spec.write_text(spec.read_text().replace('"token_budget": true', '"x": 0'))
    assert not LearnedPolicy.load(tmp_path / "ck", info).token_budget  # older checkpoints
    LearnedPolicy(info, seed=0, token_budget="tail").save(tmp_path / "tail")
    assert LearnedPolicy.load(tmp_path / "tail", info).token_budget == "tail"
    spec = tmp_path / "tail" / "spec.json"
    spec.write_text(spec.read_text().replace('"token_budget": "tail"', '"token_budget": "all"'))
    with pytest.raises(CheckpointError, match="token_budget 'all' is not true, false or 'tail'"):
        LearnedPolicy.load(tmp_path / "tail", info)

    class TooLong(LearnedPolicy):
        def _decide(self, c):
            return StepDecision(m.name, Strategy.DEEPTHINK, cap + 1)

    with pytest.raises(ValueError, match="max_tokens"):
        TooLong(info).decide(ctx)

    # an item whose recorded 70B answer is longer than the budget: cut, no answer
    lengths = outcome.lengths(m.name)
    item = next(int(q) for q, n in zip(outcome.task.qids, lengths, strict=True)
                if n > m.budget_tokens)
    text, tokens = outcome.reply(item, m.name, Strategy.DEEPTHINK, NodeKind.SOLVER, [],
                                 m.budget_tokens)
    assert tokens == m.budget_tokens and extract_answer(text) is None
