"""MMLU-Pro as a task family: the facts of each item (row, lettered question text, category,
split, option count, prompt and few-shot tokens) and the grader. One place for each; the twin's
outcome model, the workload and the serving orchestrator all read them here."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.types import QueryInfo
from inframind_ray.tasks.prompts import extract_answer, format_question


class MMLUPro:
    """The shipped MMLU-Pro items (``data.questions()``); use :func:`mmlu_pro` for the shared
    instance. Arrays are aligned with the rows of ``data.questions()``."""

    name = "mmlu_pro"
    extract = staticmethod(extract_answer)  # the option letter of a response

    def __init__(self) -> None:
        q = data.questions()
        self._q = q
        self.qids: np.ndarray = q["question_id"]
        self._index = {int(x): i for i, x in enumerate(self.qids)}
        self.answers: np.ndarray = q["answer"]
        self.categories: np.ndarray = q["category"]
        self.splits: np.ndarray = q["split"]
        self.n_options = np.array([len(o) for o in q["options"]])
        words = np.array(
            [len(t.split()) + sum(len(o.split()) for o in opts)
             for t, opts in zip(q["question"], q["options"], strict=True)]
        )
        self.prompt_tokens = (np.ceil(words * A.TOKENS_PER_WORD).astype(int)
                              + A.PROMPT_OVERHEAD_TOKENS)
        self.fewshot_tokens = self._fewshot_tokens(words)

    def _fewshot_tokens(self, q_words: np.ndarray) -> np.ndarray:
        """Per item: tokens of the category's worked examples (assumption FEW_SHOT_EXAMPLES),
        from the recorded answers of every model on the train split."""
        train = self.splits == "train"
        cot_words = np.mean([r["gen_words"] for r in data.outcomes().values()], axis=0)
        out = np.zeros(len(self.qids), int)
        for c in np.unique(self.categories):
            sel = self.categories == c
            per = (q_words[sel & train].mean() + cot_words[sel & train].mean()) * A.TOKENS_PER_WORD
            out[sel] = int(round(A.FEW_SHOT_EXAMPLES * per))
        return out

    def index(self, item_id: int) -> int:
        """Row of an item id; KeyError with a clear message if unknown."""
        try:
            return self._index[int(item_id)]
        except KeyError:
            raise KeyError(f"unknown MMLU-Pro question id {item_id}") from None

    def split_ids(self, split: str) -> np.ndarray:
        """Question ids of one split, in row order."""
        return self.qids[self.splits == split]

    def text(self, item_id: int) -> str:
        """The question with its lettered options."""
        i = self.index(item_id)
        return format_question(self._q["question"][i], self._q["options"][i])

    def category(self, item_id: int) -> str:
        """The item's MMLU-Pro category."""
        return str(self.categories[self.index(item_id)])

    def embedding(self, item_id: int) -> np.ndarray | None:
        """The item's shipped MiniLM embedding, or None without the derived file."""
        emb = data.item_embeddings()
        return None if emb is None else emb[self.index(item_id)]

    def query(self, item_id: int, query_id: str, budget_s: float, arrival_s: float, *,
              text: str | None = None, embedding: np.ndarray | None = None) -> QueryInfo:
        """The query policies see for an item (``text`` replaces the item's own text)."""
        i = self.index(item_id)
        return QueryInfo(
            query_id=query_id,
            text=text or self.text(item_id),
            budget_s=float(budget_s),
            arrival_s=float(arrival_s),
            category=str(self.categories[i]),
            item_id=int(item_id),
            prompt_tokens=int(self.prompt_tokens[i]),
            fewshot_tokens=int(self.fewshot_tokens[i]),
            embedding=embedding,
        )

    def item(self, item_id: int) -> dict:
        """The item as the grader reads it: its text and answer letter (``reference``)."""
        i = self.index(item_id)
        return {"item_id": int(item_id), "text": self.text(item_id),
                "reference": str(self.answers[i]), "category": str(self.categories[i]),
                "split": str(self.splits[i])}

    def is_correct(self, item_id: int, letter: str | None) -> bool:
        """Whether an option letter is the item's answer."""
        return letter is not None and letter == self.answers[self.index(item_id)]

    def grade(self, item_id: int, answer: str | None) -> bool:
        """Whether a response, or the letter already extracted from one, answers the item."""
        return self.is_correct(item_id, extract_answer(answer))


@lru_cache(maxsize=1)
def mmlu_pro() -> MMLUPro:
    """The shared MMLU-Pro task family of this process."""
    return MMLUPro()
