"""Prompt templates per role, strategy and node kind, strategy token caps, and answer extraction.

One place for all of it: real engines get these prompts; the twin's engine answers in the same
format so the same extractor grades both.
"""

from __future__ import annotations

import re

from inframind_ray.core.strategy import Strategy

LETTERS = "ABCDEFGHIJ"


STRATEGY_INSTRUCTIONS = {
    Strategy.FLASH: "Answer directly with the letter of the correct option and nothing else.",
    Strategy.CONCISE: "Give two or three key points, then the answer.",
    Strategy.DEEPTHINK: "Think step by step, verify your reasoning, then give the answer.",
}

KIND_INSTRUCTIONS = {
    "solver": "Solve the question.",
    "refiner": "Read the previous agents' answers below, check them, and give your own answer.",
    "aggregator": "Read the agents' answers below and decide the single best final answer.",
}

ANSWER_FORMAT = 'End with "The answer is (X)" where X is the option letter.'


def format_question(question: str, options: list[str] | tuple[str, ...]) -> str:
    """Question plus lettered options."""
    opts = "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    return f"{question}\n{opts}" if opts else question


def build_prompt(
    question_text: str,
    role: str,
    kind: str,
    strategy: Strategy,
    upstream: list[str] | tuple[str, ...] = (),
) -> str:
    """The full prompt of one agent call."""
    parts = [
        f"You are the {role} in a team of AI agents. {KIND_INSTRUCTIONS[kind]}",
        STRATEGY_INSTRUCTIONS[strategy],
        ANSWER_FORMAT,
        f"Question:\n{question_text}",
    ]
    for i, text in enumerate(upstream):
        parts.append(f"Agent {i + 1} said:\n{text}")
    return "\n\n".join(parts)


_ANSWER_RE = re.compile(r"answer is \(?([A-J])\)?", re.IGNORECASE)
_FALLBACK_RE = re.compile(r"\b([A-J])\b")


def extract_answer(text: str | None) -> str | None:
    """The option letter of a response ("The answer is (X)", else a lone letter), or None."""
    if not text:
        return None
    m = _ANSWER_RE.findall(text)
    if m:
        return m[-1].upper()
    stripped = text.strip().strip(".()").upper()
    if len(stripped) == 1 and stripped in LETTERS:
        return stripped
    return None


def format_answer(letter: str | None, body: str = "") -> str:
    """A response in the graded format (what the twin engine says)."""
    if letter is None:
        return (body + " I cannot determine the answer.").strip()
    return (body + f" The answer is ({letter}).").strip()
