"""Outcome replay on GSM8K, MATH level 5, HumanEval and MBPP: a pool model's DeepThink answer is
the recorded greedy answer of the real model it stands for (GSM8K, MATH), or a pass/fail draw at
that model's recorded pass@1 (code, assumption CODE_SAMPLES_INDEPENDENT). Other strategies and
multi-agent rounds follow the named assumptions, as on MMLU-Pro (``twin/outcome.py``).

Answers are texts the family's real grader reads: the item's reference answer (a passing program
for code) when correct, a distinct wrong number, expression or failing program otherwise. The
twin grades by comparing the extracted answer with the correct one's (it wrote both)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.pools.recorded import family_strategy_tokens, recorded_task_model
from inframind_ray.tasks.items import item_family
from inframind_ray.twin.keys import fix_probability, plurality, uniform


def _wrong_id(*keys: object) -> int:
    """A wrong answer's identity: distinct per key (assumption WRONG_ANSWERS_DISTINCT)."""
    return zlib.crc32(repr(keys).encode()) % 9973


class ItemReplay:
    """Answers and lengths of pool models on one item family. ``recorded_of`` maps pool model
    -> recorded model (its own records or its stand-in)."""

    def __init__(self, family: str, recorded_of: Mapping[str, str], seed: int = 0) -> None:
        self.family = family
        self.fam = item_family(family)
        self.seed = seed
        self.code = self.fam.is_code
        self._rec = {m: recorded_task_model(family, r) for m, r in recorded_of.items()}
        self._p_fix = {m: fix_probability(r.accuracy) for m, r in self._rec.items()}
        self.retention = A.STRATEGY_RETENTION_BY_TASK[family]

    @lru_cache(maxsize=4096)  # noqa: B019 - one instance per (pool, family, seed), kept
    def truth(self, item_id: int) -> str | None:
        """The extracted answer of the item's correct response."""
        return self.fam.extract(self.fam.correct_text(item_id))

    def _p(self, model: str, i: int) -> float:
        r = self._rec[model]
        p = float(r.p_correct[i])
        return r.accuracy if np.isnan(p) else p  # unrecorded code item: UNRECORDED_CODE_PASS

    def sample(self, model: str, item_id: int, k: int = 0, query: str = ""
               ) -> tuple[bool, int, int]:
        """(correct, wrong-answer identity, DeepThink tokens) of the ``k``-th agent of a model in
        one query (k = 0: the recorded answer). Code draws afresh per query (``query``: its
        id), as a new generation at temperature 1.0 would."""
        i = self.fam.index(item_id)
        full = int(self._rec[model].full_tokens[i])
        p = self._p(model, i)
        if self.code:
            ok = uniform(self.seed, self.family, item_id, model, k, query, "pass") < p
            return ok, _wrong_id(model, k), full
        recorded_ok = p >= 0.5
        if k == 0:
            return recorded_ok, _wrong_id(model), full
        u = uniform(self.seed, self.family, item_id, model, k, "sample")
        if u < (A.SAMPLE_KEEPS_CORRECT if recorded_ok else self._p_fix[model]):
            return True, 0, full
        if (not recorded_ok
                and uniform(self.seed, self.family, item_id, model, k, "repeat")
                < A.SAMPLE_REPEATS_WRONG):
            return False, _wrong_id(model), full
        return False, _wrong_id(model, k), full

    def strategy_answer(self, item_id: int, model: str, strategy: Strategy, sample: int = 0,
                        query: str = "") -> tuple[str | None, int]:
        """A lone agent's (response text, output tokens); None text when truncated."""
        ok, wid, full = self.sample(model, item_id, sample, query)
        tokens = int(family_strategy_tokens(full, strategy, self.family))
        cap = self._rec[model].max_tokens[strategy]
        if tokens > cap:
            return None, cap
        if ok and uniform(self.seed, self.family, item_id, model, strategy.value, sample,
                          "keep") >= self.retention[strategy]:
            ok, wid = False, _wrong_id(model, strategy.value, sample)
        if ok:
            return self.fam.correct_text(item_id), tokens
        return self.fam.wrong_text(item_id, wid, model), tokens

    def respond(self, item_id: int, model: str, strategy: Strategy, kind: NodeKind,
                upstream: Sequence[str | None] = (), sample: int = 0, query: str = ""
                ) -> tuple[str | None, int]:
        """(response text, output tokens) of one agent node given its upstream answers."""
        text, tokens = self.strategy_answer(item_id, model, strategy, sample, query)
        ups = [u for u in upstream if u]
        if kind is NodeKind.SOLVER or not ups:
            return text, tokens
        own = self.fam.extract(text)
        if kind is NodeKind.AGGREGATOR:
            votes = ups + ([own] if own and A.AGGREGATOR_VOTES_ITSELF else [])
            pick = plurality(votes, prefer=own)
        else:
            peer = plurality(ups)
            truth = self.truth(item_id)
            key: tuple = (self.seed, self.family, item_id, model, strategy.value, tuple(ups),
                          sample)
            adopt = (own != truth and peer == truth
                     and uniform(*key, "adopt") < A.P_ADOPT_CORRECT)
            switch = (own == truth and peer != truth
                      and uniform(*key, "switch") < A.P_SWITCH_TO_WRONG)
            pick = peer if own != peer and (adopt or switch) else own
        if pick == own:
            return text, tokens
        return self.fam.render(pick), tokens

    def expected_tokens(self, model: str) -> dict[Strategy, float]:
        """Expected output tokens per strategy (train split)."""
        return self._rec[model].expected_tokens

    def would_be_correct(self, item_id: int, model: str, strategy: Strategy, query: str = ""
                         ) -> bool:
        """Whether a lone agent (model, strategy) answers the item right."""
        text, _ = self.strategy_answer(item_id, model, strategy, 0, query)
        return self.is_correct(item_id, self.fam.extract(text))

    def is_correct(self, item_id: int, answer: str | None) -> bool:
        """Whether an extracted answer is the correct one the twin writes."""
        return answer is not None and answer == self.truth(item_id)
