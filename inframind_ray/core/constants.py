"""Tunables of the running system, one place each, every one overridable from the environment as
``INFRAMIND_<NAME>`` (read once, at import). Configuration files (pool YAML, RLlib configs) take
their defaults from here; what the recorded data does not give lives in ``assumptions.py``."""

from __future__ import annotations

import os


def _env(name: str, default: float) -> float:
    raw = os.environ.get(f"INFRAMIND_{name}")
    if raw is None:
        return default
    try:
        return type(default)(raw)
    except ValueError:
        raise ValueError(f"INFRAMIND_{name}={raw!r}: expected a {type(default).__name__}") from None


EWMA_ALPHA = _env("EWMA_ALPHA", 0.2)
"""Weight of the newest request in the latency EWMAs that engines and replicas report."""

SLACK_CAP = _env("SLACK_CAP", 64)
"""Deadlines a replica lists per load snapshot (its earliest)."""

METRICS_PERIOD_S = _env("METRICS_PERIOD_S", 0.25)
"""Seconds between a served replica's load snapshots."""

STALE_AFTER_S = _env("STALE_AFTER_S", 1.0)
"""A replica snapshot older than this is stale: it still counts, and its age shows."""

UNAVAILABLE_AFTER_S = _env("UNAVAILABLE_AFTER_S", 10.0)
"""A model with no snapshot younger than this is unavailable (policies mask it)."""

EMBEDDING_DIM = _env("EMBEDDING_DIM", 384)
"""Size of the query embeddings (all-MiniLM-L6-v2)."""

LAS_FIRST_S = _env("LAS_FIRST_S", 1.0)
"""Attained-service queues (PLAS, ATLAS): the top priority level holds programs with less than
this many engine seconds attained. Autellix discretises priorities into levels; the values are
ours: one second is about one short (Flash / Concise) call of the pools' models, so a program's
first calls share the top level."""

LAS_RATIO = _env("LAS_RATIO", 2.0)
"""Each further level spans this factor more attained service (1-2 s, 2-4 s, ... : level
boundaries at ``LAS_FIRST_S * LAS_RATIO**k``)."""

LAS_LEVELS = _env("LAS_LEVELS", 8)
"""Priority levels of the attained-service queues (the last is unbounded: >= 64 s by default)."""

STARVATION_RATIO = _env("STARVATION_RATIO", 2.0)
"""Anti-starvation of the attained-service queues, as Autellix's: a waiting call is promoted to
the top level once its wait in the queue reaches this many times its program's attained service
(its own ranking key), then ranks there by arrival. Bound: no call waits longer than
``STARVATION_RATIO x attained`` before it outranks every call that arrived after it."""
