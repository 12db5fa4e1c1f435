r"""Where a free-text response states its final answer: ``#### X`` (GSM8K solutions), a JSON
``"answer"`` field (ZeroEval's format), ``\boxed{X}``, "The answer is X" / "Final answer: X".

:func:`final_answer_spans` lists every such statement; :func:`read_final_answer` reads the
strongest kind first (``####``, then the JSON field, then ``\boxed``, then the phrase: a
reasoning text may say "the answer is" or box an intermediate result on the way to its JSON
answer) and, within a kind, the last statement that the grader can read, except for JSON
fields, where it is the first: a response asked for one JSON object that goes on past it is
making up further questions and answering them (seen in ZeroEval's recorded outputs).
Graders fall back to something family-specific when there is none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple, TypeVar

T = TypeVar("T")
PRIORITY = (("####", "last"), ("json", "first"), ("boxed", "last"), ("phrase", "last"))


class Span(NamedTuple):
    """One stated answer: where it starts in the response, what marked it, its text."""

    pos: int
    kind: str  # "####" | "json" | "boxed" | "phrase"
    text: str


# "#### 18" ends a GSM8K solution; a Markdown heading "#### Step 1: ..." is not an answer.
_HASHES_RE = re.compile(r"####[ \t]*([-−+]?\$?[ \t]?\d[\d,./]*)[ \t]*\.?[ \t]*$", re.MULTILINE)
_JSON_RE = re.compile(
    r"""(?:["']answer|\banswer)["']\s*:\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^,}\n]+))""",
    re.IGNORECASE | re.DOTALL,
)
_PHRASE_RE = re.compile(
    r"(?:answer\s+is|final\s+answer\s*(?:is)?\s*[:：]|^[ \t*#]*answer[ \t*]*[:：])"
    r"\s*:?\s*([^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
_JSON_ESCAPE_RE = re.compile(r"""\\(["'\\/])""")


def boxed_contents(text: str) -> list[tuple[int, str]]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces) and ``\\boxed X``, in order."""
    out = []
    for m in _BOXED_RE.finditer(text):
        if m.group(1) is None:  # "\boxed 5": one token
            tok = re.match(r"\s*([^\s$]+)", text[m.end():])
            if tok:
                out.append((m.start(), tok.group(1)))
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append((m.start(), text[m.end():i - 1]))
    return out


def json_answer(raw: str) -> str:
    """A JSON string value's text with only ``\\"``, ``\\\\`` and ``\\/`` unescaped: models often
    leave LaTeX backslashes unescaped (``"\\frac"``), which full JSON decoding would corrupt."""
    return _JSON_ESCAPE_RE.sub(r"\1", raw)


def final_answer_spans(text: str | None) -> list[Span]:
    """Every stated final answer in ``text``, ordered by position."""
    if not text:
        return []
    spans = [Span(m.start(), "####", m.group(1)) for m in _HASHES_RE.finditer(text)]
    for m in _JSON_RE.finditer(text):
        quoted = m.group(1) if m.group(1) is not None else m.group(2)
        value = json_answer(quoted) if quoted is not None else m.group(3)
        spans.append(Span(m.start(), "json", value))
    spans += [Span(pos, "boxed", body) for pos, body in boxed_contents(text)]
    spans += [Span(m.start(), "phrase", m.group(1)) for m in _PHRASE_RE.finditer(text)]
    return sorted(spans, key=lambda s: s.pos)


def read_final_answer(text: str | None, read: Callable[[str], T | None]) -> tuple[Span, T] | None:
    """The strongest, then last (first for JSON), stated answer that ``read`` turns into a value
    (not None), with that value; None if there is none."""
    spans = final_answer_spans(text)
    for kind, which in PRIORITY:
        of_kind = [s for s in spans if s.kind == kind]
        for span in (of_kind if which == "first" else reversed(of_kind)):
            value = read(span.text)
            if value is not None:
                return span, value
    return None
