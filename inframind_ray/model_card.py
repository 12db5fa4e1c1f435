"""A model card file (``OUT/MODEL.yaml`` of ``inframind calibrate``) as the pool files name it: its
accuracy per task family, read once per path, and the replay key of a card's re-weighted answers."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from inframind_ray import data

CARD_KEY = "card:"
"""Prefix of a replay key ``card:RECORDED:PATH``: RECORDED's answers re-weighted to a card."""


@lru_cache(maxsize=64)
def card_accuracy(path: str) -> dict[str, float]:
    """{task family: accuracy} of a model card (``OUT/MODEL.yaml`` of ``inframind calibrate``);
    ValueError with one line if the file is missing, not a card, or names an unknown family."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
        fams = doc["families"]
        out = {str(f): float(v["accuracy"]) for f, v in fams.items()
               if v.get("n", 1) and v.get("accuracy") is not None}
    except FileNotFoundError:
        raise ValueError(f"no model card file {path}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        raise ValueError(f"{path} is not a model card (`inframind calibrate` writes one: "
                         "families.FAMILY.accuracy)") from None
    for f, a in out.items():
        if f != "mmlu_pro" and f not in data.TASK_FAMILIES:
            raise ValueError(f"model card {path}: unknown task family {f!r}")
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"model card {path}: accuracy of {f} must be in [0, 1], got {a}")
    return out
