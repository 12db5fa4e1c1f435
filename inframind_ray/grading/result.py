"""What every grader returns, and the error for answers a user typed that cannot be graded."""

from __future__ import annotations

from dataclasses import dataclass


class GradingInputError(ValueError):
    """A user-supplied answer cannot be graded at all (e.g. code that does not parse). The API
    answers it with a 4xx, the CLI with exit code 2; a model's unusable output grades False
    instead."""


@dataclass(frozen=True)
class GradeResult:
    """``correct``; the answer ``extracted`` from the response (a letter, a number, a LaTeX
    answer, the code that ran; None when nothing was found); ``detail`` in words."""

    correct: bool
    extracted: str | None
    detail: str

    def __bool__(self) -> bool:
        return self.correct
