"""Outcome model: a pool model's answer to an MMLU-Pro item IS the recorded answer of the real model
it stands for (step-by-step strategy); other strategies and multi-agent rounds follow the named
assumptions in ``inframind_ray.assumptions``. Deterministic: the same (item, model, strategy,
inputs) always gives the same answer, whatever the order of events."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.tasks.prompts import LETTERS, format_answer

SIMULATED_TEXT = ("[twin engine: a simulated response; the twin replays recorded answers for "
                  "MMLU-Pro benchmark items only]")


def _u(*keys: object) -> float:
    """A deterministic uniform number in [0, 1) from the keys."""
    h = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def plurality(letters: Sequence[str], prefer: str | None = None) -> str | None:
    """Most common letter; ties go to ``prefer`` if tied, else to the earliest in ``letters``."""
    if not letters:
        return None
    counts = Counter(letters)
    top = max(counts.values())
    tied = [x for x in letters if counts[x] == top]
    return prefer if prefer in tied else tied[0]


class OutcomeModel:
    """Answers and output lengths of pool models on MMLU-Pro items.

    ``recorded_of`` maps pool model name -> recorded model name (see ``data.outcomes()``).
    """

    def __init__(self, recorded_of: Mapping[str, str], seed: int = 0) -> None:
        q = data.questions()
        rec = data.outcomes()
        unknown = [r for r in recorded_of.values() if r not in rec]
        if unknown:
            raise ValueError(f"no recorded answers for {unknown}")
        self.seed = seed
        self.qids = q["question_id"]
        self._index = {int(x): i for i, x in enumerate(self.qids)}
        self.answers = q["answer"]
        self.categories = q["category"]
        self.splits = q["split"]
        self.n_options = np.array([len(o) for o in q["options"]])
        words = np.array(
            [len(t.split()) + sum(len(o.split()) for o in opts)
             for t, opts in zip(q["question"], q["options"], strict=True)]
        )
        self.prompt_tokens = (np.ceil(words * A.TOKENS_PER_WORD).astype(int)
                              + A.PROMPT_OVERHEAD_TOKENS)
        self._rec = {m: rec[r] for m, r in recorded_of.items()}
        train_acc = {m: float(r["correct"][self.splits == "train"].mean())
                     for m, r in self._rec.items()}
        keep = A.SAMPLE_KEEPS_CORRECT
        self._p_fix = {m: min(1.0, a * (1.0 - keep) / max(1e-9, 1.0 - a))
                       for m, a in train_acc.items()}
        self.fewshot_tokens = self._fewshot_tokens(rec, words)
        self._full = {
            m: np.maximum(8, np.ceil(r["gen_words"] * A.TOKENS_PER_WORD)).astype(int)
            for m, r in self._rec.items()
        }
        train = self.splits == "train"
        self.max_tokens: dict[str, dict[Strategy, int]] = {}
        self.expected_tokens: dict[str, dict[Strategy, float]] = {}
        for m, full in self._full.items():
            cap = int(np.quantile(full[train], A.MAX_TOKENS_QUANTILE))
            self.max_tokens[m] = {
                Strategy.FLASH: A.STRATEGY_LENGTH[Strategy.FLASH][2],
                Strategy.CONCISE: A.STRATEGY_LENGTH[Strategy.CONCISE][2],
                Strategy.DEEPTHINK: cap,
            }
            self.expected_tokens[m] = {
                s: float(np.minimum(self._tokens(full[train], s), self.max_tokens[m][s]).mean())
                for s in Strategy
            }

    def _fewshot_tokens(self, rec: Mapping[str, Mapping[str, np.ndarray]],
                        q_words: np.ndarray) -> np.ndarray:
        """Per item: tokens of the category's worked examples (assumption FEW_SHOT_EXAMPLES)."""
        train = self.splits == "train"
        cot_words = np.mean([r["gen_words"] for r in rec.values()], axis=0)
        out = np.zeros(len(self.qids), int)
        for c in np.unique(self.categories):
            sel = self.categories == c
            per = (q_words[sel & train].mean() + cot_words[sel & train].mean()) * A.TOKENS_PER_WORD
            out[sel] = int(round(A.FEW_SHOT_EXAMPLES * per))
        return out

    # ------------------------------------------------------------------ lookups
    def index(self, item_id: int) -> int:
        """Row of an item id; KeyError with a clear message if unknown."""
        try:
            return self._index[int(item_id)]
        except KeyError:
            raise KeyError(f"unknown MMLU-Pro question id {item_id}") from None

    def recorded(self, model: str, item_id: int) -> tuple[str | None, bool, int]:
        """(recorded letter, recorded correct, recorded length in tokens) of a pool model."""
        i = self.index(item_id)
        r = self._rec[model]
        pred = str(r["pred"][i]) or None
        return pred, bool(r["correct"][i]), int(self._full[model][i])

    def is_correct(self, item_id: int, letter: str | None) -> bool:
        """Grade a letter against the item's answer."""
        return letter is not None and letter == self.answers[self.index(item_id)]

    def sample(self, model: str, item_id: int, k: int = 0) -> tuple[str | None, bool, int]:
        """The ``k``-th agent of a model in one query: k = 0 gives the recorded answer, k >= 1 a
        fresh sample (assumptions ``SAMPLE_KEEPS_CORRECT``, ``SAMPLE_REPEATS_WRONG``)."""
        pred, correct, full = self.recorded(model, item_id)
        if k == 0:
            return pred, correct, full
        i = self.index(item_id)
        truth = self.answers[i]
        if _u(self.seed, item_id, model, k, "sample") < (A.SAMPLE_KEEPS_CORRECT if correct
                                                          else self._p_fix[model]):
            return truth, True, full
        if not correct and _u(self.seed, item_id, model, k, "repeat") < A.SAMPLE_REPEATS_WRONG:
            return pred, False, full
        wrong = [x for x in LETTERS[:int(self.n_options[i])] if x != truth]
        if not wrong:
            return truth, True, full
        return wrong[int(_u(self.seed, item_id, model, k, "letter") * len(wrong))], False, full

    def train_accuracy(self, model: str) -> tuple[float, dict[str, float]]:
        """Overall and per-category accuracy of the recorded answers on the TRAIN split."""
        train = self.splits == "train"
        correct = self._rec[model]["correct"]
        by_cat = {
            str(c): float(correct[train & (self.categories == c)].mean())
            for c in np.unique(self.categories)
        }
        return float(correct[train].mean()), by_cat

    def length_budget(self, model: str, quantile: float) -> tuple[int, float]:
        """(token cap, expected output tokens under it) of step-by-step answers capped at this
        quantile of the model's recorded lengths on the TRAIN split."""
        full = self._full[model][self.splits == "train"]
        cap = int(np.quantile(full, quantile))
        return cap, float(np.minimum(full, cap).mean())

    @staticmethod
    def _tokens(full: np.ndarray | int, s: Strategy) -> np.ndarray | int:
        frac, lo, hi = A.STRATEGY_LENGTH[s]
        return np.clip(np.round(np.asarray(full) * frac), lo, hi).astype(int)

    # ------------------------------------------------------------------ answers
    def strategy_answer(
        self, item_id: int, model: str, strategy: Strategy, sample: int = 0
    ) -> tuple[str | None, int]:
        """A lone agent's (letter, output tokens) under a strategy; ``sample`` counts the earlier
        agents of the same model in the query (see :meth:`sample`)."""
        pred, correct, full = self.sample(model, item_id, sample)
        tokens = int(self._tokens(full, strategy))
        # sample 0 keeps the keys it always had, so single-agent outcomes are unchanged
        tag = (model, strategy.value) if sample == 0 else (model, strategy.value, sample)
        keep = _u(self.seed, item_id, *tag, "keep")
        if strategy is Strategy.DEEPTHINK or not correct or keep < A.STRATEGY_RETENTION[strategy]:
            letter = pred  # recorded answer (a wrong one stays wrong under every strategy)
        else:
            n = int(self.n_options[self.index(item_id)])
            wrong = [x for x in LETTERS[:n] if x != pred]
            # a one-option item (five in the train split) has no wrong option to pick
            letter = wrong[int(_u(self.seed, item_id, *tag, "wrong") * len(wrong))] if wrong \
                else pred
        if tokens > self.max_tokens[model][strategy]:
            return None, self.max_tokens[model][strategy]  # truncated: no answer
        return letter, tokens

    def reply(
        self,
        item_id: int | None,
        model: str,
        strategy: Strategy,
        kind: NodeKind,
        upstream: Sequence[str | None],
        max_tokens: int,
        sample: int = 0,
    ) -> tuple[str, int]:
        """(response text, output tokens) of one agent call, cut at ``max_tokens`` (a truncated
        answer says nothing). Free text (no item) gets a line saying it is simulated."""
        if item_id is not None:
            letter, tokens = self.respond(item_id, model, strategy, kind, upstream, sample)
            text = format_answer(letter)
        else:
            tokens, text = round(self.expected_tokens[model][strategy]), SIMULATED_TEXT
        if tokens > max_tokens:
            return format_answer(None), max_tokens
        return text, tokens

    def would_be_correct(self, item_id: int | None, model: str, strategy: Strategy) -> bool:
        """Whether a lone agent (model, strategy) answers the item right (the oracle's view)."""
        return item_id is not None and self.is_correct(
            item_id, self.strategy_answer(item_id, model, strategy)[0])

    def respond(
        self,
        item_id: int,
        model: str,
        strategy: Strategy,
        kind: NodeKind,
        upstream: Sequence[str | None] = (),
        sample: int = 0,
    ) -> tuple[str | None, int]:
        """(letter, output tokens) of one agent node given its upstream answers; ``sample`` counts
        the earlier agents of the same model (an agent keeps its sample across debate rounds)."""
        own, tokens = self.strategy_answer(item_id, model, strategy, sample)
        ups = [u for u in upstream if u]
        if kind is NodeKind.SOLVER or not ups:
            return own, tokens
        if kind is NodeKind.AGGREGATOR:
            votes = ups + ([own] if own and A.AGGREGATOR_VOTES_ITSELF else [])
            return plurality(votes, prefer=own), tokens
        peer = plurality(ups)
        if own == peer:
            return own, tokens
        truth = self.answers[self.index(item_id)]
        key: tuple = (self.seed, item_id, model, strategy.value, tuple(ups))
        if sample:
            key += (sample,)
        if own != truth and peer == truth and _u(*key, "adopt") < A.P_ADOPT_CORRECT:
            return peer, tokens
        if own == truth and peer != truth and _u(*key, "switch") < A.P_SWITCH_TO_WRONG:
            return peer, tokens
        return own, tokens


def tokens_for_words(words: int) -> int:
    """Words to tokens with the named factor."""
    return math.ceil(words * A.TOKENS_PER_WORD)
