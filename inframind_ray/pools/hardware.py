"""A pool model's serving facts on its GPUs: the measured profile moved to the model and GPU by
the named assumptions, and the KV capacity left beside its weights."""

from __future__ import annotations

from dataclasses import dataclass

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.config import ModelConfig
from inframind_ray.core.profile import IterationProfile
from inframind_ray.errors import ConfigError

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
    weights_gb = weights_of(m.recorded)
    kv = m.kv_capacity_tokens or kv_tokens(m.recorded, m.gpu, n_dst, m.memory_share)
    if kv < 2048:
        raise ConfigError(
            f"pool.models.{m.name}",
            f"{m.recorded} ({weights_gb:.0f} GB of weights) leaves no room for a KV cache on "
            f"{n_dst} x {m.gpu} at gpu_memory_utilization {m.memory_share:g}; add "
            "gpus_per_replica or memory share",
        )
    return Hardware(profile, kv, weights_gb)


def weights_of(recorded: str) -> float:
    """GB of weights of a recorded model's architecture (bf16 unless stated)."""
    a = _arch(recorded)
    return a["params_b"] * a.get("bytes_per_param", 2)


def kv_tokens(recorded: str, gpu: str, n_gpus: int, memory_share: float) -> int:
    """KV-cache tokens of one replica: its memory share of ``n_gpus`` GPUs, less the activation
    reserve per GPU and the weights, over the KV bytes per token (may be <= 0: does not fit)."""
    free = (memory_share * A.GPU_MEMORY_GB[gpu] - A.ACTIVATION_RESERVE_GB_PER_GPU) * n_gpus \
        - weights_of(recorded)
    return int(free * GB / _arch(recorded)["kv_bytes_per_token"])
