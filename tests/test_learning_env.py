"""The RLlib multi-agent environment over the twin: RLlib's own checks, one reward per decision,
clean episode ends and resets mid-episode."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.utils.pre_checks.env import check_multiagent_environments

from inframind_ray.learning.env import EnvConfig, TwinOrchestrationEnv


@pytest.fixture(scope="module")
def env():
    e = TwinOrchestrationEnv({"queries_per_episode": 25, "lam": 2.0})
    yield e
    e.close()


def _play(env, seed: int):
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    acted, rewarded, infos = set(), {}, {}
    while True:
        aid = env._pending
        assert aid in obs and env.observation_spaces[aid].contains(obs[aid])
        a = int(rng.choice(np.flatnonzero(obs[aid]["mask"] > 0)))
        acted.add(aid)
        obs, rew, term, trunc, info = env.step({aid: a})
        for k, r in rew.items():
            assert k not in rewarded and term[k]
            rewarded[k] = r
            infos[k] = info[k]
        if term["__all__"]:
            return acted, rewarded, infos


def test_rllib_env_check(env):
    """RLlib's own MultiAgentEnv checks pass."""
    check_multiagent_environments(env)


def test_every_decision_gets_one_reward(env):
    """Each planner/executor decision is rewarded exactly once when its query ends."""
    acted, rewarded, infos = _play(env, seed=3)
    assert acted == set(rewarded) and env.agents == []
    assert sum(a.startswith("plan/") for a in acted) == 25
    lam = env.cfg.lam
    for aid, r in rewarded.items():
        i = infos[aid]
        assert -lam <= r <= 1.0
        assert r == pytest.approx(i["quality"] - lam * i["cost"] * i["weight"])
        assert 0 < i["weight"] <= 1.0
    assert 0.0 <= env.episode_stats["goodput"] <= 1.0


def test_counterfactual_baseline():
    """With the per-item baseline on, every reward is quality - baseline - lam * cost * w, where
    the baseline is whether the strongest model alone answers that item right (0 or 1, both
    seen); the policy's observations do not change."""
    e = TwinOrchestrationEnv({"queries_per_episode": 40, "lam": 2.0,
                              "counterfactual_baseline": True})
    try:
        _, rewarded, infos = _play(e, seed=4)
    finally:
        e.close()
    seen = set()
    for aid, r in rewarded.items():
        i = infos[aid]
        assert i["baseline"] in (0.0, 1.0)
        seen.add(i["baseline"])
        assert r == pytest.approx(i["quality"] - i["baseline"] - 2.0 * i["cost"] * i["weight"])
    assert seen == {0.0, 1.0}


def test_reset_mid_episode(env):
    """A reset while queries are in flight drains the old episode and starts a new one."""
    obs, _ = env.reset(seed=5)
    env.step({env._pending: int(np.flatnonzero(obs[env._pending]["mask"] > 0)[0])})
    obs, _ = env.reset(seed=6)
    assert list(obs) == [env._pending] and env._pending.startswith("plan/")


def test_config_is_validated():
    """Bad env config fails loudly with the field name."""
    with pytest.raises(ValueError, match="queries_per_episode"):
        EnvConfig.model_validate({"queries_per_episode": 0})
