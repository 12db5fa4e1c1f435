"""The learned policy's networks: shapes, action masking, safetensors checkpoints, and that the
(untrained) policy runs inside the twin through the common interface."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch

from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind, Plan, Topology, build_graph
from inframind_ray.core.types import LoadSnapshot, StepContext, StepDecision, SystemState
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.features import PLAN_ACTIONS, FeatureBuilder
from inframind_ray.policy.learned import CheckpointError, LearnedPolicy
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


def test_shapes_and_masks(setup):
    """Logit and value shapes; masked actions are never chosen."""
    _, _, info, queries = setup
    pol = LearnedPolicy(info, seed=1)
    f = FeatureBuilder(info)
    q = queries[0]
    o = f.planner(q, _state(info))
    logits, v = pol.planner(*(torch.as_tensor(np.stack([o[k]] * 4)) for k in ("emb", "z",
                                                                             "mask")))
    assert logits.shape == (4, len(PLAN_ACTIONS)) and v.shape == (4,)
    plan = Plan.make(Topology.COT)
    node = build_graph(plan).nodes[0]
    ctx = StepContext(q, plan, node, 1, 0.0, _state(info, unavailable=("llama-3.1-70b",)))
    o = f.executor(ctx)
    logits, v = pol.executor(*(torch.as_tensor(o[k])[None] for k in ("sem", "res", "mask")))
    assert logits.shape == (1, len(info.names) * 3) and v.shape == (1,)
    for seed in range(20):  # random weights: whatever it prefers, masked actions never win
        d = LearnedPolicy(info, seed=seed).decide(ctx)
        assert d.strategy is not Strategy.FLASH and d.model != "llama-3.1-70b"


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
    a.save(tmp_path / "ck2")
    other = replace(info, models=info.models[:3])
    with pytest.raises(CheckpointError, match="trained for models"):
        LearnedPolicy.load(tmp_path / "ck2", other)


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
    assert not np.array_equal(capped.features.executor(ctx)["res"],
                              free.features.executor(ctx)["res"])

    capped.save(tmp_path / "ck")
    assert LearnedPolicy.load(tmp_path / "ck", info).token_budget
    spec = (tmp_path / "ck" / "spec.json")
    spec.write_text(spec.read_text().replace('"token_budget": true', '"x": 0'))
    assert not LearnedPolicy.load(tmp_path / "ck", info).token_budget  # older checkpoints

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
