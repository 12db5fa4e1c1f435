"""Warm start across pools: pool variants (subsets, slot counts) and behaviour cloning on
demonstrations from several pools into one pool-independent network."""

from __future__ import annotations

import pytest

from inframind_ray.core.types import LoadSnapshot, QueryInfo, SystemState
from inframind_ray.errors import ConfigError
from inframind_ray.learning.env import EnvConfig, TwinOrchestrationEnv
from inframind_ray.learning.warmstart import PoolVariant, WarmStart, collect, demo_pools, fit
from inframind_ray.policy.features import PLAN_ACTIONS
from inframind_ray.policy.learned import EXECUTOR_KEYS, PLANNER_KEYS, LearnedPolicy
from inframind_ray.pools.cards import build_pool_info


def test_pool_variants():
    v = PoolVariant(models=["llama-3.1-70b", "phi-3-mini"], max_num_seqs={"llama-3.1-70b": 12})
    cfg = v.build()
    assert [m.name for m in cfg.models] == ["llama-3.1-70b", "phi-3-mini"]
    assert cfg.models[0].max_num_seqs == 12
    with pytest.raises(ConfigError, match="no model 'gpt-9'"):
        PoolVariant(models=["gpt-9"]).build()
    pools = demo_pools(WarmStart(pools=[{}, {"models": ["yi-34b"]}]), "default", 0)
    assert [len(p.models) for p in pools] == [5, 1]
    assert [len(p.models) for p in demo_pools(WarmStart(), "default", 0)] == [5]


def test_sampled_pools_alone_take_nothing_from_the_env_pool():
    """A warm start on sampled pools only never demonstrates on the pool it is validated and
    benched on, nor on a held-out pool."""
    from inframind_ray.config import load_pool
    from inframind_ray.pools.sampler import is_heldout

    pools = demo_pools(WarmStart(sampled_pools=6), "default", 0)
    default = {m.name for m in load_pool("default").models}
    assert len(pools) == 6 and not any(is_heldout(p) for p in pools)
    assert all({m.name for m in p.models} != default for p in pools)
    named = demo_pools(WarmStart(pools=[{}], sampled_pools=2), "default", 0)
    assert len(named) == 3


def test_clones_a_teacher_from_several_pools(tmp_path):
    """Demos from a 2-model and a 3-model pool fit one network, which then decides on a pool
    of models it never saw together."""
    cfg = EnvConfig(queries_per_episode=6, rate_range=(60, 60))
    envs = [TwinOrchestrationEnv(cfg.model_dump(), pool=PoolVariant(models=m).build())
            for m in (["mixtral-8x7b", "llama-3.1-70b"],
                      ["phi-3-mini", "yi-34b", "llama-3.1-8b"])]
    demos = collect(envs, "priced-topology", 2, seed=0, lam=1.0, progress=False)
    rows = {int(o["row_mask"].sum()) for o, _, _ in demos["executor"]}
    assert rows == {2, 3} and len(demos["planner"]) == 12
    pol = LearnedPolicy(envs[0].info, hidden=16)
    assert fit(pol.executor, demos["executor"], EXECUTOR_KEYS, 30, 3e-3, 0) > 0.5
    assert 0 <= fit(pol.planner, demos["planner"], PLANNER_KEYS, 2, 1e-3, 0) <= 1
    other = build_pool_info(PoolVariant(models=["llama-3.1-70b", "phi-3-mini"]).build())
    pol.save(tmp_path / "ck")
    loaded = LearnedPolicy.load(tmp_path / "ck", other)
    state = SystemState(0.0, {m: LoadSnapshot(m) for m in other.names})
    q = QueryInfo("q00001", "x", 30.0, 0.0, task="gsm8k")
    assert loaded.plan(q, state) in PLAN_ACTIONS
