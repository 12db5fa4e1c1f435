"""The learned policy's networks: shapes, action masking, safetensors checkpoints, and that the
(untrained) policy runs inside the twin through the common interface."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch

from inframind_ray.policy.base import ModelLoad, StepContext, SystemState
from inframind_ray.policy.features import PLAN_ACTIONS, FeatureBuilder
from inframind_ray.policy.learned import CheckpointError, LearnedPolicy
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import build_engines, build_pool_info
from inframind_ray.twin.simloop import run_simulated
from inframind_ray.twin.workload import WorkloadSpec, make_queries
from inframind_ray.workflow.prompts import Strategy
from inframind_ray.workflow.runner import run_query
from inframind_ray.workflow.topology import Plan, Topology, build_graph


@pytest.fixture(scope="module")
def setup(pool):
    outcome = OutcomeModel({m.name: m.recorded for m in pool.models})
    info = build_pool_info(pool, outcome)
    queries = make_queries(WorkloadSpec(10, 8, seed=2), outcome)
    rng = np.random.default_rng(0)
    queries = [replace(q, embedding=rng.normal(size=384).astype(np.float32)) for q in queries]
    return pool, outcome, info, queries


def _state(info, now=0.0, unavailable=()):
    return SystemState(now, {m: ModelLoad(m, 1, 3, 5, 0.2, 0.5, 0.03, 4.0, now,
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
