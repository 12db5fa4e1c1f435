"""Model cards: the static facts of every pool model that policies may use (profile, slots, KV
capacity, and per task family its train-split accuracy, token caps and expected lengths), built
from the pool file and the recorded data (``pools/recorded.py``), without the simulator."""

from __future__ import annotations

from inframind_ray import assumptions as A
from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import ModelInfo, PoolInfo, TaskCard
from inframind_ray.data import TASK_FAMILIES
from inframind_ray.pools.hardware import _arch, derive_hardware
from inframind_ray.pools.recorded import (
    RecordedModel,
    RecordedTaskModel,
    recorded_model,
    recorded_task_model,
)


def _budget(r: RecordedModel | RecordedTaskModel) -> tuple[int, float, bool]:
    """A card's DeepThink budget fields: the ``A.TOKEN_BUDGET_QUANTILE`` length (at most the
    serving cap), the expected output under it, and whether the answers it cuts are mostly
    right."""
    budget, expected = r.length_budget(A.TOKEN_BUDGET_QUANTILE)
    budget = min(budget, r.max_tokens[Strategy.DEEPTHINK])
    return budget, expected, r.tail_right(budget)


def task_cards(m: ModelConfig) -> dict[str, TaskCard]:
    """A card per task family the model has records (or a stand-in) for, MMLU-Pro first."""
    rec = recorded_model(m.recorded_for("mmlu_pro"))
    cards = {"mmlu_pro": TaskCard(
        rec.accuracy, dict(rec.accuracy_by_category), dict(rec.max_tokens),
        dict(rec.expected_tokens), A.STRATEGY_RETENTION_BY_TASK["mmlu_pro"], *_budget(rec))}
    for fam in TASK_FAMILIES:
        name = m.recorded_for(fam)
        if name is None:
            continue
        r = recorded_task_model(fam, name)
        cards[fam] = TaskCard(r.accuracy, {}, dict(r.max_tokens),
                              dict(r.expected_tokens), A.STRATEGY_RETENTION_BY_TASK[fam],
                              *_budget(r))
    return cards


def build_pool_info(cfg: PoolConfig) -> PoolInfo:
    """Static facts per model (train-split accuracies, token caps, profile)."""
    models = []
    for m in cfg.models:
        hw = derive_hardware(m)
        cards = task_cards(m)
        mmlu = cards["mmlu_pro"]
        models.append(
            ModelInfo(
                name=m.name,
                profile=hw.profile,
                max_num_seqs=m.max_num_seqs,
                replicas=m.replicas,
                kv_capacity=hw.kv_capacity,
                max_tokens=dict(mmlu.max_tokens),
                expected_tokens=dict(mmlu.expected_tokens),
                accuracy_by_category=dict(mmlu.accuracy_by_category),
                accuracy=mmlu.accuracy,
                budget_tokens=mmlu.budget_tokens,
                budget_expected_tokens=mmlu.budget_expected_tokens,
                tasks=cards,
                params_b=float(_arch(m.recorded)["params_b"]),
            )
        )
    return PoolInfo(tuple(models))
