"""Random pools for training (``sample_pool``): a model subset of the catalog, one GPU type,
tensor parallelism, replicas and sequence slots drawn from stated ranges. Never a held-out pool:
a draw whose model set equals a held-out pool's is drawn again, and the held-out GPU type
(GH200) is never drawn. Deterministic given the generator; a draw takes well under 5 ms."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from inframind_ray.config import POOLS_DIR, PoolConfig, read_yaml
from inframind_ray.pools.catalog import catalog
from inframind_ray.pools.hardware import kv_tokens, weights_of

HELDOUT_DIR = POOLS_DIR / "heldout"
HELDOUT_GPUS = ("GH200-96GB",)
"""GPU types no sampled pool uses (the held-out pools run on them)."""
VLLM_DEFAULTS = {"H100-80GB": (1024, 8192), "H200-141GB": (1024, 8192),
                 "GH200-96GB": (1024, 8192), "A100-80GB": (256, 2048), "A100-40GB": (256, 2048)}
"""(max_num_seqs, max_num_batched_tokens) vLLM V1 picks for its API server per GPU: 1024 / 8192
on GPUs of >= 70 GiB that are not A100s, 256 / 2048 otherwise (vllm/engine/arg_utils.py)."""
MIN_KV_TOKENS = 32_768
"""Tensor parallelism: the smallest power of two whose KV cache holds 8 full 4,096-token
sequences beside the weights (the rule pools/default.yaml states)."""
TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class SamplerRanges:
    """What ``sample_pool`` draws from (the training distribution; docs/pools.md)."""

    min_models: int = 1
    max_models: int = 8
    gpus: tuple[str, ...] = ("H100-80GB", "H200-141GB", "A100-80GB", "A100-40GB")
    slots: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)  # capped at the GPU's vLLM default
    p_default_slots: float = 0.5  # probability of leaving max_num_seqs at vLLM's default
    p_double_tp: float = 0.25  # probability of twice the minimal tensor parallelism (<= 8)
    max_replicas_small: int = 4  # models under 30 GB of weights
    max_replicas_large: int = 2


@lru_cache(maxsize=1)
def heldout_model_sets() -> frozenset[frozenset[str]]:
    """The model-name sets of the held-out pools (pools/heldout/*.yaml)."""
    out = set()
    for p in sorted(HELDOUT_DIR.glob("*.yaml")):
        out.add(frozenset(m["name"] for m in read_yaml(p, "pool").get("models", [])))
    return frozenset(out)


@lru_cache(maxsize=256)
def min_tensor_parallel(recorded: str, gpu: str, memory_share: float = 0.9) -> int:
    """The smallest TP size in 1, 2, 4, 8 leaving ``MIN_KV_TOKENS`` of KV cache; ValueError if
    none does."""
    for tp in TP_SIZES:
        if kv_tokens(recorded, gpu, tp, memory_share) >= MIN_KV_TOKENS:
            return tp
    raise ValueError(f"{recorded} does not fit 8 x {gpu}")


def is_heldout(cfg: PoolConfig) -> bool:
    """True if the pool's model set is a held-out pool's, or it uses a held-out GPU type."""
    names = frozenset(m.name for m in cfg.models)
    return names in heldout_model_sets() or any(m.gpu in HELDOUT_GPUS for m in cfg.models)


def sample_pool(rng: np.random.Generator, ranges: SamplerRanges = SamplerRanges()) -> PoolConfig:
    """A random pool: k models (uniform in min..max) drawn without replacement from the catalog
    (redrawn while their set is a held-out pool's), in drawn order, on one GPU type drawn
    uniformly from ``ranges.gpus``; per model TP = the minimal one (doubled with
    ``p_double_tp``, at most 8), replicas uniform in 1..max (by size), max_num_seqs vLLM's
    default with ``p_default_slots`` else uniform among ``ranges.slots`` below it."""
    cat = catalog()
    names = list(cat)
    held = heldout_model_sets()
    hi = min(ranges.max_models, len(names))
    while True:
        k = int(rng.integers(ranges.min_models, hi + 1))
        chosen = [names[i] for i in rng.choice(len(names), size=k, replace=False)]
        if frozenset(chosen) not in held:
            break
    gpu = str(ranges.gpus[int(rng.integers(len(ranges.gpus)))])
    if gpu in HELDOUT_GPUS:
        raise ValueError(f"{gpu} is held out of training pools")
    seqs_default, batched = VLLM_DEFAULTS[gpu]
    slot_choices = [s for s in ranges.slots if s < seqs_default] or [seqs_default]
    models = []
    for name in chosen:
        e = cat[name]
        tp = min_tensor_parallel(e.recorded, gpu)
        if tp < TP_SIZES[-1] and rng.random() < ranges.p_double_tp:
            tp *= 2
        small = weights_of(e.recorded) < 30
        replicas = int(rng.integers(1, (ranges.max_replicas_small if small
                                        else ranges.max_replicas_large) + 1))
        seqs = (seqs_default if rng.random() < ranges.p_default_slots
                else int(slot_choices[int(rng.integers(len(slot_choices)))]))
        models.append({**e.fields(), "gpu": gpu, "gpus_per_replica": tp, "replicas": replicas,
                       "max_num_seqs": seqs})
    return PoolConfig.model_validate({
        "name": "sampled", "description": f"{k} catalog models on {gpu} (pools/sampler.py)",
        "engine": {"max_batched_tokens": batched}, "models": models})
