"""Model cards: the static facts of every pool model that policies may use (profile, slots, KV
capacity, token caps, train-split accuracy), built from the pool file and the recorded data."""

from __future__ import annotations

from inframind_ray.config import PoolConfig
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import ModelInfo, PoolInfo
from inframind_ray.policy.base import TOKEN_BUDGET_QUANTILE
from inframind_ray.pools.hardware import derive_hardware
from inframind_ray.twin.outcome import OutcomeModel


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
