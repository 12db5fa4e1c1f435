"""HumanEval and MBPP: the code of a response, run against the item's tests in the sandbox.

Code is taken from a model's text as the last fenced ```python block (preferring one that defines
the function under test), else the last fenced block of any language, else the raw text. The
program is

* HumanEval: the item's prompt + the completion (a function body), or prompt + a full function
  when the code defines ``def <entry_point>`` itself (the prompt's imports and helpers stay),
  then the item's ``test`` and ``check(<entry_point>)``;
* MBPP: the code + the item's ``test_setup_code`` + the ``test_list`` asserts (the setup
  builds test data from the code's own classes, e.g. items 367 and 927 build trees of the
  ``Node`` class the solution defines, so it runs after the code);

and it passes iff it exits with status 0 within the :class:`SandboxLimits`. A model's code that
does not parse grades False without running; for code a user typed, ``strict=True`` raises
:class:`GradingInputError` instead (see :func:`check_syntax`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from inframind_ray.grading.result import GradeResult, GradingInputError
from inframind_ray.grading.sandbox import DEFAULT_LIMITS, SandboxLimits, run_python

_FENCE_RE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_CALLED_RE = re.compile(r"assert\s+\(?\s*(?:not\s+)?(?:\w+\()*?([A-Za-z_]\w*)\s*\(")


def _defines_text(code: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def extract_code(text: str | None, function: str | None = None) -> str:
    """The code in a model's text: the last fenced python block (the last one that defines
    ``function`` if one does), else the last fenced block, else the whole text."""
    if not text:
        return ""
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(text)]
    python = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    others = [body for tag, body in blocks if tag not in _PYTHON_TAGS]
    for group in (python, others):
        if function is not None:
            defining = [b for b in group if _defines_text(b, function)]
            if defining:
                return defining[-1].rstrip()
        if group:
            return group[-1].rstrip()
    return text.rstrip()


def syntax_error(code: str, prefix: str = "") -> str | None:
    """Why ``prefix + code`` does not parse ("line N: msg", N counted in ``code``), or None."""
    try:
        ast.parse(prefix + code)
    except SyntaxError as e:
        line = (e.lineno or 0) - prefix.count("\n")
        return f"line {line}: {e.msg}" if line > 0 else str(e.msg)
    except (ValueError, RecursionError, MemoryError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def check_syntax(code: str, prefix: str = "") -> None:
    """Raise :class:`GradingInputError` ("code answer does not parse: line N: msg") unless
    ``code`` (after ``prefix``, e.g. a HumanEval prompt it completes) parses."""
    why = syntax_error(code, prefix)
    if why is not None:
        raise GradingInputError(f"code answer does not parse: {why}")


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _defines_text(code, name)
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
               for n in tree.body)


def humaneval_parts(code: str, item: Mapping[str, Any]) -> tuple[str, str, str]:
    """(prefix, code, suffix) of a HumanEval program; the code is checked after the prefix."""
    entry = str(item["entry_point"])
    prefix = str(item["prompt"]) + ("\n" if _defines(code, entry) else "")
    suffix = "\n\n" + str(item["test"]) + f"\n\ncheck({entry})\n"
    return prefix, code, suffix


def mbpp_parts(code: str, item: Mapping[str, Any]) -> tuple[str, str, str]:
    """(prefix, code, suffix) of an MBPP program."""
    setup = str(item.get("test_setup_code") or "")
    tests = "\n".join(str(t) for t in item["test_list"])
    return "", code, "\n\n" + (setup + "\n" if setup.strip() else "") + tests + "\n"


def mbpp_function(item: Mapping[str, Any]) -> str | None:
    """The function MBPP's first test calls (what a response should define)."""
    tests = list(item["test_list"])
    m = _CALLED_RE.search(str(tests[0])) if tests else None
    return m.group(1) if m else None


def _run(parts: tuple[str, str, str], limits: SandboxLimits, strict: bool) -> GradeResult:
    prefix, code, suffix = parts
    why = syntax_error(code, prefix)
    if why is not None:
        if strict:
            raise GradingInputError(f"code answer does not parse: {why}")
        return GradeResult(False, code, f"does not parse: {why}")
    res = run_python(prefix + code + suffix, limits=limits)
    last = (res.stderr.strip().splitlines() or [""])[-1]
    detail = f"{res.status.value}: {res.detail}" + (f"; {last}" if last and not res.passed else "")
    return GradeResult(res.passed, code, detail[:500])


def grade_humaneval(response: str | None, item: Mapping[str, Any], *, strict: bool = False,
                    limits: SandboxLimits = DEFAULT_LIMITS) -> GradeResult:
    """Whether the response's code passes the item's HumanEval tests."""
    code = extract_code(response, str(item["entry_point"]))
    if not code.strip():
        if strict:
            raise GradingInputError("code answer is empty")
        return GradeResult(False, None, "no code")
    return _run(humaneval_parts(code, item), limits, strict)


def grade_mbpp(response: str | None, item: Mapping[str, Any], *, strict: bool = False,
               limits: SandboxLimits = DEFAULT_LIMITS) -> GradeResult:
    """Whether the response's code passes the item's MBPP ``test_list``."""
    code = extract_code(response, mbpp_function(item))
    if not code.strip():
        if strict:
            raise GradingInputError("code answer is empty")
        return GradeResult(False, None, "no code")
    return _run(mbpp_parts(code, item), limits, strict)
