"""Deterministic draws and plurality voting shared by the outcome models."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

from inframind_ray import assumptions as A


def uniform(*keys: object) -> float:
    """A deterministic uniform number in [0, 1) from the keys."""
    h = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def fix_probability(accuracy: float) -> float:
    """Probability that a fresh sample is right where the recorded answer was wrong, so that
    every sample keeps the model's accuracy (assumption SAMPLE_KEEPS_CORRECT)."""
    keep = A.SAMPLE_KEEPS_CORRECT
    return min(1.0, accuracy * (1.0 - keep) / max(1e-9, 1.0 - accuracy))


def plurality(answers: Sequence[str], prefer: str | None = None) -> str | None:
    """Most common answer; ties go to ``prefer`` if tied, else to the earliest in ``answers``."""
    if not answers:
        return None
    counts = Counter(answers)
    top = max(counts.values())
    tied = [x for x in answers if counts[x] == top]
    return prefer if prefer in tied else tied[0]
