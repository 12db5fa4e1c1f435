"""The cyclic garbage collector of a training process, settled once after setup.

A training process holds ~650,000 long-lived objects after setup (recorded answers, task data,
modules, Ray and RLlib), and sampling and learning make short-lived ones by the million
(episodes, simulation events, dicts of features). With CPython's default thresholds (700, 10,
10) the collector ran every few hundred allocations and every full collection walked the whole
heap: 14-18 % of sampling's time and up to 0.5 s of a learner update (docs/learning.md,
"Training throughput"). :func:`settle` moves the objects alive now out of the collector's reach
(``gc.freeze``) and collects young objects in larger batches. Reference counting frees almost
everything at once either way; only reference cycles wait a little longer. Nothing computed
changes (a test compares a seeded run's decisions and rewards with and without it).
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 20_000
"""Allocations between young-generation collections (CPython's default: 700)."""


def settle() -> None:
    """Freeze the objects alive now and raise the young generation's threshold (idempotent
    in effect; call again after more long-lived objects were made)."""
    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, g1, g2)
