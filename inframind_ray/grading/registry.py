"""The task families that can be graded, by name, behind one call: ``grade(family, response,
item)``. ``item`` is a mapping with the family's fields (a row of
``inframind_ray/data/tasks/<family>/items.parquet``: ``reference`` always; HumanEval ``prompt``,
``test``, ``entry_point``; MBPP ``test_list``, ``test_setup_code``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from inframind_ray.grading.code import grade_humaneval, grade_mbpp
from inframind_ray.grading.letter import grade_letter
from inframind_ray.grading.math_answer import grade_math
from inframind_ray.grading.numeric import grade_number
from inframind_ray.grading.result import GradeResult

Grader = Callable[[str | None, Mapping[str, Any]], GradeResult]

FAMILIES: Mapping[str, Grader] = MappingProxyType({
    "mmlu_pro": grade_letter,
    "gsm8k": grade_number,
    "math": grade_math,
    "humaneval": grade_humaneval,
    "mbpp": grade_mbpp,
})
CODE_FAMILIES = frozenset({"humaneval", "mbpp"})


def grader(family: str) -> Grader:
    """The grader of a family; ValueError naming the known families if there is none."""
    try:
        return FAMILIES[family]
    except (KeyError, TypeError):
        known = ", ".join(sorted(FAMILIES))
        raise ValueError(f"unknown task family {family!r}; known: {known}") from None


def grade(family: str, response: str | None, item: Mapping[str, Any], *,
          strict: bool = False) -> GradeResult:
    """Grade one response to one item of ``family``. ``strict``: the response is an answer a
    user typed, and code that cannot be graded (does not parse, is empty) raises
    :class:`~inframind_ray.grading.result.GradingInputError` instead of grading False."""
    g = grader(family)
    if strict and family in CODE_FAMILIES:
        return g(response, item, strict=True)  # type: ignore[call-arg]
    return g(response, item)
