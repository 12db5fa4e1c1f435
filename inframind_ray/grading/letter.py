"""MMLU-Pro: the option letter of a response. The same rule the prompts ask for
("The answer is (X)"), else a response that is a lone letter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from inframind_ray.grading.result import GradeResult

LETTERS = "ABCDEFGHIJ"

_ANSWER_RE = re.compile(r"answer is \(?([A-J])\)?", re.IGNORECASE)


def extract_letter(text: str | None) -> str | None:
    """The option letter of a response (the last "The answer is (X)", else a response that is
    one letter, with optional parentheses or a period), or None."""
    if not text:
        return None
    m = _ANSWER_RE.findall(text)
    if m:
        return m[-1].upper()
    stripped = text.strip().strip(".()").upper()
    if len(stripped) == 1 and stripped in LETTERS:
        return stripped
    return None


def grade_letter(response: str | None, item: Mapping[str, Any]) -> GradeResult:
    """Whether the response's letter is the item's ``reference`` (or ``answer``) letter."""
    ref = str(item["reference"] if "reference" in item else item["answer"]).strip().upper()
    got = extract_letter(response)
    if got is None:
        return GradeResult(False, None, "no option letter found")
    return GradeResult(got == ref, got, f"answered {got}, reference {ref}")
