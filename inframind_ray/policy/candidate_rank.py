"""Which learner candidate is worth a canary: candidates ranked by their twin replay-gate
goodput (``bench/replay_gate.py`` writes it into ``meta.json`` ``gates.replay``).

The twin replays the same seeded validation queries for the same gate workload and pool, so
two candidates' goodputs under one workload compare directly, whichever incumbent each was
gated against; scores from different workloads or pools do not compare."""

from __future__ import annotations

import json

TwinScore = tuple[str, float]  # (the gate's workload and pool as a key, the candidate's goodput)


def twin_score(gates: dict[str, object]) -> TwinScore | None:
    """A version's twin score from its gate results, or None (no passed replay gate)."""
    gate = gates.get("replay")
    if not isinstance(gate, dict) or not gate.get("passed"):
        return None
    tests = {t.get("metric"): t for t in gate.get("tests", []) if isinstance(t, dict)}
    if "goodput" not in tests:
        return None
    key = json.dumps([gate.get("config"), gate.get("pool_models")], sort_keys=True)
    return key, float(tests["goodput"]["candidate"])


def beats(a: TwinScore | None, b: TwinScore | None, margin: float) -> bool | None:
    """Whether score ``a`` exceeds ``b`` by more than ``margin``; None when they do not
    compare (a score missing, or another workload)."""
    if a is None or b is None or a[0] != b[0]:
        return None
    return a[1] > b[1] + margin
