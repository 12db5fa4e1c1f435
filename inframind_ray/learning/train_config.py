"""``inframind train``'s configuration (YAML, validated at load): the env, the warm start,
RLlib PPO, the Lagrangian, and the validation runs with their pools."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from inframind_ray import assumptions as A
from inframind_ray.config import PoolConfig, load_pool, read_yaml_extending, validated
from inframind_ray.errors import ConfigError
from inframind_ray.learning.env import EnvConfig
from inframind_ray.learning.warmstart import WarmStart


class PPOSettings(BaseModel):
    """RLlib PPO settings (new API stack)."""

    model_config = ConfigDict(extra="forbid")
    iterations: int = Field(20, ge=0)
    lr: float = Field(1e-4, gt=0)
    train_batch_size: int = Field(2000, ge=32)
    minibatch_size: int = Field(256, ge=8)
    num_epochs: int = Field(4, ge=1)
    entropy_coeff: float = Field(0.003, ge=0)
    clip_param: float = Field(0.2, gt=0)
    vf_loss_coeff: float = Field(0.5, ge=0)
    sampler: Literal["decisions", "rllib"] = "decisions"
    """``decisions``: ``DecisionEnvRunner`` (batched forward passes, one small episode per
    finished query; learning/env_runner.py); ``rllib``: RLlib's ``MultiAgentEnvRunner`` on the
    env's step protocol (slower; its cost grows with the episode's agents)."""
    num_env_runners: int = Field(0, ge=0)
    """Remote sampling processes (0: sample in the driver)."""
    num_envs_per_env_runner: int = Field(1, ge=1)
    overlap: bool = False
    """Sample the next batch while the learner updates on this one (learning/overlap.py): one
    remote env runner (``num_env_runners: 1``), one iteration of policy lag. A different
    algorithm from the default's strict alternation, so a recipe that turns it on is measured
    again (docs/learning.md, "Training throughput")."""
    decoupled: bool = False
    """PPO's decoupled objective (learning/decoupled.py): the clip centred on the learner's
    weights when the update starts, the sampling policy only as an importance weight on the
    advantage. For ``overlap``'s one iteration of lag; without lag it is PPO."""
    num_learners: int = Field(0, ge=0)
    """Learner actors that run the update (0: in the driver). On a multi-node cluster Ray
    places them like any actor: with ``num_gpus_per_learner`` on a GPU node, with
    ``learner_resources`` on the node type of ``cluster.yaml`` that offers those resources."""
    num_gpus_per_learner: float = Field(0.0, ge=0)
    learner_resources: dict[str, float] = Field(default_factory=dict)
    """Custom resources each learner actor asks for (needs ``num_learners`` >= 1)."""
    torch_threads: int = Field(1, ge=1)
    """Torch intra-op threads of the learner's update in this process. Sampling always runs
    with one (``DecisionEnvRunner.sample``): its batch-16 forward passes gain nothing from
    more, and on a shared 2-core machine OpenMP's waiting threads made them 100x slower
    (docs/learning.md, "Training throughput"). 2 on two free cores made whole iterations about
    a fifth faster (the shipped ``rllib_configs/default.yaml``); on a shared machine keep 1.
    Remote env runners get Ray's one thread per CPU."""

    @model_validator(mode="after")
    def _resources_need_actors(self) -> PPOSettings:
        if self.learner_resources and self.num_learners == 0:
            raise ValueError("learner_resources needs num_learners >= 1 (the driver's own "
                             "learner cannot be placed)")
        if self.overlap and (self.num_env_runners != 1 or self.sampler != "decisions"):
            raise ValueError("overlap needs num_env_runners: 1 and sampler: decisions")
        return self


class LagrangianSettings(BaseModel):
    """Dual ascent on the latency constraint (mean lateness cost <= cost_target) and, when
    ``accuracy_floor`` (S0) is set, on LAMaS's accuracy floor: mean accuracy (a right answer,
    however late) >= S0, with its own multiplier mu."""

    model_config = ConfigDict(extra="forbid")
    lam_init: float = Field(1.0, ge=0)
    lam_lr: float = Field(1.0, ge=0)
    """The dual step eta; 0 holds lambda at ``lam_init``."""
    cost_target: float = Field(0.01, ge=0, le=1)
    lam_max: float = Field(50.0, gt=0)
    accuracy_floor: float | None = Field(None, ge=0, le=1)
    mu_init: float = Field(0.0, ge=0)
    mu_lr: float = Field(2.0, gt=0)
    mu_max: float = Field(20.0, gt=0)


class EvalSettings(BaseModel):
    """Validation runs in the twin (val split), with the bench's own cell runner, on every
    validation pool at every rate (or load factor)."""

    model_config = ConfigDict(extra="forbid")
    every: int = Field(5, ge=1)
    rates: list[float] = [10.0, 150.0, 300.0]
    load_factors: list[float] | None = None
    """Instead of ``rates``: factors of each validation pool's capacity proxy
    (``learning/pools_draw.capacity_rpm``, assumption ``LOAD_CAPACITY_PROXY``), so that pools of
    different sizes are validated at comparable loads."""
    queries: int = Field(200, ge=10)
    duration_s: float | None = Field(None, gt=0)
    """Instead of ``queries``: every cell's arrivals span this many simulated seconds (rate x
    duration queries, as ``inframind bench --duration``), so a cell at a given load is a
    sustained load on every pool, not a burst whose length shrinks as the pool grows."""
    budget: tuple[float, float] = A.BUDGET_RANGE_S
    seed: int = 1
    pools: list[str] | None = None
    """Validation pools (shipped names or files); None: the env's pool. A held-out test pool
    (``pools/heldout/``) is refused at load: validation must not see the test pools."""
    sampled_pools: int = Field(0, ge=0)
    """Also this many random pools of ``pools.sampler`` drawn from ``pool_seed`` (the training
    distribution, other draws than the env's, which come from the run's seed)."""
    pool_seed: int = 20261202
    report_seed: int | None = None
    """When set, after training the kept checkpoint and the run's first one (the warm start, or
    the untrained policy) are evaluated again, side by side, on this seed's validation draws
    (other val-split items and arrivals than ``seed``'s). The kept checkpoint is *selected* on
    ``seed``'s rows, so only this second evaluation compares it with its warm start without
    selection bias (``summary.json: report``)."""

    @model_validator(mode="after")
    def _rates_or_factors(self) -> EvalSettings:
        if self.load_factors is not None and not self.load_factors:
            raise ValueError("load_factors: give at least one factor, or leave it out")
        if any(f <= 0 for f in self.load_factors or ()):
            raise ValueError("load_factors must be > 0")
        return self


class TrainConfig(BaseModel):
    """A training run (YAML, validated at load)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "inframind"
    seed: int = 0
    hidden: int = Field(128, ge=8)
    env: EnvConfig = EnvConfig()
    warm_start: WarmStart | None = WarmStart()
    ppo: PPOSettings = PPOSettings()
    lagrangian: LagrangianSettings = LagrangianSettings()
    eval: EvalSettings = EvalSettings()


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a training config (its validation pools too; ``extends:`` another
    config file, with only what differs); ConfigError with one line otherwise."""
    cfg = validated(TrainConfig, read_yaml_extending(path, "config"), source=str(path))
    validation_pools(cfg)
    return cfg


def validation_pools(cfg: TrainConfig) -> list[tuple[str, PoolConfig]]:
    """(name, pool) of every validation pool: ``eval.pools`` (default the env's pool), then
    ``eval.sampled_pools`` random ones named ``sampled-K``; ConfigError on a missing or
    held-out pool."""
    from inframind_ray.pools.sampler import is_heldout, sample_pool

    out = []
    for name in cfg.eval.pools or [cfg.env.pool]:
        try:
            pool = load_pool(name)
        except ConfigError as e:
            raise ConfigError("eval.pools", e.message) from None
        if is_heldout(pool):
            raise ConfigError("eval.pools", f"{name!r} is a held-out test pool (its model set or "
                              "GPU type is a pools/heldout/ pool's): validate on other pools")
        out.append((Path(name).stem if name.endswith(".yaml") else name, pool))
    rng = np.random.default_rng(cfg.eval.pool_seed)
    out += [(f"sampled-{k}", sample_pool(rng)) for k in range(cfg.eval.sampled_pools)]
    return out
