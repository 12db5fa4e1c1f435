"""What a task family offers the rest of the system: its items, their prompt facts, a grader.

MMLU-Pro (``tasks/mmlu_pro.py``) and GSM8K, MATH level 5, HumanEval and MBPP (``tasks/items.py``)
implement it; ``tasks/registry.py`` finds them by name.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray.core.types import QueryInfo


class TaskFamily(Protocol):
    """A benchmark task family: items by id and split, their query facts, and grading."""

    name: str

    def index(self, item_id: int) -> int:
        """Row of an item id; KeyError naming the id if unknown."""
        ...

    def split_ids(self, split: str) -> np.ndarray:
        """Item ids of one split, in row order."""
        ...

    def embedding(self, item_id: int) -> np.ndarray | None:
        """The item's precomputed query embedding, or None when none is shipped."""
        ...

    def query(self, item_id: int, query_id: str, budget_s: float, arrival_s: float, *,
              text: str | None = None, embedding: np.ndarray | None = None) -> QueryInfo:
        """The query policies see for an item (``text`` replaces the item's own text)."""
        ...

    def grade(self, item_id: int, answer: str | None) -> bool:
        """Whether a response (or its extracted answer) is correct for the item."""
        ...

    def extract(self, text: str | None) -> str | None:
        """The answer a response gives (a letter, a number, an expression, a program)."""
        ...

    def item(self, item_id: int) -> dict:
        """The item as its grader reads it (``reference`` and the family's own fields)."""
        ...

    def text(self, item_id: int) -> str:
        """The item as an agent is asked it."""
        ...


def tokens_for_words(words: int) -> int:
    """Words to tokens with the named factor (assumptions.TOKENS_PER_WORD)."""
    return math.ceil(words * A.TOKENS_PER_WORD)


def free_text_prompt_tokens(text: str) -> int:
    """Prompt tokens of one agent call on a free-text query (no benchmark item)."""
    return tokens_for_words(len(text.split())) + A.PROMPT_OVERHEAD_TOKENS
