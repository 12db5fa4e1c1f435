"""What the recorded MMLU-Pro answers say about a model, for its card and for the twin's replay:
per-item answer lengths in tokens, the Flash/Concise/DeepThink token caps and expected output
tokens, train-split accuracy overall and per category, and the DeepThink length budget. Keyed by
recorded model name; computed once per process. Train split only (never the test split)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.strategy import Strategy
from inframind_ray.tasks.mmlu_pro import mmlu_pro


def strategy_tokens(full: np.ndarray | int, s: Strategy) -> np.ndarray | int:
    """Output tokens under a strategy of an answer whose step-by-step length is ``full``
    (assumption STRATEGY_LENGTH)."""
    frac, lo, hi = A.STRATEGY_LENGTH[s]
    return np.clip(np.round(np.asarray(full) * frac), lo, hi).astype(int)


@dataclass(frozen=True)
class RecordedModel:
    """One recorded model's answers (arrays aligned with the MMLU-Pro rows) and their statistics
    on the train split."""

    name: str
    pred: np.ndarray
    correct: np.ndarray
    full_tokens: np.ndarray  # step-by-step answer length in tokens, per item
    accuracy: float  # train split
    accuracy_by_category: dict[str, float]  # train split
    max_tokens: dict[Strategy, int]
    expected_tokens: dict[Strategy, float]

    def length_budget(self, quantile: float) -> tuple[int, float]:
        """(token cap, expected output tokens under it) of step-by-step answers capped at this
        quantile of the model's recorded lengths on the train split."""
        full = self.full_tokens[mmlu_pro().splits == "train"]
        cap = int(np.quantile(full, quantile))
        return cap, float(np.minimum(full, cap).mean())


@lru_cache(maxsize=64)
def recorded_model(name: str) -> RecordedModel:
    """The recorded answers and statistics of one model; ValueError if none are shipped."""
    rec = data.outcomes()
    if name not in rec:
        raise ValueError(f"no recorded answers for {name!r}")
    r = rec[name]
    task = mmlu_pro()
    train = task.splits == "train"
    full = np.maximum(8, np.ceil(r["gen_words"] * A.TOKENS_PER_WORD)).astype(int)
    cap = int(np.quantile(full[train], A.MAX_TOKENS_QUANTILE))
    max_tokens = {
        Strategy.FLASH: A.STRATEGY_LENGTH[Strategy.FLASH][2],
        Strategy.CONCISE: A.STRATEGY_LENGTH[Strategy.CONCISE][2],
        Strategy.DEEPTHINK: cap,
    }
    expected = {s: float(np.minimum(strategy_tokens(full[train], s), max_tokens[s]).mean())
                for s in Strategy}
    correct = r["correct"]
    by_cat = {str(c): float(correct[train & (task.categories == c)].mean())
              for c in np.unique(task.categories)}
    return RecordedModel(name, r["pred"], correct, full, float(correct[train].mean()), by_cat,
                         max_tokens, expected)
