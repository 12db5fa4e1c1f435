"""The task families by name, and parsing of a workload's family list or mix."""

from __future__ import annotations

from inframind_ray.data import TASK_FAMILIES
from inframind_ray.errors import ConfigError
from inframind_ray.grading import CODE_FAMILIES
from inframind_ray.tasks.base import TaskFamily
from inframind_ray.tasks.prompts import extract_answer

FAMILIES = ("mmlu_pro", *TASK_FAMILIES)
"""Every task family, in the papers' order of a results table."""
__all__ = ["CODE_FAMILIES", "FAMILIES", "extract", "family", "parse_mix", "reference_family"]


def family(name: str) -> TaskFamily:
    """The shared instance of a task family; ValueError naming the known ones if unknown."""
    if name == "mmlu_pro":
        from inframind_ray.tasks.mmlu_pro import mmlu_pro

        return mmlu_pro()
    if name not in FAMILIES:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(FAMILIES)}")
    from inframind_ray.tasks.items import item_family

    return item_family(name)


def extract(task: str, text: str | None) -> str | None:
    """The answer a response gives for a family (free text: read as MMLU-Pro's letter)."""
    return family(task).extract(text) if task in FAMILIES else extract_answer(text)


def reference_family(task: str | None) -> str:
    """The family whose grader compares a free-text answer with a given reference: the task's
    own, or MATH's answer equivalence for ``free`` text."""
    return "math" if task in (None, "free") else task


def parse_mix(text: str) -> dict[str, float]:
    """``"gsm8k=0.4,mmlu_pro=0.3,math"`` or ``"mmlu_pro,gsm8k"`` -> shares summing to 1 (a bare
    name takes an equal share of what the weighted ones leave; all bare: equal shares).
    ConfigError naming the bad part."""
    weighted: dict[str, float] = {}
    bare: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, w = part.partition("=")
        name = name.strip()
        if name not in FAMILIES:
            raise ConfigError("tasks", f"unknown task {name!r}; known: {', '.join(FAMILIES)}")
        if name in weighted or name in bare:
            raise ConfigError("tasks", f"task {name!r} named twice")
        if eq:
            try:
                share = float(w)
            except ValueError:
                raise ConfigError("mix", f"share of {name} must be a number, got {w!r}") from None
            if not share > 0:
                raise ConfigError("mix", f"share of {name} must be > 0, got {w}")
            weighted[name] = share
        else:
            bare.append(name)
    if not weighted and not bare:
        raise ConfigError("tasks", "names no task family")
    total = sum(weighted.values())
    if bare:
        if total >= 1.0:
            raise ConfigError("mix", f"the given shares sum to {total:g}; nothing is left for "
                              f"{', '.join(bare)}")
        left = (1.0 - total) / len(bare) if weighted else 1.0 / len(bare)
        weighted.update({b: left for b in bare})
        total = sum(weighted.values())
    return {k: v / total for k, v in weighted.items()}
