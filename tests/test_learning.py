"""RLlib training of the learned policy: the RLModules (shapes, masking), the Lagrangian learner
(the lambda term in the rewards; lambda rises on a constraint-violating batch), a tiny training
run that beats the untrained policy on the validation split, resume, and the CLI's errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from inframind_ray.learning.env import TwinOrchestrationEnv
from inframind_ray.learning.lagrangian import LagrangianReward, dual_ascent
from inframind_ray.learning.modules import EXECUTOR, PLANNER, module_of
from inframind_ray.learning.train import build_algo, train
from inframind_ray.learning.train_config import TrainConfig, load_train_config
from inframind_ray.policy.learned import LearnedPolicy

# congested on purpose: far above capacity with tight budgets, so the latency constraint binds
HOT_ENV = {"queries_per_episode": 60, "rate_range": [900, 900], "budget_ranges": [[4, 8]],
           "trace_fraction": 0.0}


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def hot_algo(ray_local):
    cfg = TrainConfig.model_validate({
        "env": HOT_ENV, "warm_start": None,
        "ppo": {"iterations": 1, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1},
        "lagrangian": {"lam_init": 1.0, "lam_lr": 0.5, "cost_target": 0.0}})
    algo = build_algo(cfg)
    yield algo
    algo.stop()


def test_policy_mapping_by_agent_prefix():
    assert module_of("plan/0/3") == PLANNER
    assert module_of("step/0/3/2") == EXECUTOR


def test_modules_shapes_and_masks(hot_algo):
    """Both modules take the env's Dict observations; masked actions are never sampled."""
    env = TwinOrchestrationEnv(HOT_ENV)
    obs, _ = env.reset(seed=1)
    seen = {PLANNER: 0, EXECUTOR: 0}
    for _ in range(40):
        aid = env.pending[0]
        mid = module_of(aid)
        module = hot_algo.get_module(mid)
        o = {k: torch.as_tensor(v).unsqueeze(0).repeat(64, 1) for k, v in obs[aid].items()}
        out = module.forward_exploration({Columns.OBS: o})
        logits = out[Columns.ACTION_DIST_INPUTS]
        assert logits.shape == (64, env.action_spaces[aid].n)
        dist = module.get_exploration_action_dist_cls().from_logits(logits)
        acts = dist.sample().numpy()
        assert (obs[aid]["mask"][acts] > 0).all(), "sampled a masked action"
        assert module.compute_values({Columns.OBS: o}).shape == (64,)
        seen[mid] += 1
        obs, *_ = env.step({aid: int(acts[0])})
        if not env.pending:
            break
    env.close()
    assert seen[PLANNER] and seen[EXECUTOR]


def test_nets_score_only_the_rows_a_batch_uses():
    """The nets skip rows past the batch's largest pool (``n_rows`` = ``used_rows``) and give
    the same logits and values as when they encode all MAX_MODELS rows: a batch mixing pools
    of 2 and 5 models, random features, padded rows zero as the features make them."""
    from inframind_ray.policy.features import EXECUTOR_OBS, MAX_MODELS, PLANNER_OBS
    from inframind_ray.policy.learned import ExecutorNet, PlannerNet, used_rows

    torch.manual_seed(0)
    sizes = torch.tensor([2, 5, 5, 2, 3, 5])
    row_mask = (torch.arange(MAX_MODELS)[None, :] < sizes[:, None]).float()
    assert used_rows(row_mask) == 5
    for net, which, first, shape in ((PlannerNet(32), "planner", "emb", PLANNER_OBS),
                                     (ExecutorNet(32), "executor", "sem", EXECUTOR_OBS)):
        n_act = shape["mask"]
        per_row = shape["rows"] // MAX_MODELS
        rows = torch.randn(len(sizes), MAX_MODELS, per_row) * row_mask[..., None]
        mask = torch.ones(len(sizes), n_act)
        if which == "executor":
            mask = row_mask.repeat_interleave(n_act // MAX_MODELS, dim=1)
            mask[0, 1] = 0.0  # a masked action inside the used rows
        x = (torch.randn(len(sizes), shape[first]), torch.randn(len(sizes), shape["glob"]),
             rows.reshape(len(sizes), -1), row_mask, mask)
        with torch.no_grad():
            full, v_full = net(*x)
            part, v_part = net(*x, n_rows=used_rows(row_mask))
        assert part.shape == full.shape == (len(sizes), n_act)
        assert torch.allclose(part, full, atol=1e-5) and torch.allclose(v_part, v_full, atol=1e-5)
        assert (part[mask <= 0] <= -1e8).all()
        if which == "executor":  # packed: only the valid rows scored, gradients too
            packed, v_packed = net(*x, n_rows=used_rows(row_mask), packed=True)
            assert torch.allclose(packed, part, atol=1e-5)
            assert torch.allclose(v_packed, v_part, atol=1e-5)
            grads = []
            for kw in ({}, {"packed": True}):
                net.zero_grad()
                lo, v = net(*x, n_rows=used_rows(row_mask), **kw)
                (torch.log_softmax(lo, -1)[:, 0].sum() + v.sum()).backward()
                grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
            assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_learner_pass_skips_bootstrap_rows_with_the_same_gradients(hot_algo):
    """PPO's learner pipeline appends a bootstrap step (``LOSS_MASK`` False) to every one-step
    decision episode; the modules' train pass gives those rows constants instead of computing
    them, and a masked loss (as PPO's) has the same value and gradients as with every row
    computed."""
    learner = hot_algo.learner_group._learner
    episodes = hot_algo.env_runner.sample(num_episodes=1, explore=True)
    batch = learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes,
                                       shared_data={}, metrics=learner.metrics)
    for mid in (PLANNER, EXECUTOR):
        b = batch[mid]
        mask = b[Columns.LOSS_MASK]
        assert 0 < int(mask.sum()) < len(mask), "no bootstrap rows to skip"
        module = learner.module[mid]
        results = []
        for kept in (b, {k: v for k, v in b.items() if k != Columns.LOSS_MASK}):
            module.zero_grad()
            out = module._forward_train(kept)
            dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            per_row = (dist.logp(b[Columns.ACTIONS]) + dist.entropy()
                       - (out[Columns.EMBEDDINGS] - 1.0) ** 2)
            loss = per_row[mask].sum() / mask.sum()
            loss.backward()
            results.append((float(loss), torch.cat([p.grad.flatten()
                                                    for p in module.parameters()])))
        (skip, g_skip), (full, g_full) = results
        assert skip == pytest.approx(full, rel=1e-5)
        assert torch.allclose(g_skip, g_full, rtol=1e-4, atol=1e-6)


def test_dual_ascent_is_projected():
    assert dual_ascent(1.0, 0.3, 0.1, 0.5) == pytest.approx(1.1)
    assert dual_ascent(0.05, 0.0, 0.1, 1.0) == 0.0  # never negative
    assert dual_ascent(99.0, 1.0, 0.0, 10.0, lam_max=100.0) == 100.0


def _rewritten(algo, piece: LagrangianReward, want) -> LagrangianReward:  # noqa: ANN001
    """Run the reward piece on a sampled episode; every decision's reward must be ``want(its
    final infos)`` (and a right, in-budget answer is right)."""
    episodes = algo.env_runner.sample(num_episodes=1, explore=True)
    piece(rl_module=None, batch={}, episodes=episodes)
    checked = 0
    for ep in episodes:
        for sa in ep.agent_episodes.values():
            info = sa.get_infos(-1)
            if "cost" in info:
                assert info["correct"] >= info["quality"]
                assert sa.get_rewards(-1) == pytest.approx(want(info), abs=1e-5)
                checked += 1
    assert checked > 0
    return piece


def test_lagrangian_reward_and_lambda_rises(hot_algo):
    """The learner's connector writes quality - lam * cost * w into the rewards; one update on a
    batch whose mean cost exceeds the target raises lambda (and logs it)."""
    piece = _rewritten(hot_algo, LagrangianReward(lam=3.0), lambda i: (
        i["quality"] - 3.0 * i["cost"] * i["weight"] - i.get("toll", 0.0)))
    assert np.mean(piece.query_costs) > 0, "the hot env must violate"

    learner = hot_algo.learner_group._learner
    lam0 = learner.lam
    episodes = hot_algo.env_runner.sample(num_episodes=1, explore=True)
    res = hot_algo.learner_group.update(episodes=episodes)
    assert learner.lam > lam0
    assert learner.reward_piece.lam == learner.lam
    flat = json.dumps(res, default=str)
    assert "lagrangian" in flat and "lambda" in flat
    state = learner.get_state()
    assert state["lagrangian_lambda"] == learner.lam


def test_accuracy_floor_adds_mu_correct_and_mu_rises(hot_algo):
    """LAMaS's accuracy floor: the reward gains ``mu * correct`` (all over 1 + mu); with a floor
    S0 = 1 (above any batch's accuracy) one update raises mu from 0, logs it and keeps it in the
    learner's state; without a floor mu stays 0."""
    piece = _rewritten(hot_algo, LagrangianReward(lam=0.5, mu=2.0), lambda i: (
        i["quality"] - 0.5 * i["cost"] * i["weight"] - i.get("toll", 0.0)
        + 2.0 * i["correct"]) / 3.0)
    assert len(piece.query_correct) == len(piece.query_costs)

    learner = hot_algo.learner_group._learner
    assert learner.accuracy_floor is None and learner.mu == 0.0
    hot_algo.learner_group.update(episodes=hot_algo.env_runner.sample(num_episodes=1))
    assert learner.mu == 0.0  # no floor: no multiplier
    learner.accuracy_floor = 1.0
    try:
        res = hot_algo.learner_group.update(
            episodes=hot_algo.env_runner.sample(num_episodes=1, explore=True))
        assert np.mean(learner.reward_piece.query_correct) < 1.0
        assert learner.mu > 0.0 and learner.reward_piece.mu == learner.mu
        assert '"mu"' in json.dumps(res, default=str) or "mu" in str(res)
        assert learner.get_state()["lagrangian_mu"] == learner.mu
    finally:
        learner.accuracy_floor, learner.mu, learner.reward_piece.mu = None, 0.0, 0.0


TINY = {
    "hidden": 32,  # small nets: the warm start fits in seconds
    "env": {"pool": "constrained", "queries_per_episode": 400, "rate_range": [300, 300],
            "trace_fraction": 0.0},  # the 6-slot 70B congests at 300 req/min
    "warm_start": {"episodes": 3, "epochs": 60},
    "ppo": {"iterations": 1, "train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1},
    "eval": {"every": 1, "rates": [10, 300], "queries": 600, "budget": [15, 45]},
}


def test_tiny_training_beats_untrained_and_resumes(ray_local, tmp_path):
    """Warm start + one PPO iteration improve validation goodput over the untrained policy; the
    kept policy loads; --resume continues from the RLlib state."""
    cfg = TrainConfig.model_validate(TINY)
    summary = train(cfg, tmp_path, progress=False)
    assert summary["best_val_goodput"] > summary["untrained_val_goodput"] + 0.02, summary
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[1]["lambda"] is not None and rows[1]["eval"][0]["model_mix"]
    # CleanRL's diagnostics every iteration, per module, and the environment's throughput
    for module in ("planner", "executor"):
        d = rows[1]["diagnostics"][module]
        assert d["approx_kl"] is not None and d["approx_kl"] >= 0
        assert 0.0 <= d["clip_fraction"] <= 1.0 and d["entropy"] > 0
        assert d["explained_variance"] is not None
    assert rows[1]["decisions_per_s"] > 0
    from inframind_ray.config import load_pool
    from inframind_ray.pools.cards import build_pool_info

    pool = load_pool("default")
    info = build_pool_info(pool)
    assert isinstance(LearnedPolicy.load(tmp_path / "policy", info), LearnedPolicy)

    cfg2 = TrainConfig.model_validate({**TINY, "ppo": {**TINY["ppo"], "iterations": 2}})
    train(cfg2, tmp_path, resume=True, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]


def test_train_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo: {iterations: -1}\n")
    with pytest.raises(Exception, match="ppo.iterations"):
        load_train_config(bad)
    r = subprocess.run([sys.executable, "-m", "inframind_ray.cli", "train", "-c", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "ppo.iterations" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "inframind_ray.cli", "train", "-c",
                        str(tmp_path / "none.yaml")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such file" in r.stderr


def test_validation_pools_per_pool_rows_and_collapse_guard(tmp_path):
    """Validation runs on every validation pool (listed and sampled), at load factors of each
    pool's capacity proxy; the collapse guard reports per pool; a held-out test pool is refused
    at load."""
    from inframind_ray.learning.train import (
        collapse_by_pool,
        evaluate,
        per_pool,
        strongest_by_pool,
    )
    from inframind_ray.learning.train_config import validation_pools

    cfg = TrainConfig.model_validate({
        "env": {"pool": "constrained", "tasks": "gsm8k=1"},
        "eval": {"pools": ["constrained", "shared_gpu"], "sampled_pools": 1,
                 "load_factors": [0.05, 0.1], "queries": 10, "budget": [30, 60]}})
    pools = validation_pools(cfg)
    assert [n for n, _ in pools] == ["constrained", "shared_gpu", "sampled-0"]
    assert validation_pools(cfg)[2][1] == pools[2][1]  # the sampled pool is seeded
    rows = evaluate(cfg, None, policy="always-strongest")
    assert [(r["pool"], r["load_factor"]) for r in rows] == [
        (n, f) for n, _ in pools for f in (0.05, 0.1)]
    for name in ("constrained", "shared_gpu"):  # rates scale with each pool's own capacity
        a, b = (r["rate_per_min"] for r in rows if r["pool"] == name)
        assert b == pytest.approx(2 * a, rel=1e-3)
    assert {r["rate_per_min"] for r in rows if r["pool"] == "constrained"} != \
        {r["rate_per_min"] for r in rows if r["pool"] == "shared_gpu"}
    assert set(per_pool(rows)) == {"constrained", "shared_gpu", "sampled-0"}
    flags = collapse_by_pool(rows, strongest_by_pool(cfg))
    assert set(flags) == {"constrained", "shared_gpu", "sampled-0"} or len(pools[2][1].models) == 1
    assert all("strongest model" in f for f in flags.values())  # always-strongest: one model

    bad = tmp_path / "heldout.yaml"
    bad.write_text("eval: {pools: [heldout/a100-pair]}\n")
    with pytest.raises(Exception, match="eval.pools: 'heldout/a100-pair' is a held-out"):
        load_train_config(bad)  # a ConfigError: the CLI's one line, exit 2 (test above)


def test_eval_cells_by_duration():
    """``eval.duration_s``: each validation cell holds rate x duration queries (a sustained load,
    as ``bench --duration``), so the count grows with the load factor and the pool's capacity
    instead of being one fixed burst."""
    from inframind_ray.bench.sweep import queries_for
    from inframind_ray.learning.train import evaluate

    cfg = TrainConfig.model_validate({
        "env": {"pool": "constrained", "tasks": "gsm8k=1"},
        "eval": {"load_factors": [0.01, 0.03], "duration_s": 20, "budget": [30, 60]}})
    rows = evaluate(cfg, None, policy="always-strongest")
    assert [r["queries"] for r in rows] == [queries_for(r["rate_per_min"], 20) for r in rows]
    assert rows[1]["queries"] > rows[0]["queries"] > 0
    fixed = evaluate(cfg.model_copy(update={"eval": cfg.eval.model_copy(
        update={"duration_s": None, "queries": 10})}), None, policy="always-strongest")
    assert [r["queries"] for r in fixed] == [10, 10]
    with pytest.raises(Exception, match="duration_s"):
        TrainConfig.model_validate({"eval": {"duration_s": 0}})


def test_report_compares_kept_and_start_on_another_seed(tmp_path):
    """``eval.report_seed``: the kept checkpoint and the first one are evaluated side by side on
    another validation seed; identical weights give identical goodput (a deterministic twin)."""
    from inframind_ray.config import load_pool
    from inframind_ray.learning.train import report
    from inframind_ray.pools.cards import build_pool_info

    info = build_pool_info(load_pool("constrained"))
    pol = LearnedPolicy(info, seed=3, hidden=16)
    pol.save(tmp_path / "policy")
    pol.save(tmp_path / "checkpoints" / "iter_0")
    cfg = TrainConfig.model_validate({
        "env": {"pool": "constrained", "tasks": "gsm8k=1"},
        "eval": {"rates": [120], "queries": 12, "budget": [20, 40], "report_seed": 7}})
    rep = report(cfg, tmp_path, {"phase": "warm_start"})
    assert rep["seed"] == 7 and rep["start_phase"] == "warm_start"
    assert set(rep["kept_by_pool"]) == {"constrained"} == set(rep["start_by_pool"])
    assert rep["kept_by_pool"] == rep["start_by_pool"] and rep["kept_minus_start"] == 0.0
    assert 0.0 <= rep["kept_mean"] <= 1.0


def test_train_speed_counts_answered_and_trained_decisions(ray_local):
    """``inframind train-speed``'s phases on a small config: every row has decisions and wall
    time; a PPO row counts the decisions the envs answered and those the learner trained on
    (its batch, at least ``train_batch_size``); over the run every answered decision is
    trained or still in flight."""
    from inframind_ray.learning.throughput import Variant, measure

    cfg = TrainConfig.model_validate({
        "hidden": 32, "env": HOT_ENV, "warm_start": None,
        "ppo": {"iterations": 1, "train_batch_size": 64, "minibatch_size": 32,
                "num_epochs": 1}})
    rows = measure(cfg, [Variant.parse("decisions:4")], decisions=100, iterations=2)
    assert [r.phase for r in rows] == ["raw", "sampling", "ppo", "ppo"]
    assert all(r.decisions > 0 and r.wall_s > 0 for r in rows)
    assert rows[0].trained is None and rows[0].as_dict()["trained_per_s"] is None
    first, second = rows[2], rows[3]
    assert first.trained >= 64 and second.trained >= 64
    assert first.as_dict()["trained_per_s"] == pytest.approx(first.trained / first.wall_s, 0.01)
    # every decision trained was answered in the sampling phase or in these iterations
    assert rows[1].decisions + first.decisions + second.decisions >= first.trained + second.trained


@pytest.mark.parametrize("hash_seed", ["8"])
def test_initial_weights_do_not_depend_on_string_hashing(hash_seed):
    """The modules are built in a fixed order, so a seeded run's initial weights are the same
    in every process (a set of module ids once made them depend on ``PYTHONHASHSEED``: seeds
    0 and 8 built them in opposite orders)."""
    import os
    import subprocess
    import sys

    code = ("import hashlib; from inframind_ray.learning.train import build_algo, start_ray; "
            "from inframind_ray.learning.train_config import TrainConfig; start_ray(); "
            "a = build_algo(TrainConfig.model_validate({'hidden': 32, 'warm_start': None, "
            "'ppo': {'train_batch_size': 64, 'minibatch_size': 32}})); "
            "m = a.env_runner_group.local_env_runner.module; h = hashlib.sha256(); "
            "[h.update(v.numpy().tobytes()) for k in ('planner', 'executor') "
            "for v in m[k].state_dict().values()]; print('W', h.hexdigest()); a.stop()")
    out = []
    for seed in ("0", hash_seed):
        env = {**os.environ, "PYTHONHASHSEED": seed, "RAY_DEDUP_LOGS": "0"}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        out.append([line for line in run.stdout.splitlines() if line.startswith("W ")])
    assert out[0] and out[0] == out[1]
