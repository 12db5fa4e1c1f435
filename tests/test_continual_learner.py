"""The continual learner's skeleton on a local Ray: RLlib PPO on recorded live rollouts (no
simulator), each iteration's nets registered as a candidate, the rollouts acknowledged with its
checkpoint; a second run resumes and trains only on rollouts not acknowledged."""

from __future__ import annotations

import pytest
import torch
import yaml
from live_data import live_deployment, serve_queries, shipped_policy

from inframind_ray.bench.replay_gate import ReplayGateConfig
from inframind_ray.errors import ConfigError
from inframind_ray.learning.continual import (
    ContinualConfig,
    GateSettings,
    learn,
    load_continual_config,
)
from inframind_ray.learning.rollout_reader import Ledger
from inframind_ray.learning.train_config import PPOSettings


@pytest.fixture(scope="module")
def ray_local():
    """This module's own local Ray, shut down after it (``learn`` starts one only when none is
    up, and never stops it: a Ray left up here breaks every later module's ``ray.init``)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # a local Ray and two RLlib algorithms: 45-90 s on the 2-core machine
def test_learns_from_live_rollouts_and_resumes(ray_local, tmp_path):
    """PPO iterations on recorded rollouts (half of them scored useless by client feedback, a
    third drawn by exploration: each checked against its behaviour mix, none skipped):
    the candidate's parent and data window; trained weights; acknowledged rollouts; a restart
    takes up from the ledger's checkpoint and trains on new rollouts only; a gated candidate that
reaches no canary sends the learner back to the active version; nothing promoted."""
    served = shipped_policy()
    pool = served[0]
    rec, reg, dep = live_deployment(tmp_path, served)
    written = serve_queries(rec, served, 0, 30, explore_every=3)  # a third explore
    for i in range(0, 30, 2):  # clients say half the answers were useless
        rec.feedback(f"q{i}", 0.0)
    rec.flush()
    ppo = PPOSettings(iterations=1, train_batch_size=64, minibatch_size=32, num_epochs=1, lr=1e-3)
    cfg = ContinualConfig(deployment=str(dep), min_age_s=0, max_age_s=None,
                          wait_s=0.1, give_up_after_s=20, ppo=ppo)
    out = tmp_path / "out"
    first = learn(cfg, out)
    assert first["candidate"] == "v0002" and first["skipped"] == {}
    assert first["lambda"] == 1.0  # held: the batch's cost is the serving version's
    meta = reg.meta("v0002")
    assert meta.parent == "v0001" and meta.data_window.rollouts == first["rollouts"] >= 10
    trained, seed = reg.check("v0002", pool), reg.check("v0001", pool)
    assert not torch.equal(trained.executor.v[0].weight, seed.executor.v[0].weight)
    acked = Ledger(out / "ledger.json").acked
    assert len(acked) == first["acknowledged"] and acked <= set(written)

    # a restart: from the ledger's checkpoint, the rest of the data; now gated (20 twin
    # validation queries), and a gain no candidate can show (0.99), so that the candidate
    # reaches no canary and, with reset_after 1, the learner starts again from the active v0001.
    # The replay gate's tolerance (0.99) lets any candidate short of losing nearly every query
    # through, so the gain test stops it whatever checkpoint is shipped (its failing path:
    # tests/test_gates.py)
    gate = GateSettings(enabled=True, min_gain=0.99, reset_after=1,
                        replay=ReplayGateConfig(n_queries=20, rate_per_min=30.0, tolerance=0.99))
    second = learn(cfg.model_copy(update={"gate": gate}), out)
    assert (second["iteration"], second["candidate"]) == (2, "v0003")
    assert second["gate"]["canary"].startswith("not requested: twin goodput")
    assert second["reset_to"] == "v0001" and reg.state().canary is None
    ledger = Ledger(out / "ledger.json")
    assert len(ledger.acked) == first["acknowledged"] + second["acknowledged"]
    assert ledger.payload["iteration"] == 2 and ledger.payload["fruitless"] == 0
    # the next restart resumes from the active version, not from the rejected candidate
    assert ledger.payload["checkpoint"] == str(reg.path("v0001").resolve())
    assert reg.meta("v0003").gates["replay"]["passed"] is True  # the gate ran on it
    serve_queries(rec, served, 30, 50)  # more traffic: a third run starts from that checkpoint
    rec.flush()
    third = learn(cfg, out)
    assert (third["iteration"], third["candidate"]) == (3, "v0004") and third["rollouts"] > 0
    assert third["lambda"] == 1.0
    assert reg.state().active == "v0001"  # candidates only: nothing is promoted


@pytest.mark.parametrize(("ppo", "says"), [
    ({"num_env_runners": 1}, "ppo.num_env_runners must be 0"),
    ({"learner_resources": {"gpu_node": 1}}, "learner_resources needs num_learners >= 1"),
])
def test_a_learner_config_that_cannot_place_its_work_is_refused(tmp_path, ppo, says):
    """Sampling must stay in the learner's process (it reads the rollouts); custom resources
    need learner actors to place: one line each, naming the field."""
    path = tmp_path / "continual.yaml"
    path.write_text(yaml.safe_dump({"ppo": ppo}))
    with pytest.raises(ConfigError, match=says) as e:
        load_continual_config(path)
    assert "\n" not in str(e.value)
