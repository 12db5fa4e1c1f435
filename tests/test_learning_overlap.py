"""Sampling overlapped with learning (``ppo.overlap``): the finished queries travel as columns
and come back as the same episodes; one remote runner samples the next batch while the learner
updates, one update behind it; ``train-speed`` measures the variant."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import ray
from ray.rllib.core.columns import Columns

from inframind_ray.errors import ConfigError
from inframind_ray.learning.env_runner import QueryRows
from inframind_ray.learning.modules import EXECUTOR, PLANNER
from inframind_ray.learning.throughput import Variant
from inframind_ray.learning.train import build_algo
from inframind_ray.learning.train_config import TrainConfig

ENV = {"queries_per_episode": 60, "rate_range": [200, 400], "budget_ranges": [[10, 30]],
       "tasks": "gsm8k=0.5,mmlu_pro=0.5", "trace_fraction": 0.0, "num_sims": 4}
PPO = {"iterations": 1, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}


@pytest.fixture(scope="module")
def ray_local():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _cfg(**ppo) -> TrainConfig:
    return TrainConfig.model_validate({"hidden": 32, "env": ENV, "warm_start": None,
                                       "ppo": {**PPO, **ppo}})


def _pickled_objects(obj) -> int:
    """Objects a pickle of ``obj`` records (its memo): what makes pickling slow here."""
    p = pickle.Pickler(io.BytesIO())
    p.dump(obj)
    return len(p.memo.copy())


def test_query_rows_give_back_the_same_episodes(ray_local):
    """Records packed as columns rebuild episodes equal to the runner's own, field by field,
    and pickle as a tenth of the objects or fewer (4,000 decisions: 0.8 s to pickle and
    unpickle as episodes, 0.01 s as columns; docs/learning.md)."""
    algo = build_algo(_cfg())
    try:
        runner = algo.env_runner_group.local_env_runner
        envs = runner._twin_envs()
        runner._reset(envs)
        records, _, _, answered = runner._run(envs, 120, None, True, False)
        assert answered >= sum(len(r) for r in records) >= 120
        direct = [runner._episode(r) for r in records]
        rows = QueryRows.pack(records, runner._weights_seq_no)
        rebuilt = rows.episodes(runner.config.policy_mapping_fn)
        assert len(rows) == sum(e.agent_steps() for e in direct)
        assert len(rebuilt) == len(direct)
        for a, b in zip(direct, rebuilt, strict=True):
            assert set(a.agent_ids) == set(b.agent_ids)
            for aid in a.agent_ids:
                sa, sb = a.agent_episodes[aid], b.agent_episodes[aid]
                assert sa.module_id == sb.module_id
                oa, ob = sa.get_observations(0), sb.get_observations(0)
                assert list(oa) == list(ob)
                assert all(np.array_equal(oa[k], ob[k]) and oa[k].dtype == ob[k].dtype
                           for k in oa)
                assert int(sa.get_actions(0)) == int(sb.get_actions(0))
                for col in (Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS):
                    assert np.array_equal(sa.get_extra_model_outputs(col, 0),
                                          sb.get_extra_model_outputs(col, 0))
                assert sa.get_return() == sb.get_return()
                assert sa.get_infos(-1) == sb.get_infos(-1)
        assert rows.summaries()[0] == {
            m: [sum(1 for s in direct[0].agent_episodes.values() if s.module_id == m),
                pytest.approx(sum(s.get_return() for s in direct[0].agent_episodes.values()
                                  if s.module_id == m))]
            for m in {s.module_id for s in direct[0].agent_episodes.values()}}
        assert _pickled_objects(rows) * 10 < _pickled_objects(direct)
    finally:
        algo.stop()


def test_overlapped_ppo_learns_one_update_behind(ray_local):
    """Three iterations: the first batch is sampled by the starting weights and learned at
    once (lag 0), every later one by the weights of one update before (lag 1); each learns a
    full batch; the runner ends with the learner's latest weights."""
    from inframind_ray.learning.overlap import LAG, OverlappedPPO
    from inframind_ray.learning.train import _iteration_row, decisions_sampled

    algo = build_algo(_cfg(num_env_runners=1, overlap=True))
    try:
        assert isinstance(algo, OverlappedPPO)
        lags, trained, prev = [], [], 0
        for i in range(3):
            r = algo.train()
            lags.append(r["learners"]["__all_modules__"][LAG])
            assert _iteration_row(i + 1, r, 1.0, 1.0)["policy_lag"] == lags[-1]
            trained.append(decisions_sampled(r) - prev)
            prev = decisions_sampled(r)
        assert lags == [0, 1, 1]
        assert all(t >= 64 for t in trained)
        # a blocking call runs after the sample in flight and the weights sent behind it
        remote = algo.env_runner_group.foreach_env_runner(
            lambda w: {m: {k: v.clone() for k, v in w.module[m].state_dict().items()}
                       for m in (PLANNER, EXECUTOR)}, local_env_runner=False)[0]
        learner = algo.learner_group.foreach_learner(
            lambda lr: {m: lr.module[m].state_dict() for m in (PLANNER, EXECUTOR)})
        learner = next(iter(learner)).get()
        for m in (PLANNER, EXECUTOR):
            shared = set(remote[m]) & set(learner[m])
            assert shared
            assert all(np.allclose(np.asarray(remote[m][k]), np.asarray(learner[m][k]))
                       for k in shared)
    finally:
        algo.stop()


def test_train_speed_measures_the_overlapped_variant(ray_local):
    """``train-speed`` with ``decisions:4:1:overlap``: ppo rows count the batch each iteration
    learned (at least ``train_batch_size``) and the decisions answered for it."""
    from inframind_ray.learning.throughput import measure

    v = Variant.parse("decisions:4:1:overlap")
    assert v.overlap and v.runners == 1
    rows = measure(_cfg(), [v], decisions=300, iterations=2)
    assert [r.phase for r in rows] == ["raw", "sampling", "ppo", "ppo"]
    assert rows[1].decisions >= 300 and rows[1].trained is None
    ppo = rows[2:]
    assert all(r.overlap and 64 <= r.trained < 200 and r.decisions > 0 for r in ppo)
    # every decision trained was answered by the runner in a fetched sample call or before
    assert sum(r.decisions for r in rows[1:]) >= sum(r.trained for r in ppo)
    assert Variant.parse("decisions:4:1:overlap@1").threads == 1
    assert measure(_cfg(), [Variant.parse("decisions:4@1")], decisions=50,
                   iterations=1)[-1].threads == 1


@pytest.mark.parametrize("text", ["decisions:4:2:overlap", "rllib:4:1:overlap",
                                  "decisions:4:1:fast", "decisions:4@0", "decisions:4@x"])
def test_overlap_needs_one_decision_runner(text):
    with pytest.raises(ConfigError):
        Variant.parse(text)


def test_overlap_config_is_checked_at_load():
    with pytest.raises(ValueError, match="overlap needs"):
        _cfg(overlap=True)


def test_settled_collector_changes_nothing_sampled(ray_local):
    """``learning/heap.py``: the same seeded sampling with the collector as CPython sets it and
    settled (frozen heap, larger young generation) gives the same decisions and rewards."""
    import gc

    from inframind_ray.learning.env_runner import DecisionEnvRunner
    from inframind_ray.learning.heap import GEN0_THRESHOLD

    def sampled(settled: bool) -> QueryRows:
        algo = build_algo(_cfg())
        try:
            runner = algo.env_runner_group.local_env_runner
            runner._settled = not settled  # True: skip settling
            envs = runner._twin_envs()
            runner._reset(envs)
            records, _, _, _ = runner._run(envs, 150, None, False, False)
            return QueryRows.pack(records, 0)
        finally:
            algo.stop()

    before = gc.get_threshold()
    try:
        plain = sampled(settled=False)
        assert gc.get_threshold()[0] == before[0]
        settled = sampled(settled=True)
        assert gc.get_threshold()[0] == GEN0_THRESHOLD and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert plain.agents == settled.agents and plain.rewards == settled.rewards
    assert plain.infos == settled.infos
    for mid, cols in plain.columns.items():
        assert all(np.array_equal(v, settled.columns[mid][k]) for k, v in cols.items())
    assert DecisionEnvRunner._settled is False  # the class default: every runner settles once


def test_decoupled_batch_centres_the_clip_on_the_proximal_policy():
    """The decoupled objective is PPO's loss on a batch whose sampling log-probabilities are the
    proximal ones and whose advantages carry w = pi_prox / pi_behav; rows outside the loss get
    w = 1; without lag (prox = behaviour) the batch is PPO's own."""
    import torch
    from ray.rllib.evaluation.postprocessing import Postprocessing

    from inframind_ray.learning.decoupled import PROX_LOGP, decoupled_batch

    behav = torch.log(torch.tensor([0.5, 0.2, 0.1, 0.3]))
    prox = torch.log(torch.tensor([0.6, 0.1, 0.1, 0.9]))
    adv = torch.tensor([1.0, -2.0, 0.5, 3.0])
    mask = torch.tensor([True, True, True, False])
    batch = {Columns.ACTION_LOGP: behav, PROX_LOGP: prox, Postprocessing.ADVANTAGES: adv,
             Columns.LOSS_MASK: mask}
    out, w = decoupled_batch(batch)
    assert torch.allclose(w, torch.tensor([1.2, 0.5, 1.0, 1.0]))
    assert torch.equal(out[Columns.ACTION_LOGP], prox)
    assert torch.allclose(out[Postprocessing.ADVANTAGES], torch.tensor([1.2, -1.0, 0.5, 3.0]))
    assert torch.equal(batch[Columns.ACTION_LOGP], behav)  # the learner's batch is untouched
    # PPO's clipped surrogate on the new batch = w * min(r A, clip(r) A), r against prox
    new = torch.log(torch.tensor([0.9, 0.1, 0.05, 0.9]))
    r = torch.exp(new - out[Columns.ACTION_LOGP])
    a = out[Postprocessing.ADVANTAGES]
    ppo = torch.minimum(a * r, a * r.clamp(0.8, 1.2))
    want = w * torch.minimum(adv * r, adv * r.clamp(0.8, 1.2))
    assert torch.allclose(ppo[mask], want[mask])
    same, w1 = decoupled_batch({**batch, PROX_LOGP: behav})
    assert torch.allclose(w1, torch.ones(4))
    assert torch.allclose(same[Postprocessing.ADVANTAGES], adv)


def test_decoupled_overlap_weighs_the_lag(ray_local):
    """With ``ppo.decoupled`` the overlapped learner logs the lag's importance weights: 1 for
    the first batch (sampled by the weights the update starts from), away from 1 once a batch
    is one update behind; the training keeps its lag 0, 1, 1."""
    from inframind_ray.learning.modules import PLANNER
    from inframind_ray.learning.overlap import LAG

    algo = build_algo(_cfg(num_env_runners=1, overlap=True, decoupled=True))
    try:
        rows = [algo.train()["learners"] for _ in range(3)]
        assert [r["__all_modules__"][LAG] for r in rows] == [0, 1, 1]
        for m in (PLANNER, EXECUTOR):
            means = [r[m]["lag_weight_mean"] for r in rows]
            maxes = [r[m]["lag_weight_max"] for r in rows]
            assert all(np.isfinite(means)) and all(np.isfinite(maxes))
            assert means[0] == pytest.approx(1.0, abs=1e-4)
            assert maxes[0] == pytest.approx(1.0, abs=1e-3)
        assert max(r[m]["lag_weight_max"] for r in rows[1:] for m in (PLANNER, EXECUTOR)) > 1.001
    finally:
        algo.stop()


def test_decoupled_setting_is_validated():
    """``decoupled`` is a PPO setting of the config, off by default."""
    assert _cfg().ppo.decoupled is False
    assert _cfg(decoupled=True).ppo.decoupled is True
    with pytest.raises(ValueError):
        TrainConfig.model_validate({"hidden": 32, "env": ENV, "warm_start": None,
                                    "ppo": {**PPO, "decoupled": "sometimes"}})
