r"""MATH: the final answer of a response, checked against the reference with HuggingFace's
``math-verify`` (symbolic and numeric equivalence through SymPy; not a string compare).

The answer is the response's stated final answer (see :mod:`final_answer`: ``\boxed{...}``, a
JSON ``"answer"`` field, "The answer is ..."); a response without one grades False. (Handing
such a response whole to math-verify, which then takes its last expression, credited truncated
and looping outputs among ZeroEval's recordings.) Every math-verify call is guarded: on the
main thread by math-verify's own SIGALRM timeouts, elsewhere by running it in a daemon thread
that is abandoned after the timeout (math-verify cannot be interrupted off the main thread). A
timeout or an exception grades False and is named in the result's detail; a grade never raises.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from inframind_ray.grading.final_answer import read_final_answer
from inframind_ray.grading.result import GradeResult

TIMEOUT_S = 5


def _clean(answer: str) -> str | None:
    """A stated answer without surrounding ``$``/``\\(\\)``, spaces and a final period."""
    s = answer.strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) > len(left) + len(right):
            s = s[len(left):-len(right)].strip()
            break
    return s.rstrip(".").strip() or None


def extract_math_answer(text: str | None) -> str | None:
    """The final answer a response states (LaTeX or plain text), or None."""
    found = read_final_answer(text, _clean)
    return None if found is None else found[1]


_DELIMITED_RE = re.compile(r"(?<!\\)\$|\\\(|\\\[")


def _as_latex(answer: str) -> str:
    """The answer in math delimiters (math-verify reads LaTeX inside them), unless it has some."""
    return answer if _DELIMITED_RE.search(answer) else f"${answer}$"


def _verify(gold_text: str, pred_text: str, timeout: int | None) -> tuple[bool, str]:
    """math-verify on two texts: (equal, what went wrong or "")."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify.errors import TimeoutException

    config = (LatexExtractionConfig(), ExprExtractionConfig())
    try:
        gold = parse(gold_text, config, parsing_timeout=timeout, raise_on_error=True)
        if not gold:
            return False, f"reference {gold_text!r} does not parse"
        pred = parse(pred_text, config, parsing_timeout=timeout, raise_on_error=True)
    except (Exception, TimeoutException) as e:
        return False, f"math-verify parse error: {type(e).__name__}: {e}"[:300]
    if not pred:
        return False, "answer does not parse"
    errors = []
    for g in gold:  # verify() over all pairs, with every failure kept
        for p in pred:
            try:
                if verify(g, p, timeout_seconds=timeout, raise_on_error=True):
                    return True, ""
            except (Exception, TimeoutException) as e:
                errors.append(f"math-verify error: {type(e).__name__}: {e}"[:300])
    return False, errors[0] if errors else "not equivalent"


def _silence_timeout_warning() -> None:
    """math-verify warns once that a call without its timeout needs one from outside: ours is."""
    import math_verify.grader
    import math_verify.parser

    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True


def math_equal(reference: str, answer: str, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """Whether ``answer`` is mathematically equal to ``reference`` (both LaTeX or plain text),
    with what went wrong ("" if nothing). Never raises; bounded by about ``timeout_s`` per
    math-verify step on the main thread and by ``3 * timeout_s`` in all elsewhere."""
    gold, pred = _as_latex(reference), _as_latex(answer)
    if threading.current_thread() is threading.main_thread():
        return _verify(gold, pred, max(1, int(timeout_s)))
    _silence_timeout_warning()
    out: list[tuple[bool, str]] = []

    def work() -> None:
        try:
            out.append(_verify(gold, pred, None))
        except BaseException as e:  # noqa: BLE001 - reported, never raised
            out.append((False, f"math-verify error: {type(e).__name__}: {e}"[:300]))

    worker = threading.Thread(target=work, name="math-verify", daemon=True)
    worker.start()
    worker.join(3 * timeout_s)
    return out[0] if out else (False, f"math-verify timed out after {3 * timeout_s:g} s")


def grade_math(response: str | None, item: Mapping[str, Any]) -> GradeResult:
    """Whether the response's final answer equals the item's ``reference`` answer."""
    reference = str(item["reference"])
    answer = extract_math_answer(response)
    if answer is None:
        return GradeResult(False, None, "no final answer stated")
    ok, why = math_equal(reference, answer)
    return GradeResult(ok, answer, why or f"equal to reference {reference}")
