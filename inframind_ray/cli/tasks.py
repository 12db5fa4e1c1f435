"""Commands of the task families: list them, and grade an answer with a family's real grader
(code runs in the sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.cli.common import console
from inframind_ray.errors import ConfigError


def grade(
    task: Annotated[str, typer.Option(help="mmlu_pro, gsm8k, math, humaneval or mbpp")],
    item_id: Annotated[int | None, typer.Option(help="item id within the family")] = None,
    answer: Annotated[str | None, typer.Option(help="the response or program to grade")] = None,
    answer_file: Annotated[Path | None, typer.Option(
        help="read the response or program from this file ('-' for standard input)")] = None,
    reference: Annotated[str | None, typer.Option(
        help="grade against this answer instead of an item (not for code)")] = None,
) -> None:
    """Grade one answer with a task family's real grader; exit 0 if correct, 1 if not."""
    import sys

    from inframind_ray.grading import GradingInputError
    from inframind_ray.grading import grade as grade_answer
    from inframind_ray.tasks.registry import CODE_FAMILIES, FAMILIES, family

    if task not in FAMILIES:
        raise ConfigError("task", f"unknown task {task!r}; known: {', '.join(FAMILIES)}")
    if (answer is None) == (answer_file is None):
        raise ConfigError("answer", "give exactly one of --answer and --answer-file")
    if (item_id is None) == (reference is None):
        raise ConfigError("item-id", "give exactly one of --item-id and --reference")
    if task in CODE_FAMILIES and reference is not None:
        raise ConfigError("reference", f"grading {task} code needs an item's tests: give "
                          "--item-id")
    if answer_file is not None:
        if str(answer_file) == "-":
            answer = sys.stdin.read()
        elif not answer_file.is_file():
            raise ConfigError("answer-file", f"no such file: {answer_file}")
        else:
            answer = answer_file.read_text(errors="replace")
    try:
        item = family(task).item(item_id) if item_id is not None else {"reference": reference}
        res = grade_answer(task, answer, item, strict=True)
    except GradingInputError as e:
        raise ConfigError("answer", str(e)) from None
    except KeyError as e:
        raise ConfigError("item-id", str(e).strip("'\"")) from None
    verdict = "[green]correct[/green]" if res.correct else "[red]wrong[/red]"
    console.print(f"{verdict}  extracted={res.extracted!r}  {res.detail}")
    raise typer.Exit(0 if res.correct else 1)


def tasks() -> None:
    """List the task families: items per split, and what the twin can replay."""
    from rich.table import Table

    from inframind_ray.tasks.registry import FAMILIES, family

    t = Table(title="task families (items per split; replayable in the twin)")
    for col in ("task", "train", "val", "test", "grader"):
        t.add_column(col, justify="left" if col in ("task", "grader") else "right")
    graders = {"mmlu_pro": "option letter", "gsm8k": "final number",
               "math": "answer equivalence (math-verify)",
               "humaneval": "item tests in the sandbox", "mbpp": "item tests in the sandbox"}
    for name in FAMILIES:
        fam = family(name)
        t.add_row(name, *(str(len(fam.split_ids(s))) for s in ("train", "val", "test")),
                  graders[name])
    console.print(t)
