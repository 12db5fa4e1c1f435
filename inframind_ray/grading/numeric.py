r"""GSM8K: the final number of a response, compared numerically with the reference.

The number is read from the response's stated final answer (``#### N``, a JSON ``"answer"``
field, ``\boxed{N}``, "The answer is N"; see :mod:`final_answer`): the first number after its
last ``=`` ("3*68 + 2*80 = 364"), else its first number ("18 (9 eggs * $2)"); without a stated
answer it is the last number in the text. Numbers may carry ``$``, thousands commas, a sign
(``-`` or ``−``), decimals, a trailing period or unit; ``3/4`` and ``\frac{3}{4}`` are
fractions; the minutes of a time ("2:00 pm") are not a number. Equal means within a relative
tolerance of 1e-6.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from inframind_ray.grading.final_answer import read_final_answer
from inframind_ray.grading.result import GradeResult

REL_TOL = 1e-6

_PLAIN = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_NUMBER_RE = re.compile(
    r"\\[dt]?frac\{\s*(?P<fs>[-−])?\s*(?P<fn>\d+(?:\.\d+)?)\s*\}\{\s*(?P<fd>\d+(?:\.\d+)?)\s*\}"
    rf"|(?P<sign>[-−])?\s?\$?\s?(?P<num>{_PLAIN})(?:\s*/\s*(?P<den>\d+(?:\.\d+)?)(?![\d/]))?"
)


def _value(m: re.Match) -> float | None:
    if m.group("fn") is not None:
        num, den, neg = float(m.group("fn")), float(m.group("fd")), m.group("fs") is not None
    else:
        num = float(m.group("num").replace(",", ""))
        den = float(m.group("den")) if m.group("den") else 1.0
        neg = m.group("sign") is not None
    if den == 0:
        return None
    return -num / den if neg else num / den


def _numbers(text: str) -> list[tuple[str, float]]:
    out = []
    for m in _NUMBER_RE.finditer(text):
        if m.start() > 1 and text[m.start() - 1] == ":" and text[m.start() - 2].isdigit():
            continue  # the minutes of a time ("2:00 pm")
        # A "-" right after a letter or digit is a hyphen or a minus sign, not a sign.
        if m.group("sign") and m.start() > 0 and text[m.start() - 1].isalnum():
            v = _value(m)
            out.append((m.group(0).lstrip("-−").strip(), abs(v) if v is not None else None))
            continue
        out.append((m.group(0).strip(), _value(m)))
    return [(s, v) for s, v in out if v is not None and math.isfinite(v)]


def parse_number(text: str | None) -> float | None:
    """The first number in a short answer text ("$1,200.50", "-3/4", "\\frac{3}{4}", "18 eggs"),
    or None."""
    nums = _numbers(text or "")
    return nums[0][1] if nums else None


def _stated_number(answer: str) -> tuple[str, float] | None:
    """The number a stated answer gives: the first after its last "=", else its first."""
    after = _numbers(answer.rsplit("=", 1)[1]) if "=" in answer else []
    nums = after or _numbers(answer)
    return nums[0] if nums else None


def extract_number(text: str | None) -> tuple[str, float] | None:
    """The final number of a response, as (its text, its value), or None."""
    if not text:
        return None
    found = read_final_answer(text, _stated_number)
    if found is not None:
        return found[1]
    nums = _numbers(text)
    return nums[-1] if nums else None


def numbers_equal(a: float, b: float, rel_tol: float = REL_TOL) -> bool:
    """Equal within ``rel_tol`` (relative; 1e-9 absolute near zero)."""
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9)


def grade_number(response: str | None, item: Mapping[str, Any]) -> GradeResult:
    """Whether the response's final number equals the item's ``reference`` number."""
    ref = parse_number(str(item["reference"]))
    if ref is None:
        raise ValueError(f"reference {item['reference']!r} is not a number")
    got = extract_number(response)
    if got is None:
        return GradeResult(False, None, "no number found")
    text, value = got
    ok = numbers_equal(value, ref)
    return GradeResult(ok, text, f"answered {value:g}, reference {ref:g}")
