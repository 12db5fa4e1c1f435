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
