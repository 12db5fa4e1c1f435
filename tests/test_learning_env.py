"""The RLlib multi-agent environment over the twin: RLlib's own checks, one reward per decision,
clean episode ends and resets mid-episode."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.utils.pre_checks.env import check_multiagent_environments

from inframind_ray.learning.env import TOLL_CAP, EnvConfig, SlackDensity, TwinOrchestrationEnv
from inframind_ray.policy.features import MAX_MODELS, PLAN_ROW


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
        actions = {}
        for aid in env.pending:
            assert aid in obs and env.observation_spaces[aid].contains(obs[aid])
            actions[aid] = int(rng.choice(np.flatnonzero(obs[aid]["mask"] > 0)))
            acted.add(aid)
        obs, rew, term, trunc, info = env.step(actions)
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
    assert 0.0 <= env.episode_stats[0]["goodput"] <= 1.0


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
    (aid,) = env.pending
    env.step({aid: int(np.flatnonzero(obs[aid]["mask"] > 0)[0])})
    obs, _ = env.reset(seed=6)
    assert list(obs) == env.pending and env.pending[0].startswith("plan/")


def test_config_is_validated():
    """Bad env config fails loudly with the field name."""
    with pytest.raises(ValueError, match="queries_per_episode"):
        EnvConfig.model_validate({"queries_per_episode": 0})


def test_episodes_randomise_metric_age_and_pool_history():
    """Per episode the env draws a metrics period and whether the pool has a history; with a
    history, models start with past latencies that the policy's features show, and with a
    period, snapshots age between refreshes."""
    e = TwinOrchestrationEnv({"queries_per_episode": 5, "metrics_periods": [0.0, 2.0],
                              "history_fraction": 0.5})
    rng = np.random.default_rng(0)
    eps = [e.sample_episode(rng) for _ in range(60)]
    assert {ep.metrics_period_s for ep in eps} == {0.0, 2.0}
    assert 10 < sum(ep.history_seed is not None for ep in eps) < 50
    fresh = TwinOrchestrationEnv({"queries_per_episode": 5})
    assert all(fresh.sample_episode(rng).history_seed is None for _ in range(20))

    def first_planner_obs(history: bool) -> np.ndarray:
        e.cfg = EnvConfig.model_validate({"queries_per_episode": 5,
                                          "history_fraction": float(history)})
        obs, _ = e.reset(seed=3)
        return obs[e.pending[0]]["rows"]

    e2e = lambda rows: rows.reshape(MAX_MODELS, PLAN_ROW)[:len(e.info.models), 4]  # noqa: E731
    assert not e2e(first_planner_obs(False)).any()  # a fresh pool: nothing served yet
    assert e2e(first_planner_obs(True)).any()
    e.close()


def _tolled_play(config: dict, seed: int) -> tuple[dict, dict]:
    """Play one episode; check every reward is ``quality - lam * cost * w - toll``, a call's
    toll at most ``TOLL_CAP`` and a planner's toll its query's calls' sum."""
    e = TwinOrchestrationEnv(config)
    try:
        _, rewarded, infos = _play(e, seed=seed)
    finally:
        e.close()
    step_tolls: dict[str, float] = {}
    for aid, r in rewarded.items():
        i = infos[aid]
        assert r == pytest.approx(i["quality"] - e.cfg.lam * i["cost"] * i["weight"] - i["toll"])
        if aid.startswith("step/"):
            assert 0.0 <= i["toll"] <= TOLL_CAP
            step_tolls[_query(aid)] = step_tolls.get(_query(aid), 0.0) + i["toll"]
    for aid in rewarded:
        if aid.startswith("plan/"):
            assert infos[aid]["toll"] == pytest.approx(step_tolls.get(_query(aid), 0.0))
    return rewarded, infos


def test_congestion_toll():
    """With a toll, a call dispatched to a model with no free slot pays toll x the seconds it
    held a slot (capped), calls to a model with a free slot pay nothing, and the planner pays
    its query's calls' tolls: reward = quality - lam * cost * w - toll."""
    rewarded, infos = _tolled_play({"pool": "constrained",  # its 6-slot 70B runs out of slots
                                    "queries_per_episode": 150, "lam": 2.0,
                                    "congestion_toll": 0.04, "rate_range": [600, 600],
                                    "trace_fraction": 0.0}, seed=2)
    tolled = [a for a in rewarded if a.startswith("step/") and infos[a]["toll"] > 0]
    free = [a for a in rewarded if a.startswith("step/") and infos[a]["toll"] == 0]
    assert tolled and free  # a random policy at 600 req/min saturates some models, not all


def test_delay_price_charges_what_a_call_costs_the_requests_beside_it():
    """``delay_price``: every call pays price x the seconds it added to the requests running
    beside it, at any load (the pool here never runs out of slots): more at 600 req/min than at
    20, and the planner pays its query's calls' tolls."""
    mean_step_toll = {}
    for rate in (20, 600):
        rewarded, infos = _tolled_play({"pool": "default", "queries_per_episode": 60,
                                        "lam": 1.0, "delay_price": 0.01,
                                        "rate_range": [rate, rate], "trace_fraction": 0.0},
                                       seed=4)
        mean_step_toll[rate] = np.mean([infos[a]["toll"] for a in rewarded
                                        if a.startswith("step/")])
    assert 0.0 < mean_step_toll[20] < mean_step_toll[600] / 3


def test_slack_density_prices_a_delay_by_the_answers_near_their_deadline():
    """The measured delay price starts at its prior and moves to the density at zero of the
    right, in-budget answers' slack: down where they finish far from their deadline, up where
    many finish close to it; wrong or late answers count as queries, not as near ones."""
    far, near = SlackDensity(0.0025, 2.0), SlackDensity(0.0025, 2.0)
    assert far.price() == near.price() == 0.0025
    for i in range(200):
        far.observe(30.0, 1.0)
        near.observe(0.5 if i % 4 == 0 else 30.0, 1.0)
    assert far.price() < 0.0025 * 0.25
    assert near.price() == pytest.approx((50 * 0.0025 + 50 / 2.0) / 250)  # 1/4 near: 0.125/s
    wrong = SlackDensity(0.0025, 2.0)
    for _ in range(200):
        wrong.observe(0.5, 0.0)  # near its deadline but wrong
        wrong.observe(-1.0, 0.0)  # late
    assert wrong.price() < far.price()


def test_measured_delay_price_falls_at_light_load_and_rises_near_deadlines():
    """``delay_price_window_s``: the same play (same actions, so the same calls and delays)
    pays less than the fixed price where answers finish far from their deadlines, and more
    where tight budgets put many close to them."""
    def tolls(cfg: dict, window: float) -> dict[str, float]:
        rewarded, infos = _tolled_play({**cfg, "lam": 1.0, "delay_price": 0.0025,
                                        "delay_price_window_s": window,
                                        "trace_fraction": 0.0}, seed=4)
        return {a: infos[a]["toll"] for a in rewarded if a.startswith("plan/")}

    light = {"pool": "default", "queries_per_episode": 40, "rate_range": [20, 20]}
    tight = {"pool": "constrained", "queries_per_episode": 60, "rate_range": [600, 600],
             "budget_ranges": [[4, 8]]}
    for cfg, below in ((light, True), (tight, False)):
        fixed, measured = tolls(cfg, 0.0), tolls(cfg, 2.0)
        paid = [a for a in fixed if fixed[a] > 0]
        assert paid and fixed.keys() == measured.keys()
        ratio = np.mean([measured[a] / fixed[a] for a in paid])
        assert (ratio < 0.9) if below else (ratio > 1.5), ratio


def _query(aid: str) -> str:
    """``<sim>/<query>`` of an agent id."""
    return "/".join(aid.split("/")[1:3])


def test_budget_free_episodes_count_late_right_answers_as_accuracy_not_quality():
    """``deadlines: false``: nothing is shed or aborted, so every query ends answered; a late
    right answer has ``correct`` 1 but quality 0 (the accuracy floor's measure differs from
    goodput), and with deadlines the two coincide (a late call is aborted)."""
    hot = {"pool": "constrained", "queries_per_episode": 30, "rate_range": [600, 600],
           "budget_ranges": [[4, 8]], "trace_fraction": 0.0}
    seen = {}
    for deadlines in (False, True):
        e = TwinOrchestrationEnv({**hot, "deadlines": deadlines})
        try:
            _, _, infos = _play(e, seed=3)
        finally:
            e.close()
        plans = [i for a, i in infos.items() if a.startswith("plan/")]
        assert plans and all(i["correct"] >= i["quality"] for i in plans)
        seen[deadlines] = plans
    late_right = [i for i in seen[False] if i["correct"] > i["quality"]]
    assert late_right, "budget-free: some right answers come late"
    assert not [i for i in seen[True] if i["correct"] > i["quality"]], "aborted when late"
