"""Speed anchoring (``twin validate --anchor``, off by default).

A CPU host's speed drifts by tens of percent from minute to minute, which no fixed profile
follows. With it, a few lone probe requests run on the real engine before the first case and
after every case (``real_replay.probe_real``), and the twin replays each case with the profile's
time scale multiplied by the geometric mean of the two bracketing probes' real/twin latency
ratios. The probes are not part of any case; the fixed profile's errors are reported beside the
anchored ones (docs/fidelity.md has a run of each).
"""

from __future__ import annotations

import numpy as np

from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.profile import EntryDelay, FittedProfile, predict_lone


def anchored(fp: FittedProfile, speed: float) -> FittedProfile:
    """``fp`` with every time term (iteration coefficients, front-end delay) times ``speed``."""
    e = fp.entry
    return FittedProfile(fp.profile.scaled(1.0 / speed, 1.0 / speed),
                         fp.request_overhead_s * speed, fp.fit,
                         EntryDelay(e.busy_cut_s * speed, e.idle_edges_s,
                                    tuple(w * speed for w in e.idle_wake_s)))


def probe_speed(rows: list[dict], fp: FittedProfile) -> float | None:
    """Real/twin ratio of the probes' summed latencies (None without probes)."""
    if not rows:
        return None
    twin = sum(predict_lone(fp, r["prompt_tokens"], r["output_tokens"])[1] for r in rows)
    return sum(r["e2e_s"] for r in rows) / twin


def anchor_case(case: Case, fp: FittedProfile) -> None:
    """Set ``case.speed``: the geometric mean of the speed ratios of the probes run just before
    and just after the case (1 without probes)."""
    case.speed_before = probe_speed(case.probe_before, fp)
    case.speed_after = probe_speed(case.probe_after, fp)
    ratios = [x for x in (case.speed_before, case.speed_after) if x]
    case.speed = float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0
