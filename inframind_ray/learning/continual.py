"""The continual learner (skeleton): RLlib PPO whose experience is the cluster's live rollouts.

RLlib's documented way to learn from an application that computes its own actions (the
external-env / RLlink pattern) is a custom ``EnvRunner`` whose ``sample`` returns episodes the
application recorded. ``LiveRolloutEnvRunner`` is that runner: instead of stepping an env it
takes whole episodes from the ``RolloutReader`` (learning/rollout_reader.py) and turns each into
one multi-agent episode, as ``DecisionEnvRunner`` does for a query of the twin: one agent per
decision, its recorded observation, action and log-probability (the behaviour policy's, for
PPO's importance ratio), the behaviour logits recomputed by the recorded version's networks
from the registry, and terminal infos ``quality`` / ``cost`` / ``weight`` from which
``LagrangianReward`` writes the reward, as in the twin.

Which episodes train: those with a quality (graded, or a client's feedback, which wins);
unlabelled ones are skipped (docs/continual.md says why); ones whose version is not in the
registry, or whose recorded log-probabilities the version's networks do not reproduce, are
skipped and counted; ones older than ``max_age_s`` are dropped by the reader (off-policy data
past a stated age; younger off-policy data is corrected by PPO's clipped ratio).

``learn`` runs iterations: ``algo.train()`` (sampling blocks until the batch's decisions have
arrived), then the nets are saved, the batches' rollout ids are acknowledged together with that
checkpoint (``Ledger.commit``), and the nets are registered as a candidate version (parent: the
version most of the batch came from; data window; no gate results). A restart resumes from the
ledger's checkpoint and skips what it acknowledged. After ``gate.reset_after`` gated candidates in
a row that failed the gate or showed no gain, the learner's nets start again from the
registry's active version (a run of failed gates means it has walked away from anything the
gates let serve; the count and the restart point are in the ledger). Nothing here promotes:
with ``gate.enabled`` a candidate goes through the twin replay gate and, if it passes with a
gain, asks the serving pool for its canary (bench/replay_gate.py), whose test promotes or
rejects it.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics import WEIGHTS_SEQ_NO

from inframind_ray.bench.replay_gate import ReplayGateConfig, gate_then_canary
from inframind_ray.config import load_pool, read_yaml, validated
from inframind_ray.core.topology import build_graph
from inframind_ray.errors import InframindError
from inframind_ray.learning.env_runner import DecisionEnvRunner
from inframind_ray.learning.rollout_reader import Episode, Ledger, RolloutBatch, RolloutReader
from inframind_ray.learning.train_config import LagrangianSettings, PPOSettings
from inframind_ray.policy.features import plan_of
from inframind_ray.policy.learned import LearnedPolicy, behaviour_probs
from inframind_ray.policy.registry import DataWindow, PolicyRegistry, RegistryError

log = logging.getLogger(__name__)
LOGP_TOLERANCE = 1e-3  # recorded vs recomputed log-probability of the behaviour version


class NoRollouts(InframindError):
    """The traffic produced no rollout for ``give_up_after_s``."""


class GateSettings(BaseModel):
    """Guarded promotion of the learner's candidates (docs/continual.md): off by default."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(False, description="run the twin replay gate on candidates")
    every: int = Field(1, ge=1, description="gate every n-th iteration's candidate")
    canary: bool = Field(True, description="request the canary when the gate passes")
    min_gain: float | None = Field(
        0.0, ge=0, lt=1, description="request the canary only if the candidate's twin goodput "
        "is above the incumbent's by more than this (None: any candidate that passes)")
    gain_evidence: Literal["mean", "lower"] = Field(
        "lower", description="how the twin must show the gain over min_gain: lower, its "
        "one-sided (1 - replay.alpha) lower bound (a gain the gate resolves); mean, its mean "
        "difference (noise-level gains pass: docs/continual.md, the slowed-480 runs)")
    confirm: bool = Field(
        True, description="a candidate whose gain the gate shows is replayed once more on a "
        "fresh draw of validation queries and needs the gain there too (the learner picks "
        "among many candidates on the gate's one draw, so their gains on it are biased up)")
    confirm_queries: int | None = Field(
        2000, ge=10, le=100_000, description="the confirmation draw's validation queries "
        "(None: replay.n_queries); 2,000 resolve a gain of about 1 point, 300 about 2")
    confirm_alpha: Literal["fixed", "spent"] = Field(
        "spent", description="spent: the k-th confirmation against one incumbent tests at "
        "replay.alpha * 6 / (pi^2 k^2), so that all of them together pass a candidate without "
        "a gain with chance at most replay.alpha; fixed: each at replay.alpha")
    supersede_margin: float | None = Field(
        0.02, ge=0, lt=1, description="a passing candidate replaces the running canary if its "
        "twin goodput is above the running one's by more than this (None: never)")
    max_supersedes: int = Field(2, ge=0, description="running canaries superseded at most this "
                                "often before one ends (so that a canary can finish)")
    reset_after: int | None = Field(
        3, ge=1, description="after this many gated candidates in a row that failed the twin gate "
        "or showed no gain (one with a gain, not queued behind a better one, counts as "
        "fruitful), the learner starts again from the registry's active "
        "version: candidates stay within that many gated iterations of what serves (None: never)")
    replay: ReplayGateConfig = ReplayGateConfig()


class ContinualConfig(BaseModel):
    """``rllib_configs/continual.yaml`` (validated at load)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "continual"
    deployment: str = Field("deployments/twin_pool.yaml", description="the served deployment: "
                            "its records_dir holds the rollouts, its registry_dir the versions")
    min_age_s: float = Field(30.0, ge=0, description="wait this long after a query ends before "
                             "training on it (feedback may still come)")
    max_age_s: float | None = Field(3600.0, gt=0, description="drop older rollouts")
    wait_s: float = Field(5.0, gt=0, description="poll period while too few rollouts are ready")
    give_up_after_s: float | None = Field(
        None, gt=0, description="stop with an error after this long without a new rollout "
        "(None: wait for traffic forever)")
    ppo: PPOSettings = PPOSettings(iterations=0, train_batch_size=512, minibatch_size=128,
                                   lr=1e-3)
    """PPO settings; ``iterations`` 0 runs until stopped; ``train_batch_size`` counts decisions;
    ``lr`` 1e-3: a step that can change a family's plan (docs/continual.md, "The step size")."""
    lagrangian: LagrangianSettings = LagrangianSettings(lam_lr=0.0)
    """lambda held (``lam_lr`` 0) by default: a batch is the serving version's decisions, so its
    mean cost does not answer to the candidate (docs/continual.md, "The learner's multiplier")."""
    gate: GateSettings = GateSettings()

    @model_validator(mode="after")
    def _sample_in_the_driver(self) -> ContinualConfig:
        if self.ppo.num_env_runners:
            raise ValueError("ppo.num_env_runners must be 0: the live rollouts are read in the "
                             "learner's own process (use ppo.num_learners to place the update)")
        return self


def load_continual_config(path: str | Path) -> ContinualConfig:
    """Read and validate a continual config; ConfigError with one line otherwise."""
    return validated(ContinualConfig, read_yaml(path, "config"), source=str(path))


class LiveSource:
    """What the runner reads from: the reader, the registry's behaviour versions, and the
    batches handed out since the last commit."""

    def __init__(self, reader: RolloutReader, registry: PolicyRegistry, pool,  # noqa: ANN001
                 wait_s: float, give_up_after_s: float | None = None) -> None:
        self.reader, self.registry, self.pool, self.wait_s = reader, registry, pool, wait_s
        self.give_up_after_s = give_up_after_s
        self.taken: list[RolloutBatch] = []
        self.used: list[Episode] = []
        self.versions: dict[str, LearnedPolicy | None] = {}
        self.counts = collections.Counter()

    def behaviour(self, version: str) -> LearnedPolicy | None:
        if version not in self.versions:
            try:
                self.versions[version] = self.registry.check(version, self.pool)
            except RegistryError as e:
                log.warning("rollouts of %s skipped: %s", version, e)
                self.versions[version] = None
        return self.versions[version]


class LiveRolloutEnvRunner(DecisionEnvRunner):
    """See the module docstring; ``source`` is set by ``learn`` after the algorithm is built
    (the runner lives in the driver: ``num_env_runners`` 0)."""

    source: LiveSource | None = None

    def sample(self, *, num_timesteps: int | None = None, num_episodes: int | None = None,
               explore: bool | None = None, random_actions: bool = False,
               force_reset: bool = False) -> list[MultiAgentEpisode]:
        """Whole recorded episodes until ``num_timesteps`` decisions (blocks while the traffic
        has not produced them)."""
        src = self.source
        if src is None:
            raise RuntimeError("LiveRolloutEnvRunner.source is not set")
        need = num_timesteps or self.config.get_rollout_fragment_length(self.worker_index)
        out: list[MultiAgentEpisode] = []
        decisions = 0
        last = time.monotonic()
        while decisions < need:
            src.reader.poll()
            batch = src.reader.next_batch(1)  # one episode at a time: no more than needed
            if batch is None:
                if src.give_up_after_s is not None and (time.monotonic() - last
                                                        > src.give_up_after_s):
                    raise NoRollouts(f"no new rollout in {src.give_up_after_s:g} s "
                                     f"(reading {src.reader.root})")
                time.sleep(src.wait_s)
                continue
            last = time.monotonic()
            src.taken.append(batch)
            for ep in batch.episodes:
                ma = self._live_episode(ep)
                if ma is not None:
                    out.append(ma)
                    src.used.append(ep)
                    decisions += ma.agent_steps()
        self._log_sampled(out, 0, len(out))
        return out

    def _live_episode(self, ep: Episode) -> MultiAgentEpisode | None:
        src = self.source
        quality = ep.feedback if ep.feedback is not None else ep.rollout["quality"]
        if quality is None:
            src.counts["unlabelled"] += 1
            return None
        policy = src.behaviour(ep.rollout["policy_version"])
        if policy is None:
            src.counts["unknown_version"] += 1
            return None
        correct = float(ep.feedback if ep.feedback is not None
                        else bool(ep.rollout["correct"]))  # right, in budget or not
        plan = plan_of(ep.decisions[0]["action"])
        graph = build_graph(plan)
        rows = {}
        for d in ep.decisions:
            step = d["kind"] == "step"
            obs = {"sem" if step else "emb": np.asarray(d["obs_ctx"], np.float32),
                   **{k: np.asarray(d[f"obs_{k}"], np.float32)
                      for k in ("glob", "rows", "row_mask", "mask")}}
            logits = policy._forward("executor" if step else "planner", obs)[0][0].numpy()
            eps = d.get("explore_epsilon")  # absent (older records) or null: greedy
            logp = (float(logits[d["action"]] - np.logaddexp.reduce(logits)) if eps is None
                    else float(np.log(behaviour_probs(logits, eps)[d["action"]])))
            if abs(logp - d["logp"]) > LOGP_TOLERANCE:
                src.counts["logp_mismatch"] += 1
                return None
            aid = (f"step/{ep.rollout_id}/{d['node_id']}" if step else f"plan/{ep.rollout_id}")
            weight = (graph.path_through(d["node_id"]) / graph.critical_path_len if step
                      else 1.0)
            rows[aid] = (obs, d["action"], np.float32(d["logp"]), logits,
                         {"quality": float(quality), "cost": float(ep.rollout["latency_cost"]),
                          "weight": weight, "baseline": 0.0, "toll": 0.0,
                          "correct": correct})
        ma = MultiAgentEpisode(agent_to_module_mapping_fn=self.config.policy_mapping_fn)
        ma.add_env_reset(observations={a: r[0] for a, r in rows.items()},
                         infos={a: {} for a in rows})
        ma.add_env_step(
            observations={a: r[0] for a, r in rows.items()},
            actions={a: r[1] for a, r in rows.items()},
            rewards={a: 0.0 for a in rows},  # LagrangianReward writes it from the infos
            infos={a: r[4] for a, r in rows.items()},
            terminateds={**{a: True for a in rows}, "__all__": True},
            extra_model_outputs={a: {Columns.ACTION_LOGP: r[2], Columns.ACTION_DIST_INPUTS: r[3],
                                     WEIGHTS_SEQ_NO: self._weights_seq_no}
                                 for a, r in rows.items()})
        return ma


def learn(cfg: ContinualConfig, out: Path, iterations: int | None = None,
          on_row: Callable[[dict], None] | None = None, address: str | None = None) -> dict:
    """Run the continual learner (see the module docstring); returns the last row.
    ``address``: the Ray cluster to join (``auto`` on a ``ray up`` node); default a local Ray
    of this process. The rollouts are read in this process; the update runs here or, with
    ``ppo.num_learners``, in learner actors wherever Ray places them (each row's
    ``learner_nodes``)."""
    import ray

    from inframind_ray.learning.env import EnvConfig, TwinOrchestrationEnv
    from inframind_ray.learning.modules import EXECUTOR, PLANNER
    from inframind_ray.learning.train import (
        _learner_nets,
        _set_learner_nets,
        build_algo,
        start_ray,
    )
    from inframind_ray.learning.train_config import TrainConfig
    from inframind_ray.pools.cards import build_pool_info

    for name in ("ray.rllib", "ray.tune", "ray._private.worker"):
        logging.getLogger(name).setLevel(logging.ERROR)
    deployment = load_pool(cfg.deployment)
    pool = build_pool_info(deployment)
    registry = PolicyRegistry(Path(deployment.serving.registry_dir).expanduser())
    out = Path(out)
    ledger = Ledger(out / "ledger.json")
    if ledger.payload.get("checkpoint"):
        start = LearnedPolicy.load(ledger.payload["checkpoint"], pool)
        parent = ledger.payload.get("parent")
    else:
        parent = registry.state().active
        if parent is None:
            raise RegistryError(f"registry {registry.root} has no active version to start from")
        start = registry.check(parent, pool)
    train_cfg = TrainConfig(name=cfg.name, hidden=start.hidden, ppo=cfg.ppo,
                            lagrangian=cfg.lagrangian, warm_start=None,
                            env=EnvConfig(queries_per_episode=1, token_budget=start.token_budget))
    reader = RolloutReader(Path(deployment.serving.records_dir).expanduser(), ledger.acked,
                           min_age_s=cfg.min_age_s, max_age_s=cfg.max_age_s)
    source = LiveSource(reader, registry, pool, cfg.wait_s, cfg.give_up_after_s)
    start_ray(address)
    env = TwinOrchestrationEnv(train_cfg.env.model_dump())  # lends its spaces only
    algo = build_algo(train_cfg, env, env_runner_cls=LiveRolloutEnvRunner)
    env.close()
    runner = algo.env_runner_group.local_env_runner
    runner.source = source
    _set_learner_nets(algo, {PLANNER: start.planner.state_dict(),
                             EXECUTOR: start.executor.state_dict()})
    learner_nodes = sorted({r.get() for r in algo.learner_group.foreach_learner(
        lambda lr: ray.get_runtime_context().get_node_id())})
    for key, attr in (("lambda", "lam"), ("mu", "mu")):  # the multipliers of the last commit
        if key in ledger.payload:
            v = float(ledger.payload[key])
            algo.learner_group.foreach_learner(
                lambda lr, a=attr, v=v: setattr(lr, a, v) or setattr(lr.reward_piece, a, v))
    n = iterations if iterations is not None else cfg.ppo.iterations
    row: dict = {}
    it = int(ledger.payload.get("iteration", 0))
    fruitless = int(ledger.payload.get("fruitless", 0))  # gated candidates in a row, no canary
    done = 0
    try:
        while n == 0 or done < n:
            algo.train()
            it += 1
            nets = _learner_nets(algo)
            pol = LearnedPolicy(pool, hidden=start.hidden, token_budget=start.token_budget)
            pol.planner.load_state_dict(nets[PLANNER])
            pol.executor.load_state_dict(nets[EXECUTOR])
            ckpt = pol.save(out / "checkpoints" / f"iter_{it}")
            used, source.used = source.used, []
            batch = RolloutBatch(f"iter_{it}", [e for b in source.taken for e in b.episodes])
            source.taken = []
            lam, mu = next(iter(algo.learner_group.foreach_learner(
                lambda lr: (lr.lam, lr.mu)))).get()
            state = {"iteration": it, "checkpoint": str(ckpt.resolve()), "parent": parent,
                     "lambda": lam, "mu": mu, "fruitless": fruitless}
            ledger.commit(batch, state)
            ends = [e.rollout["end_epoch"] for e in used]
            versions = collections.Counter(e.rollout["policy_version"] for e in used)
            meta = registry.register(
                ckpt, pool, parent=versions.most_common(1)[0][0] if versions else parent,
                data_window=DataWindow(start=min(ends, default=None), end=max(ends, default=None),
                                       rollouts=len(used)),
                note=f"continual {cfg.name} iteration {it}", actor="learner")
            row = {"iteration": it, "at": round(time.time(), 3), "candidate": meta.version,
                   "rollouts": len(used), "acknowledged": len(batch.episodes), "lambda": lam,
                   "skipped": dict(source.counts), "learner_nodes": learner_nodes}
            if cfg.gate.enabled and it % cfg.gate.every == 0:
                g = gate_then_canary(deployment, registry, meta.version, cfg.gate.replay,
                                     cfg.gate.canary, min_gain=cfg.gate.min_gain,
                                     gain_evidence=cfg.gate.gain_evidence,
                                     confirm=cfg.gate.confirm,
                                     confirm_queries=cfg.gate.confirm_queries,
                                     confirm_alpha=cfg.gate.confirm_alpha,
                                     supersede_margin=cfg.gate.supersede_margin,
                                     max_supersedes=cfg.gate.max_supersedes)
                row["gate"] = {"passed": g["passed"], "canary": g["canary"]}
                # fruitless: failed the gate or no gain; a candidate with a gain that only
                # lost its place in the canary queue to a better one has not walked away
                fruitful = g["eligible"] if cfg.gate.canary else g["passed"]
                gated = state | {"fruitless": 0 if fruitful else fruitless + 1}
                if cfg.gate.reset_after is not None and gated["fruitless"] >= cfg.gate.reset_after:
                    active = registry.state().active
                    back = registry.check(active, pool)
                    _set_learner_nets(algo, {PLANNER: back.planner.state_dict(),
                                             EXECUTOR: back.executor.state_dict()})
                    parent = row["reset_to"] = active
                    gated |= {"fruitless": 0, "parent": active,
                              "checkpoint": str(registry.path(active).resolve())}
                if gated != state:  # the learner's state after the gate, if it changed
                    ledger.commit(RolloutBatch(f"iter_{it}_gated", []), gated)
                fruitless = gated["fruitless"]
            done += 1
            with (out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            if on_row is not None:
                on_row(row)
    finally:
        algo.stop()
    return row
