"""What the recorded MMLU-Pro answers say about a model, for its card and for the twin's replay:
per-item answer lengths in tokens, the Flash/Concise/DeepThink token caps and expected output
tokens, train-split accuracy overall and per category, and the DeepThink length budget. Keyed by
recorded model name; computed once per process. Train split only (never the test split)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.strategy import Strategy
from inframind_ray.grading import CODE_FAMILIES
from inframind_ray.model_card import CARD_KEY, card_accuracy
from inframind_ray.tasks.mmlu_pro import mmlu_pro
from inframind_ray.tasks.prompts import LETTERS


def strategy_tokens(full: np.ndarray | int, s: Strategy) -> np.ndarray | int:
    """Output tokens under a strategy of an answer whose step-by-step length is ``full``
    (assumption STRATEGY_LENGTH)."""
    frac, lo, hi = A.STRATEGY_LENGTH[s]
    return np.clip(np.round(np.asarray(full) * frac), lo, hi).astype(int)


def tail_right(full: np.ndarray, right: np.ndarray, cap: int) -> bool:
    """Whether the answers longer than ``cap`` (lengths ``full``, 1/0 or pass@1 ``right``) are
    right at least ``A.BUDGET_TAIL_MAX_ACCURACY`` of the time, or fewer than
    ``A.BUDGET_TAIL_MIN_ANSWERS`` to tell: a budget there would cut answers worth keeping."""
    above = full > cap
    if int(above.sum()) < A.BUDGET_TAIL_MIN_ANSWERS:
        return True
    return float(np.nanmean(right[above])) >= A.BUDGET_TAIL_MAX_ACCURACY


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

    def tail_right(self, cap: int) -> bool:
        """Whether its train answers longer than ``cap`` are mostly right (``tail_right``)."""
        train = mmlu_pro().splits == "train"
        return tail_right(self.full_tokens[train], self.correct[train].astype(float), cap)


def _card_key(name: str) -> tuple[str, str] | None:
    """(recorded model, card path) of a ``card:`` replay key, else None."""
    if not name.startswith(CARD_KEY):
        return None
    base, _, path = name[len(CARD_KEY):].partition(":")
    return base, path


def _draws(base: str, path: str, what: str, n: int) -> np.ndarray:
    """Seeded uniform draws per item for the card at ``path`` re-weighting recorded model ``base``
    (independent of everything else the twin draws). The seed is the recorded model and the
    card's contents, not its path, so the same card replays the same answers from any checkout."""
    content = sorted(card_accuracy(path).items())
    return np.random.default_rng(zlib.crc32(f"{base}:{content}:{what}".encode())).random(n)


def card_conditionals(a: float, target: float) -> tuple[float, float]:
    """(P(right | recorded right), P(right | recorded wrong)) of a card's model given the
    recorded model it re-weights, of accuracy ``a``: mean ``target``, with the dependence
    ``assumptions.CARD_DEPENDENCE`` on the recorded answers (see CARD_OUTCOMES)."""
    k = A.CARD_DEPENDENCE
    if a <= 0.0 or a >= 1.0:
        return target, target
    if target <= a:  # weaker than its recorded model: rarely right where that one is wrong
        c_w = k * target
        return (target - (1.0 - a) * c_w) / a, c_w
    c_r = 1.0 - k * (1.0 - target)  # stronger: rarely wrong where that one is right
    return c_r, (target - a * c_r) / (1.0 - a)


def reweighted(correct: np.ndarray, target: float, u: np.ndarray) -> np.ndarray:
    """Right/wrong per item of a card's model: right with ``card_conditionals`` given the
    recorded answer, by the seeded draws ``u``."""
    c_r, c_w = card_conditionals(float(correct.mean()) if len(correct) else 0.0, target)
    return np.where(correct, u < c_r, u < c_w)


def _mmlu_answers(name: str) -> dict[str, np.ndarray]:
    """The per-item arrays a replay key stands for: a recorded model's, or (``card:``) its
    answers re-weighted to the card's MMLU-Pro accuracy (a wrong answer becomes the right letter,
    a right one a seeded wrong letter); ValueError if none are shipped."""
    rec = data.outcomes()
    base, path = _card_key(name) or (name, None)
    if base not in rec:
        raise ValueError(f"no recorded answers for {base!r}")
    if path is None:
        return rec[base]
    r, task = rec[base], mmlu_pro()
    old = np.asarray(r["correct"], bool)
    new = reweighted(old, card_accuracy(path)["mmlu_pro"], _draws(base, path, "mmlu_pro", len(old)))
    pred = np.array(r["pred"], dtype=object)
    pred[new & ~old] = task.answers[new & ~old]
    u = _draws(base, path, "mmlu_pro:letter", len(old))
    for i in np.flatnonzero(old & ~new):
        n = int(task.n_options[i])
        wrong = [x for x in LETTERS[:n] if x != task.answers[i]]
        if wrong:
            pred[i] = wrong[int(u[i] * len(wrong))]
        else:
            new[i] = True  # a one-option item cannot be answered wrong
    return {**r, "pred": pred, "correct": new}


def _family_answers(family: str, name: str) -> dict[str, np.ndarray]:
    """The per-item arrays of a replay key on an item family (``card:``: re-weighted to the
    card's accuracy there: GSM8K/MATH right/wrong per item, code pass@1 scaled); ValueError if
    none are shipped."""
    rec = data.task_outcomes(family)
    base, path = _card_key(name) or (name, None)
    if base not in rec:
        raise ValueError(f"no recorded {family} answers for {base!r}")
    r = rec[base]
    if path is None:
        return r
    target, seen = card_accuracy(path)[family], np.asarray(r["recorded"], bool)
    if family in CODE_FAMILIES:
        p = np.asarray(r["pass_at_1"], float)
        c_r, c_w = card_conditionals(float(np.nanmean(p[seen])), target)
        return {**r, "pass_at_1": p * c_r + (1.0 - p) * c_w}  # the same rule, in expectation
    old = np.asarray(r["correct"], bool)
    new = old.copy()
    new[seen] = reweighted(old[seen], target, _draws(base, path, family, int(seen.sum())))
    return {**r, "correct": new}


@lru_cache(maxsize=64)
def recorded_model(name: str) -> RecordedModel:
    """The recorded answers (or a card's re-weighting of them) and statistics of one replay
    key; ValueError if none are shipped."""
    r = _mmlu_answers(name)
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


def family_strategy_tokens(full: np.ndarray | int, s: Strategy, family: str) -> np.ndarray | int:
    """Output tokens under a strategy on a task family (assumption STRATEGY_LENGTH_BY_TASK)."""
    frac, lo, hi = A.STRATEGY_LENGTH_BY_TASK[family][s]
    return np.clip(np.round(np.asarray(full) * frac), lo, hi).astype(int)


@dataclass(frozen=True)
class RecordedTaskModel:
    """One recorded model on one of the item families (GSM8K, MATH, HumanEval, MBPP), arrays
    aligned with ``data.task_items(family)``: ``p_correct`` is 1/0 for a replayed greedy answer
    (GSM8K, MATH) and the recorded pass@1 for code (NaN where not recorded); statistics on the
    train split's recorded items."""

    family: str
    name: str
    p_correct: np.ndarray
    full_tokens: np.ndarray  # DeepThink answer length in tokens, per item
    accuracy: float
    max_tokens: dict[Strategy, int]
    expected_tokens: dict[Strategy, float]

    def length_budget(self, quantile: float) -> tuple[int, float]:
        """(token cap, expected output tokens under it) at this quantile of train lengths."""
        full = self.full_tokens[_train_recorded(self.family)]
        cap = int(np.quantile(full, quantile))
        return cap, float(np.minimum(full, cap).mean())

    def tail_right(self, cap: int) -> bool:
        """Whether its train answers longer than ``cap`` are mostly right (``tail_right``)."""
        train = _train_recorded(self.family)
        return tail_right(self.full_tokens[train], self.p_correct[train], cap)


def _train_recorded(family: str) -> np.ndarray:
    """Train-split items with records (code: the tasks EvalPlus profiled)."""
    items = data.task_items(family)
    return (items["split"] == "train") & np.asarray(items["recorded"], bool)


@lru_cache(maxsize=128)
def recorded_task_model(family: str, name: str) -> RecordedTaskModel:
    """The records of one replay key on an item family; ValueError if none are shipped."""
    rec = data.task_outcomes(family)
    r = _family_answers(family, name)
    train = _train_recorded(family)
    if family in CODE_FAMILIES:
        p = np.asarray(r["pass_at_1"], float)
        p = np.where(r["recorded"], p, np.nan)
        chars = np.asarray(r["solution_chars"], float)
        every = np.stack([np.asarray(o["solution_chars"], float) for o in rec.values()])
        every = np.where(np.isnan(every).all(axis=0), np.nan,
                         np.nansum(every, axis=0) / np.maximum(1, (~np.isnan(every)).sum(axis=0)))
        chars = np.where(np.isnan(chars), every, chars)
        chars = np.where(np.isnan(chars), np.nanmean(chars), chars)
        full = np.ceil(chars / A.CODE_CHARS_PER_TOKEN).astype(int) + A.CODE_REASONING_TOKENS
        acc = float(np.nanmean(p[train]))
    else:
        p = np.asarray(r["correct"], float)
        full = np.maximum(8, np.ceil(np.asarray(r["output_words"]) * A.TOKENS_PER_WORD)
                          ).astype(int)
        acc = float(p[train].mean())
    cap = int(np.quantile(full[train], A.MAX_TOKENS_QUANTILE))
    length = A.STRATEGY_LENGTH_BY_TASK[family]
    max_tokens = {Strategy.FLASH: length[Strategy.FLASH][2],
                  Strategy.CONCISE: length[Strategy.CONCISE][2], Strategy.DEEPTHINK: cap}
    expected = {s: float(np.minimum(family_strategy_tokens(full[train], s, family),
                                    max_tokens[s]).mean()) for s in Strategy}
    return RecordedTaskModel(family, name, p, full, acc, max_tokens, expected)
