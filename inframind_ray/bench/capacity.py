"""A pool's capacity: the arrival rate (req/min) at which the best task-only baseline
(always-strongest, static-task, moa) falls below 50 % SLO attainment, in cells of the bench's
duration on the twin with a fixed seed. Found by a geometric bracket-and-bisect on the rate;
load factors of ``inframind bench`` are rates over it.

To save runs, a probe stops at the first baseline that reaches 50 % (that settles the best's
side), and skips a baseline already below 50 % at a lower probed rate: SLO attainment is taken
not to rise with the arrival rate (more load never shortens a queue). The first probe runs every
baseline, so one that is below 50 % even there (MoA's multi-round plans on 20-90 s budgets) is
never run again."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from inframind_ray import assumptions as A
from inframind_ray.bench.sweep import DEFAULT_DURATION_S, queries_for
from inframind_ray.config import PoolConfig
from inframind_ray.errors import ConfigError
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec

TASK_ONLY = ("always-strongest", "static-task", "moa")
"""The task-only baselines whose best SLO attainment defines capacity (cheapest first)."""
SLO_THRESHOLD = 0.5
START_RPM = 60.0
MIN_RPM, MAX_RPM = 0.5, 100_000.0
REL_TOL = 0.05


@dataclass(frozen=True)
class Probe:
    """One probed rate: SLO attainment of the baselines run there (cheapest first; the rest are
    skipped once one reaches the threshold, which settles the best's side of it)."""

    rate_per_min: float
    n_queries: int
    attainment: dict[str, float]

    @property
    def best(self) -> float:
        """The best attainment among the baselines run."""
        return max(self.attainment.values())


@dataclass
class CapacityResult:
    """The bracket [lo, hi] (best attainment >= threshold at lo, below at hi), its geometric
    midpoint as the capacity, and every probe in order."""

    lo: float
    hi: float
    probes: list[Probe] = field(default_factory=list)

    @property
    def capacity_rpm(self) -> float:
        """Geometric midpoint of the final bracket, req/min."""
        return math.sqrt(self.lo * self.hi)


def bisect_capacity(best_attainment: Callable[[float], Probe], start: float = START_RPM,
                    rel_tol: float = REL_TOL, min_rpm: float = MIN_RPM,
                    max_rpm: float = MAX_RPM, on_probe: Callable[[Probe], None] | None = None
                    ) -> CapacityResult:
    """Double (or halve) from ``start`` until the best attainment is on both sides of the
    threshold, then bisect the rate geometrically until hi / lo <= 1 + rel_tol. ConfigError if
    the crossing lies outside [min_rpm, max_rpm]."""
    probes: list[Probe] = []

    def probe(rate: float) -> bool:
        p = best_attainment(rate)
        probes.append(p)
        if on_probe:
            on_probe(p)
        return p.best >= SLO_THRESHOLD

    rate = start
    if probe(rate):
        lo = rate
        while True:
            rate = lo * 2
            if rate > max_rpm:
                raise ConfigError("capacity", f"the best task-only baseline keeps >= 50 % SLO "
                                  f"attainment up to {lo:g} req/min (search limit {max_rpm:g})")
            if not probe(rate):
                hi = rate
                break
            lo = rate
    else:
        hi = rate
        while True:
            rate = hi / 2
            if rate < min_rpm:
                raise ConfigError("capacity", f"the best task-only baseline is below 50 % SLO "
                                  f"attainment even at {hi:g} req/min (search limit {min_rpm:g})")
            if probe(rate):
                lo = rate
                break
            hi = rate
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return CapacityResult(lo, hi, probes)


@dataclass(frozen=True)
class CapacitySpec:
    """What a capacity measurement runs: the pool, workload and cell duration (as the bench's)."""

    pool: PoolConfig
    tasks: tuple[tuple[str, float], ...] = MMLU_ONLY
    duration_s: float = DEFAULT_DURATION_S
    seed: int = 0
    split: str = "test"
    arrivals: str = "poisson"
    budget_range_s: tuple[float, float] = A.BUDGET_RANGE_S
    scheduling: str | None = None
    baselines: tuple[str, ...] = TASK_ONLY
    rel_tol: float = REL_TOL
    start_rpm: float = START_RPM

    def probe(self, rate: float, below_at: dict[str, float] | None = None,
              run_all: bool = False) -> Probe:
        """Run the baselines at ``rate`` (one twin cell each, cheapest first) until one reaches
        the threshold (every one if ``run_all``), skipping those ``below_at`` (baseline -> the
        lowest rate where it was below the threshold) a rate <= ``rate``."""
        from inframind_ray.bench.runner import CellSpec, run_cell

        n = queries_for(rate, self.duration_s)
        wl = WorkloadSpec(rate, n, self.arrivals, self.split, self.budget_range_s, self.seed,
                          self.tasks)
        got: dict[str, float] = {}
        for pol in self.baselines:
            if below_at and below_at.get(pol, math.inf) <= rate:
                continue
            got[pol] = run_cell(CellSpec(self.pool, pol, wl, self.scheduling)).summary[
                "slo_attainment"]
            if got[pol] >= SLO_THRESHOLD and not run_all:
                break
        return Probe(rate, n, got or {"(all below at a lower rate)": 0.0})


def measure_capacity(spec: CapacitySpec, on_probe: Callable[[Probe], None] | None = None
                     ) -> CapacityResult:
    """The pool's capacity under ``spec`` (module docstring)."""
    if not spec.duration_s > 0:
        raise ConfigError("duration", f"must be > 0 seconds, got {spec.duration_s:g}")
    WorkloadSpec(spec.start_rpm, 1, spec.arrivals, spec.split, spec.budget_range_s, spec.seed,
                 spec.tasks).validate()
    below_at: dict[str, float] = {}

    def probe(rate: float) -> Probe:
        p = spec.probe(rate, below_at, run_all=not below_at and rate == spec.start_rpm)
        for pol, v in p.attainment.items():
            if v < SLO_THRESHOLD and pol in spec.baselines:
                below_at[pol] = min(rate, below_at.get(pol, math.inf))
        return p

    return bisect_capacity(probe, spec.start_rpm, spec.rel_tol, on_probe=on_probe)


def capacity_doc(spec: CapacitySpec, res: CapacityResult, pool_source: str) -> dict:
    """The JSON record of a measurement (``inframind capacity --out``, bench meta)."""
    return {
        "pool": pool_source,
        "capacity_rpm": round(res.capacity_rpm, 3),
        "bracket_rpm": [round(res.lo, 3), round(res.hi, 3)],
        "definition": "arrival rate at which the best of " + ", ".join(spec.baselines)
                      + f" falls below {SLO_THRESHOLD:.0%} SLO attainment in twin cells of "
                      f"{spec.duration_s:g} simulated s (rate x duration queries), seed "
                      f"{spec.seed}; geometric bisection to {spec.rel_tol:.0%}",
        "duration_s": spec.duration_s,
        "seed": spec.seed,
        "split": spec.split,
        "arrivals": spec.arrivals,
        "tasks": {t: round(s, 4) for t, s in spec.tasks},
        "budget_range_s": list(spec.budget_range_s),
        "probes": [{"rate_per_min": round(p.rate_per_min, 3), "n_queries": p.n_queries,
                    "best": p.best, "slo_attainment": p.attainment} for p in res.probes],
    }
