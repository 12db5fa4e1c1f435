"""Outcome model: a pool model's answer to an MMLU-Pro item IS the recorded answer of the real model
it stands for (step-by-step strategy); other strategies and multi-agent rounds follow the named
assumptions in ``inframind_ray.assumptions``. Deterministic: the same (item, model, strategy,
inputs) always gives the same answer, whatever the order of events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.pools.recorded import recorded_model, strategy_tokens
from inframind_ray.tasks.mmlu_pro import mmlu_pro
from inframind_ray.tasks.prompts import LETTERS, format_answer
from inframind_ray.twin.keys import fix_probability, plurality, uniform

SIMULATED_TEXT = ("[twin engine: a simulated response; the twin replays recorded answers for "
                  "benchmark items only]")


if TYPE_CHECKING:
    from inframind_ray.twin.item_outcome import ItemReplay



class OutcomeModel:
    """Answers and output lengths of pool models on MMLU-Pro items.

    ``recorded_of`` maps pool model name -> recorded model name (see ``data.outcomes()``). Item
    facts and grading come from the task family (``tasks/mmlu_pro.py``), each recorded model's
    lengths and statistics from ``pools/recorded.py``.
    """

    def __init__(self, recorded_of: Mapping[str, str], seed: int = 0,
                 family_records: Mapping[str, Mapping[str, str]] | None = None) -> None:
        # the other task families: {family: {pool model: recorded model}}, replayed on demand
        self._family_records = {f: dict(r) for f, r in (family_records or {}).items()}
        self._families: dict[str, ItemReplay] = {}
        self.seed = seed
        self.task = mmlu_pro()
        self._rec = {m: recorded_model(r) for m, r in recorded_of.items()}
        self._p_fix = {m: fix_probability(r.accuracy) for m, r in self._rec.items()}
        self.max_tokens = {m: r.max_tokens for m, r in self._rec.items()}
        self.expected_tokens = {m: r.expected_tokens for m, r in self._rec.items()}

    @classmethod
    def for_models(cls, models: Sequence, seed: int = 0) -> OutcomeModel:
        """The outcome model of pool models (``config.ModelConfig``): each replays its own
        records of every family, or the stand-in its pool entry names."""
        fams = {f: {m.name: r for m in models if (r := m.recorded_for(f)) is not None}
                for f in data.TASK_FAMILIES}
        return cls({m.name: m.recorded_for("mmlu_pro") for m in models}, seed, fams)

    def family(self, task: str) -> ItemReplay:
        """The replay of an item family; ValueError naming models without records for it."""
        if task not in self._families:
            recs = self._family_records.get(task, {})
            missing = [m for m in self._rec if m not in recs]
            if missing:
                raise ValueError(
                    f"no recorded {task} answers for pool model(s) {', '.join(missing)}: name a "
                    f"stand-in in the pool file (stand_ins: {{{task}: MODEL}})")
            from inframind_ray.twin.item_outcome import ItemReplay  # loads the graders

            self._families[task] = ItemReplay(task, recs, self.seed)
        return self._families[task]

    # ------------------------------------------------------------------ lookups
    def index(self, item_id: int) -> int:
        """Row of an item id; KeyError with a clear message if unknown."""
        return self.task.index(item_id)

    def recorded(self, model: str, item_id: int) -> tuple[str | None, bool, int]:
        """(recorded letter, recorded correct, recorded length in tokens) of a pool model."""
        i = self.index(item_id)
        r = self._rec[model]
        pred = str(r.pred[i]) or None
        return pred, bool(r.correct[i]), int(r.full_tokens[i])

    def lengths(self, model: str) -> np.ndarray:
        """Recorded step-by-step answer lengths (tokens) of a pool model, per MMLU-Pro row."""
        return self._rec[model].full_tokens

    def is_correct(self, item_id: int, letter: str | None, task: str = "mmlu_pro") -> bool:
        """Grade an extracted answer (MMLU-Pro: a letter) against the item's answer."""
        if task != "mmlu_pro":
            return self.family(task).is_correct(item_id, letter)
        return self.task.is_correct(item_id, letter)

    def sample(self, model: str, item_id: int, k: int = 0) -> tuple[str | None, bool, int]:
        """The ``k``-th agent of a model in one query: k = 0 gives the recorded answer, k >= 1 a
        fresh sample (assumptions ``SAMPLE_KEEPS_CORRECT``, ``SAMPLE_REPEATS_WRONG``)."""
        pred, correct, full = self.recorded(model, item_id)
        if k == 0:
            return pred, correct, full
        i = self.index(item_id)
        truth = self.task.answers[i]
        if uniform(self.seed, item_id, model, k, "sample") < (A.SAMPLE_KEEPS_CORRECT if correct
                                                          else self._p_fix[model]):
            return truth, True, full
        if not correct and uniform(self.seed, item_id, model, k, "repeat") < A.SAMPLE_REPEATS_WRONG:
            return pred, False, full
        wrong = [x for x in LETTERS[:int(self.task.n_options[i])] if x != truth]
        if not wrong:
            return truth, True, full
        return wrong[int(uniform(self.seed, item_id, model, k, "letter") * len(wrong))], False, full

    # ------------------------------------------------------------------ answers
    def strategy_answer(
        self, item_id: int, model: str, strategy: Strategy, sample: int = 0
    ) -> tuple[str | None, int]:
        """A lone agent's (letter, output tokens) under a strategy; ``sample`` counts the earlier
        agents of the same model in the query (see :meth:`sample`)."""
        pred, correct, full = self.sample(model, item_id, sample)
        tokens = int(strategy_tokens(full, strategy))
        # sample 0 keeps the keys it always had, so single-agent outcomes are unchanged
        tag = (model, strategy.value) if sample == 0 else (model, strategy.value, sample)
        keep = uniform(self.seed, item_id, *tag, "keep")
        if strategy is Strategy.DEEPTHINK or not correct or keep < A.STRATEGY_RETENTION[strategy]:
            letter = pred  # recorded answer (a wrong one stays wrong under every strategy)
        else:
            n = int(self.task.n_options[self.index(item_id)])
            wrong = [x for x in LETTERS[:n] if x != pred]
            # a one-option item (five in the train split) has no wrong option to pick
            letter = wrong[int(uniform(self.seed, item_id, *tag, "wrong") * len(wrong))] if wrong \
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
        task: str = "mmlu_pro",
        query: str = "",
    ) -> tuple[str, int]:
        """(response text, output tokens) of one agent call, cut at ``max_tokens`` (a truncated
        answer says nothing). Free text (no item) gets a line saying it is simulated."""
        if item_id is not None and task != "mmlu_pro":
            fam = self.family(task)
            text, tokens = fam.respond(item_id, model, strategy, kind, upstream, sample, query)
            if text is None or tokens > max_tokens:
                return format_answer(None), min(tokens, max_tokens)
            return text, tokens
        if item_id is not None:
            letter, tokens = self.respond(item_id, model, strategy, kind, upstream, sample)
            text = format_answer(letter)
        else:
            tokens, text = round(self.expected_tokens[model][strategy]), SIMULATED_TEXT
        if tokens > max_tokens:
            return format_answer(None), max_tokens
        return text, tokens

    def would_be_correct(self, item_id: int | None, model: str, strategy: Strategy,
                         task: str = "mmlu_pro", query: str = "") -> bool:
        """Whether a lone agent (model, strategy) answers the item right (the oracle's view;
        ``query``: the query id, on which code draws depend)."""
        if item_id is not None and task != "mmlu_pro":
            return self.family(task).would_be_correct(item_id, model, strategy, query)
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
        truth = self.task.answers[self.index(item_id)]
        key: tuple = (self.seed, item_id, model, strategy.value, tuple(ups))
        if sample:
            key += (sample,)
        if own != truth and peer == truth and uniform(*key, "adopt") < A.P_ADOPT_CORRECT:
            return peer, tokens
        if own == truth and peer != truth and uniform(*key, "switch") < A.P_SWITCH_TO_WRONG:
            return peer, tokens
        return own, tokens

