"""GSM8K, MATH level 5, HumanEval and MBPP as task families: their items (from the shipped
``data/tasks/<family>``), the query facts, the answer a correct agent gives, and the grader
(``inframind_ray.grading``). One class, one instance per family; MMLU-Pro is in ``mmlu_pro.py``."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.types import QueryInfo
from inframind_ray.grading import CODE_FAMILIES, extract_code, extract_math_answer, extract_number
from inframind_ray.grading import grade as grade_for
from inframind_ray.grading.code import mbpp_function
from inframind_ray.tasks.base import tokens_for_words


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


class ItemFamily:
    """A task family backed by ``data.task_items(name)``; use :func:`item_family`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items = data.task_items(name)
        self.ids: np.ndarray = self.items["item_id"]
        self._index = {int(x): i for i, x in enumerate(self.ids)}
        self.splits: np.ndarray = self.items["split"]
        self.is_code = name in CODE_FAMILIES
        texts = [self._text(i) for i in range(len(self.ids))]
        self._texts = texts
        if self.is_code:
            tokens = [math.ceil(len(t) / A.CODE_CHARS_PER_TOKEN) for t in texts]
        else:
            tokens = [tokens_for_words(len(t.split())) for t in texts]
        self.prompt_tokens = np.asarray(tokens, int) + A.PROMPT_OVERHEAD_TOKENS
        self.recorded = np.asarray(self.items["recorded"], bool)  # replayable in the twin

    # ------------------------------------------------------------------ items
    def _text(self, i: int) -> str:
        if self.name == "mbpp":
            tests = "\n".join(self.items["test_list"][i])
            return f"{self.items['text'][i]}\nYour code should pass these tests:\n{tests}"
        return str(self.items["text"][i])

    def index(self, item_id: int) -> int:
        """Row of an item id; KeyError naming the family and id if unknown."""
        try:
            return self._index[int(item_id)]
        except (KeyError, TypeError, ValueError):
            lo, hi = int(self.ids.min()), int(self.ids.max())
            raise KeyError(f"unknown {self.name} item id {item_id} (ids {lo}-{hi})") from None

    def split_ids(self, split: str) -> np.ndarray:
        """Item ids of one split that the twin can replay (recorded), in row order."""
        return self.ids[(self.splits == split) & self.recorded]

    def text(self, item_id: int) -> str:
        """The item as an agent is asked it."""
        return self._texts[self.index(item_id)]

    def embedding(self, item_id: int) -> np.ndarray | None:
        """The item's shipped MiniLM embedding, or None without the derived file."""
        emb = data.task_embeddings(self.name)
        return None if emb is None else emb[self.index(item_id)]

    def query(self, item_id: int, query_id: str, budget_s: float, arrival_s: float, *,
              text: str | None = None, embedding: np.ndarray | None = None) -> QueryInfo:
        """The query policies see for an item (``text`` replaces the item's own text)."""
        i = self.index(item_id)
        return QueryInfo(query_id=query_id, text=text or self._texts[i], budget_s=float(budget_s),
                         arrival_s=float(arrival_s), category=self.name, item_id=int(item_id),
                         prompt_tokens=int(self.prompt_tokens[i]), fewshot_tokens=0,
                         embedding=embedding, task=self.name)

    def item(self, item_id: int) -> dict:
        """Every shipped column of one item (what the grader reads)."""
        i = self.index(item_id)
        return {k: (v[i].item() if isinstance(v, np.ndarray) and v.dtype != object else v[i])
                for k, v in self.items.items()}

    # ------------------------------------------------------------------ answers
    def extract(self, text: str | None) -> str | None:
        """The answer a response gives, or None: its final number in canonical form (GSM8K),
        its final answer (MATH), its program (code)."""
        if self.is_code:
            return extract_code(text) or None
        if self.name == "math":
            return extract_math_answer(text)
        found = extract_number(text)
        if found is None:
            return None
        v = found[1]
        return str(int(v)) if float(v).is_integer() else f"{v:.10g}"

    def grade(self, item_id: int, answer: str | None) -> bool:
        """The real grader on a response (or its extracted answer); code runs in the sandbox."""
        return grade_for(self.name, answer, self.item(item_id)).correct

    def correct_text(self, item_id: int) -> str:
        """What an agent that answers the item right says (the twin's correct response)."""
        i = self.index(item_id)
        ref = str(self.items["reference"][i])
        if self.name == "humaneval":
            return _fence(self.items["prompt"][i] + ref)
        if self.is_code:
            return _fence(ref)
        if self.name == "math":
            return f"The answer is $\\boxed{{{ref}}}$."
        return f"The answer is {ref}."

    def render(self, answer: str) -> str:
        """A response giving an extracted answer (what a refiner says when it adopts it)."""
        if self.is_code:
            return _fence(answer)
        if self.name == "math":
            return f"The answer is $\\boxed{{{answer}}}$."
        return f"The answer is {answer}."

    def wrong_text(self, item_id: int, k: int, tag: str = "") -> str:
        """The ``k``-th distinct wrong response (k >= 0) of the twin: another number, another
        expression, or a program that fails the item's tests."""
        i = self.index(item_id)
        ref = str(self.items["reference"][i])
        if self.is_code:
            name = (self.items["entry_point"][i] if self.name == "humaneval"
                    else mbpp_function(self.item(item_id))) or "solution"
            return _fence(f"def {name}(*args, **kwargs):\n"
                          f"    raise AssertionError('failing sample {k} {tag}'.strip())")
        try:
            x = float(ref.replace(",", ""))
            wrong = f"{int(x) + k + 1}" if x.is_integer() else f"{x + k + 1:g}"
        except ValueError:
            wrong = f"{ref} + {k + 1}"
        if self.name == "math":
            return f"The answer is $\\boxed{{{wrong}}}$."
        return f"The answer is {wrong}."


@lru_cache(maxsize=8)
def item_family(name: str) -> ItemFamily:
    """The shared instance of an item-backed family."""
    return ItemFamily(name)
