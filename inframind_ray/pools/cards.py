"""Model cards: the static facts of every pool model that policies may use (profile, slots, KV
capacity, token caps, train-split accuracy), built from the pool file and the recorded data
(``pools/recorded.py``), without the simulator."""

from __future__ import annotations

from inframind_ray.assumptions import TOKEN_BUDGET_QUANTILE
from inframind_ray.config import PoolConfig
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import ModelInfo, PoolInfo
from inframind_ray.pools.hardware import derive_hardware
from inframind_ray.pools.recorded import recorded_model


def build_pool_info(cfg: PoolConfig) -> PoolInfo:
    """Static facts per model (train-split accuracies, token caps, profile)."""
    models = []
    for m in cfg.models:
        hw = derive_hardware(m)
        rec = recorded_model(m.recorded)
        budget, budget_expected = rec.length_budget(TOKEN_BUDGET_QUANTILE)
        models.append(
            ModelInfo(
                name=m.name,
                profile=hw.profile,
                max_num_seqs=m.max_num_seqs,
                replicas=m.replicas,
                kv_capacity=hw.kv_capacity,
                max_tokens=dict(rec.max_tokens),
                expected_tokens=dict(rec.expected_tokens),
                accuracy_by_category=dict(rec.accuracy_by_category),
                accuracy=rec.accuracy,
                budget_tokens=min(budget, rec.max_tokens[Strategy.DEEPTHINK]),
                budget_expected_tokens=budget_expected,
            )
        )
    return PoolInfo(tuple(models))
