"""What a task family offers the rest of the system: its items, their prompt facts, a grader.

MMLU-Pro (``tasks/mmlu_pro.py``) is the one family today; GSM8K, MATH or code families would sit
beside it and implement the same protocol.
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


def tokens_for_words(words: int) -> int:
    """Words to tokens with the named factor (assumptions.TOKENS_PER_WORD)."""
    return math.ceil(words * A.TOKENS_PER_WORD)


def free_text_prompt_tokens(text: str) -> int:
    """Prompt tokens of one agent call on a free-text query (no benchmark item)."""
    return tokens_for_words(len(text.split())) + A.PROMPT_OVERHEAD_TOKENS
