"""The threadless, vectorised env: a sub-simulation driven from the env's thread gives the same
per-decision rewards as the same policy deciding in place (the workflow as the bench and the
warm start run it), sub-simulations are independent, and ``DecisionEnvRunner`` returns one
terminated episode per finished query with RLlib's sampling outputs."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
from ray.rllib.core.columns import Columns

from inframind_ray.core.topology import Plan
from inframind_ray.core.types import QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.learning.env import TwinOrchestrationEnv
from inframind_ray.learning.subsim import start_pool
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import plan_of
from inframind_ray.tasks.workload import make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.simloop import run_simulated

CFG = {"queries_per_episode": 30, "lam": 2.0, "tasks": "gsm8k=0.5,mmlu_pro=0.5",
       "rate_range": [200, 400], "history_fraction": 0.5, "metrics_periods": [0.0, 0.5],
       "congestion_toll": 0.05, "num_sims": 2}


def choose(obs: dict) -> int:
    """A deterministic action that depends on the whole observation (load included)."""
    valid = np.flatnonzero(obs["mask"] > 0)
    x = sum(float(np.abs(v).sum()) for k, v in obs.items() if k != "mask")
    return int(valid[int(x * 1e3) % len(valid)])


class ObsPolicy(Policy):
    """``choose`` on the env's own features, deciding in place."""

    name = "obs-policy"

    def __init__(self, env: TwinOrchestrationEnv) -> None:
        super().__init__(env.info)
        self.f, self.token_budget = env.features, env.cfg.token_budget

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return plan_of(choose(self.f.planner(query, state)))

    def _decide(self, ctx: StepContext) -> StepDecision:
        return StepDecision(*self.f.decision(choose(self.f.executor(ctx))))


def in_place(env: TwinOrchestrationEnv, sim: int) -> dict[str, float]:
    """Sub-simulation ``sim``'s episode with ObsPolicy deciding in place: reward per agent."""
    ep, policy = env.sims[sim].episode, ObsPolicy(env)

    async def main() -> list:
        loop = asyncio.get_running_loop()
        engines, state = start_pool(env.pool, env.info, ep)
        backend = TwinBackend(engines, env.outcome)
        tasks = []
        for q in make_queries(ep.workload):
            await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
            tasks.append(loop.create_task(run_query(replace(q, arrival_s=loop.time()), policy,
                                                    backend, state)))
        return list(await asyncio.gather(*tasks))

    out = {}
    for res in run_simulated(main())[0]:
        t, n = env.reward_terms(res), int(res.query.query_id[1:6])
        out[f"plan/{sim}/{n}"] = t.reward(None, env.cfg.lam)
        out |= {f"step/{sim}/{n}/{k}": t.reward(k, env.cfg.lam) for k in t.weight}
    return out


def test_vectorised_env_matches_deciding_in_place():
    """Each sub-simulation, driven step by step from the env's thread with every pending
    decision answered together, rewards every decision as the same policy deciding inside
    the simulation does (same seed, same actions); the two sub-simulations differ."""
    env = TwinOrchestrationEnv(CFG)
    try:
        obs, _ = env.reset(seed=7)
        rewards: dict[str, float] = {}
        widths = []
        while True:
            widths.append(len(env.pending))
            obs, rew, term, _, _ = env.step({a: choose(obs[a]) for a in env.pending})
            rewards |= rew
            if term["__all__"]:
                break
        assert max(widths) == 2  # both sub-simulations answered in one step
        for sim in (0, 1):
            want = in_place(env, sim)
            got = {a: r for a, r in rewards.items() if a.split("/")[1] == str(sim)}
            assert got.keys() == want.keys() and len(got) >= 60
            assert got == pytest.approx(want, abs=1e-12)
        assert env.sims[0].episode != env.sims[1].episode
    finally:
        env.close()


def test_decision_runner_episodes_per_query():
    """DecisionEnvRunner: one terminated episode per finished query, every decision with its
    sampled action (never masked), log-probability, logits and the env's infos."""
    import ray

    from inframind_ray.learning.train import build_algo
    from inframind_ray.learning.train_config import TrainConfig

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cfg = TrainConfig.model_validate({
            "env": {**CFG, "num_sims": 4}, "warm_start": None,
            "ppo": {"iterations": 1, "train_batch_size": 64, "minibatch_size": 32,
                    "num_epochs": 1}})
        algo = build_algo(cfg)
        try:
            runner = algo.env_runner_group.local_env_runner
            eps = runner.sample(num_timesteps=100, explore=True)
            assert sum(e.agent_steps() for e in eps) >= 100
            for ep in eps:
                assert ep.is_done and len(ep) == 1
                plans = [a for a in ep.agent_ids if a.startswith("plan/")]
                assert len(plans) == 1  # a query: its planner and its executed nodes
                for sa in ep.agent_episodes.values():
                    obs, a = sa.get_observations(0), int(sa.get_actions(0))
                    assert obs["mask"][a] > 0
                    assert np.isfinite(sa.get_extra_model_outputs(Columns.ACTION_LOGP, 0))
                    info = sa.get_infos(-1)
                    assert {"quality", "cost", "weight"} <= set(info)
            r = algo.train()
            assert r["env_runners"]["num_decisions_sampled_lifetime"] >= 164
        finally:
            algo.stop()
    finally:
        ray.shutdown()


def test_per_episode_pools_and_load_factors(tmp_path):
    """With a pool list each sub-simulation runs on a pool drawn from it (any model count: the
    per-model rows fit every pool of at most 8 models), a load range scales each episode's rate
    by its pool's capacity proxy, ``sampled`` draws through the real random-pool sampler (never
    a held-out model set), and a pool of 9 models fails in one line."""
    import yaml

    from inframind_ray.config import POOLS_DIR
    from inframind_ray.errors import ConfigError
    from inframind_ray.learning.pools_draw import capacity_rpm
    from inframind_ray.pools.sampler import is_heldout

    base = yaml.safe_load((POOLS_DIR / "constrained.yaml").read_text())
    wide = {**base, "name": "wide", "models": [{**m, "max_num_seqs": 4 * m["max_num_seqs"]}
                                               for m in base["models"][:3]]}
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(wide))
    cfg = {"pool": "constrained", "queries_per_episode": 5, "num_sims": 8,
           "load_range": [0.5, 0.5], "pools": ["constrained", str(tmp_path / "wide.yaml")]}
    env = TwinOrchestrationEnv(cfg)
    try:
        env.reset(seed=1)
        names = [s.pool.config.name for s in env.sims]
        assert set(names) == {"constrained", "wide"}
        mix = {"mmlu_pro": 1.0}
        for s, stats in zip(env.sims, env.episode_stats, strict=True):
            assert stats["pool"] == s.pool.config.name
            assert stats["rate_per_min"] == pytest.approx(0.5 * capacity_rpm(s.pool.info, mix))
        while env.pending:  # every sub-simulation runs its episode to the end on its pool
            env.step({a: _first(env, a) for a in env.pending})
        assert all(s.done for s in env.sims)
    finally:
        env.close()
    env = TwinOrchestrationEnv({**cfg, "pools": "sampled"})
    try:
        env.reset(seed=2)
        drawn = [s.pool.config for s in env.sims]
        assert len({tuple(m.name for m in p.models) for p in drawn}) > 1
        assert not any(is_heldout(p) for p in drawn)
        while env.pending:
            env.step({a: _first(env, a) for a in env.pending})
        assert all(s.done for s in env.sims)
    finally:
        env.close()
    big = {**base, "name": "nine", "models": [
        {**base["models"][i % 5], "name": f"m{i}"} for i in range(9)]}
    (tmp_path / "nine.yaml").write_text(yaml.safe_dump(big))
    with pytest.raises(ConfigError, match="1 to 8 models"):
        TwinOrchestrationEnv({**cfg, "pools": ["constrained", str(tmp_path / "nine.yaml")]})


def _first(env: TwinOrchestrationEnv, aid: str) -> int:
    """The first valid action of a pending decision."""
    sim = next(s for s in env.sims if s.pending is not None and s.pending[0] == aid)
    return int(np.flatnonzero(sim.pending[1]["mask"] > 0)[0])
