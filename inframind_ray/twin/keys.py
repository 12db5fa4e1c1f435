"""Deterministic draws and plurality voting shared by the outcome models."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence


def uniform(*keys: object) -> float:
    """A deterministic uniform number in [0, 1) from the keys."""
    h = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


def plurality(answers: Sequence[str], prefer: str | None = None) -> str | None:
    """Most common answer; ties go to ``prefer`` if tied, else to the earliest in ``answers``."""
    if not answers:
        return None
    counts = Counter(answers)
    top = max(counts.values())
    tied = [x for x in answers if counts[x] == top]
    return prefer if prefer in tied else tied[0]
