"""Prompt templates per task family, role, strategy and node kind, and MMLU-Pro's answer format.

One place for all of it: real engines get these prompts; the twin's engine answers in the same
format so the same extractor grades both. Each family's answer extraction and grader live in
``inframind_ray.grading``.
"""

from __future__ import annotations

from inframind_ray.core.strategy import Strategy
from inframind_ray.grading.letter import LETTERS, extract_letter

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

# Per task family: (Flash instruction, answer format). Concise and DeepThink read the same for
# every family (STRATEGY_INSTRUCTIONS).
FAMILY_FORMATS = {
    "mmlu_pro": (STRATEGY_INSTRUCTIONS[Strategy.FLASH], ANSWER_FORMAT),
    "gsm8k": ("Answer directly with the final number and nothing else.",
              'End with "The answer is N" where N is the final number.'),
    "math": ("Answer directly with the final answer and nothing else.",
             "Put the final answer in \\boxed{}."),
    "humaneval": ("Write the complete function directly, without explanation.",
                  "Give the complete Python function in one ```python code block."),
    "mbpp": ("Write the function directly, without explanation.",
             "Give the complete Python code in one ```python code block."),
    "free": ("Answer directly and briefly.",
             'End with "The answer is X" where X is your final answer.'),
}


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
    task: str = "mmlu_pro",
) -> str:
    """The full prompt of one agent call on a task family's item (or free text)."""
    flash, answer_format = FAMILY_FORMATS.get(task, FAMILY_FORMATS["mmlu_pro"])
    parts = [
        f"You are the {role} in a team of AI agents. {KIND_INSTRUCTIONS[kind]}",
        flash if strategy is Strategy.FLASH else STRATEGY_INSTRUCTIONS[strategy],
        answer_format,
        f"Question:\n{question_text}",
    ]
    for i, text in enumerate(upstream):
        parts.append(f"Agent {i + 1} said:\n{text}")
    return "\n\n".join(parts)


extract_answer = extract_letter  # the MMLU-Pro letter of a response (grading/letter.py)


def format_answer(letter: str | None, body: str = "") -> str:
    """A response in the graded format (what the twin engine says)."""
    if letter is None:
        return (body + " I cannot determine the answer.").strip()
    return (body + f" The answer is ({letter}).").strip()
