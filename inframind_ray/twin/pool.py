"""Build a pool from its config: scaled profiles, KV capacities, engines and the PoolInfo policies
see."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.engine.profile import IterationProfile
from inframind_ray.errors import ConfigError
from inframind_ray.policy.base import (
    TOKEN_BUDGET_QUANTILE,
    ModelInfo,
    ModelLoad,
    PoolInfo,
    SystemState,
)
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.workflow.prompts import Strategy

GB = 1e9


@dataclass(frozen=True)
class Hardware:
    """A pool model's derived serving facts."""

    profile: IterationProfile
    kv_capacity: int
    weights_gb: float


def _arch(name: str) -> dict:
    archs = data.profiles()["architectures"]
    if name not in archs:
        raise ConfigError("pool.models", f"no architecture known for {name!r}")
    return archs[name]


def derive_hardware(m: ModelConfig) -> Hardware:
    """Move the measured profile to this model and GPU (named assumptions) and size its KV cache."""
    prof = data.profiles()["profiles"][m.profile]
    src, dst = _arch(prof["architecture"]), _arch(m.recorded)
    n_src, n_dst = prof["num_gpus"], m.gpus_per_replica
    bw = A.GPU_MEMORY_BANDWIDTH_TBPS
    tf = A.GPU_DENSE_BF16_TFLOPS
    mem_f = (bw[m.gpu] * n_dst) / (bw[prof["hardware"]] * n_src)
    cmp_f = (tf[m.gpu] * n_dst) / (tf[prof["hardware"]] * n_src)
    w_ratio = dst["params_b"] / src["params_b"]
    c_ratio = dst.get("active_params_b", dst["params_b"]) / src.get("active_params_b",
                                                                     src["params_b"])
    kv_ratio = dst["kv_bytes_per_token"] / src["kv_bytes_per_token"]
    profile = IterationProfile(
        c0=prof["c0_s"] * w_ratio / mem_f,
        c_prefill=prof["c_prefill_s"] * c_ratio / cmp_f,
        c_decode=prof["c_decode_s"] * c_ratio / mem_f,
        c_kv=prof["c_kv_s"] * kv_ratio / mem_f,
    )
    weights_gb = dst["params_b"] * dst.get("bytes_per_param", 2)
    free = (A.GPU_MEMORY_UTILIZATION * A.GPU_MEMORY_GB[m.gpu]
            - A.ACTIVATION_RESERVE_GB_PER_GPU) * n_dst - weights_gb
    kv = m.kv_capacity_tokens or int(free * GB / dst["kv_bytes_per_token"])
    if kv < 2048:
        raise ConfigError(
            f"pool.models.{m.name}",
            f"{m.recorded} ({weights_gb:.0f} GB of weights) leaves no room for a KV cache on "
            f"{n_dst} x {m.gpu}; add gpus_per_replica",
        )
    return Hardware(profile, kv, weights_gb)


def build_pool_info(cfg: PoolConfig, outcome: OutcomeModel) -> PoolInfo:
    """Static facts per model (train-split accuracies, token caps, profile)."""
    models = []
    for m in cfg.models:
        hw = derive_hardware(m)
        acc, by_cat = outcome.train_accuracy(m.name)
        budget, budget_expected = outcome.length_budget(m.name, TOKEN_BUDGET_QUANTILE)
        models.append(
            ModelInfo(
                name=m.name,
                profile=hw.profile,
                max_num_seqs=m.max_num_seqs,
                replicas=m.replicas,
                kv_capacity=hw.kv_capacity,
                max_tokens=outcome.max_tokens[m.name],
                expected_tokens=outcome.expected_tokens[m.name],
                accuracy_by_category=by_cat,
                accuracy=acc,
                budget_tokens=min(budget, outcome.max_tokens[m.name][Strategy.DEEPTHINK]),
                budget_expected_tokens=budget_expected,
            )
        )
    return PoolInfo(tuple(models))


class ModelReplicas:
    """The replicas of one pool model; new requests join the shortest queue."""

    def __init__(self, name: str, engines: list[TwinEngine]) -> None:
        self.name = name
        self.engines = engines

    def pick(self) -> TwinEngine:
        """Join-shortest-queue among replicas."""
        return min(self.engines, key=lambda e: len(e.waiting) + len(e.running))

    def load(self) -> ModelLoad:
        """Aggregate snapshot of all replicas."""
        snaps = [e.snapshot() for e in self.engines]
        return ModelLoad.from_replicas(self.name, snaps, min(s.timestamp for s in snaps))


def pool_state(engines: dict[str, ModelReplicas]) -> SystemState:
    """Every model's live load, timestamped by the running loop's clock."""
    return SystemState(asyncio.get_running_loop().time(),
                       {m: r.load() for m, r in engines.items()})


def pool_history(engines: dict[str, ModelReplicas], info: PoolInfo, seed: int,
                 share: float = 1.0) -> None:
    """Give each model (with probability ``share``) the latency EWMAs of a past load, as a
    served pool has: a random batch size, strategy and prefill-queueing factor on its own
    profile. Without it a model no request has reached reports zero latency."""
    rng = np.random.default_rng(seed)
    for m in info.models:
        if rng.random() >= share:
            continue
        p, b = m.profile, int(rng.integers(1, m.max_num_seqs + 1))
        tpot = p.iteration_time(0, b, 0.0)
        ttft = p.iteration_time(512, b - 1, 0.0) * float(rng.uniform(1.0, 10.0))
        out = m.expected_tokens[tuple(Strategy)[int(rng.integers(len(Strategy)))]]
        for e in engines[m.name].engines:
            e.seed_history(ttft, tpot, ttft + tpot * max(0.0, out - 1))


class MetricsView:
    """The pool's load as policies read it: fresh at every read (``period_s`` 0, the default,
    assumption ``METRICS_FRESH_IN_TWIN``), or a snapshot refreshed every ``period_s`` simulated
    seconds, as the serving plane's metrics push delivers it (ages grow between refreshes)."""

    def __init__(self, engines: dict[str, ModelReplicas], period_s: float = 0.0) -> None:
        self.engines, self.period_s = engines, period_s
        self._snap: SystemState | None = None

    def __call__(self) -> SystemState:
        now = asyncio.get_running_loop().time()
        if self._snap is None or now - self._snap.now >= self.period_s:
            self._snap = pool_state(self.engines)
        return SystemState(now, self._snap.models)


def build_engines(cfg: PoolConfig, scheduling: str | None = None) -> dict[str, ModelReplicas]:
    """One TwinEngine per replica (``scheduling`` overrides the pool's)."""
    policy = scheduling or cfg.engine.scheduling
    out = {}
    for m in cfg.models:
        hw = derive_hardware(m)
        out[m.name] = ModelReplicas(
            m.name,
            [
                TwinEngine(
                    f"{m.name}/{r}",
                    hw.profile,
                    max_num_seqs=m.max_num_seqs,
                    kv_capacity_tokens=hw.kv_capacity,
                    max_batched_tokens=cfg.engine.max_batched_tokens,
                    scheduling=policy,
                )
                for r in range(m.replicas)
            ],
        )
    return out
