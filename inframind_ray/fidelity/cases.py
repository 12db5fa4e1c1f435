"""The validation cases: the arrival sequences, token counts and deadlines that `twin validate`
replays on the real engine and on the twin, and the record of both sides (``Case``).

Poisson at each rate, a bursty trace replay (``trace:azure_conv`` gaps rescaled to a rate), an
EDF case (mixed deadlines: is the completion order the same?) and a KV-pressure case (a second
engine with a small KV cache and more sequence slots: waiting and preemption).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inframind_ray.fidelity.real import FAR_FUTURE_S
from inframind_ray.tasks.workload import WorkloadSpec, arrival_times


@dataclass
class Case:
    """One replayed workload."""

    name: str
    rate_per_min: float
    arrivals: np.ndarray  # seconds from the start
    prompt_tokens: np.ndarray  # targets (the real engine reports the true counts)
    output_tokens: np.ndarray
    budgets_s: np.ndarray  # deadline - arrival
    engine: str = "main"  # or "kv" (the small-KV engine)
    real: list[dict] = field(default_factory=list)
    twin: list[dict] = field(default_factory=list)
    real_samples: list[dict] = field(default_factory=list)
    twin_samples: list[dict] = field(default_factory=list)
    twin_fixed: list[dict] = field(default_factory=list)  # the unanchored profile's replay
    probe_before: list[dict] = field(default_factory=list)
    probe_after: list[dict] = field(default_factory=list)
    speed: float = 1.0  # real/twin time scale from the bracketing probes (1 = not anchored)
    speed_before: float | None = None
    speed_after: float | None = None


def draw_lengths(rng: np.random.Generator, n: int, prompt: tuple[int, int],
                 output: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Log-uniform prompt and uniform output lengths of ``n`` requests."""
    p = np.exp(rng.uniform(math.log(prompt[0]), math.log(prompt[1]), n)).astype(int)
    o = rng.integers(output[0], output[1] + 1, n)
    return p, o


def make_cases(rates: tuple[float, ...], n: int, seed: int = 0, *, trace_rate: float | None = None,
               edf_rate: float | None = None, kv_rate: float | None = None,
               prompt: tuple[int, int] = (32, 512), output: tuple[int, int] = (16, 192),
               kv_prompt: tuple[int, int] = (128, 384), kv_output: tuple[int, int] = (96, 256),
               ) -> list[Case]:
    """Poisson per rate, then trace, EDF and KV-pressure cases (None skips one)."""
    cases = []
    far = np.full(n, FAR_FUTURE_S)
    for i, rate in enumerate(rates):
        rng = np.random.default_rng([seed, 1, i])
        p, o = draw_lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=rate, n_queries=n, seed=seed))
        cases.append(Case(f"poisson-{rate:g}", rate, t, p, o, far))
    if trace_rate:
        rng = np.random.default_rng([seed, 2])
        p, o = draw_lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=trace_rate, n_queries=n, seed=seed,
                                       arrivals="trace:azure_conv"))
        cases.append(Case(f"trace-azure_conv-{trace_rate:g}", trace_rate, t, p, o, far))
    if edf_rate:
        rng = np.random.default_rng([seed, 3])
        p, o = draw_lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=edf_rate, n_queries=n, seed=seed + 1))
        # mixed deadlines, all far enough that nothing is aborted: only the order changes
        cases.append(Case(f"edf-{edf_rate:g}", edf_rate, t, p, o, rng.uniform(60.0, 600.0, n)))
    if kv_rate:
        rng = np.random.default_rng([seed, 4])
        p, o = draw_lengths(rng, n, kv_prompt, kv_output)
        t = arrival_times(WorkloadSpec(rate_per_min=kv_rate, n_queries=n, seed=seed + 2))
        cases.append(Case(f"kv-pressure-{kv_rate:g}", kv_rate, t, p, o, far, engine="kv"))
    return cases
