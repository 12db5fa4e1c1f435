"""Workload: real MMLU-Pro items from one split, arrivals (Poisson or replayed trace), budgets."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core.types import QueryInfo
from inframind_ray.errors import ConfigError
from inframind_ray.tasks.base import TaskFamily
from inframind_ray.tasks.mmlu_pro import mmlu_pro

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class WorkloadSpec:
    """What queries arrive and when. Items and budgets depend on the seed only (the same for every
    policy and rate); arrival times on (seed, rate)."""

    rate_per_min: float
    n_queries: int
    arrivals: str = "poisson"  # or "trace:<name>"
    split: str = "test"
    budget_range_s: tuple[float, float] = A.BUDGET_RANGE_S
    seed: int = 0

    def __post_init__(self) -> None:
        # the arrival stream is keyed on the rate's text: 300 and 300.0 must be the same rate
        object.__setattr__(self, "rate_per_min", float(self.rate_per_min))

    def validate(self) -> None:
        """Raise ConfigError naming the bad field."""
        if not self.rate_per_min > 0:
            raise ConfigError("rate", f"must be > 0 req/min, got {self.rate_per_min}")
        if self.n_queries < 1:
            raise ConfigError("queries", f"must be >= 1, got {self.n_queries}")
        if self.split not in SPLITS:
            raise ConfigError("split", f"must be one of {', '.join(SPLITS)}, got {self.split!r}")
        lo, hi = self.budget_range_s
        if not 0 < lo <= hi:
            raise ConfigError("budget", f"need 0 < min <= max, got {lo}..{hi}")
        if self.arrivals != "poisson":
            kind, _, name = self.arrivals.partition(":")
            if kind != "trace" or name not in data.TRACES:
                raise ConfigError(
                    "arrivals",
                    f"must be 'poisson' or 'trace:NAME' with NAME in {', '.join(data.TRACES)}, "
                    f"got {self.arrivals!r}",
                )


def _rng(seed: int, *keys: object) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(str(k).encode()) for k in keys)])


def split_items(split: str, task: TaskFamily | None = None) -> np.ndarray:
    """Item ids of one split (MMLU-Pro unless ``task`` names another family)."""
    return (task or mmlu_pro()).split_ids(split)


def sample_items(spec: WorkloadSpec) -> np.ndarray:
    """``n_queries`` distinct question ids of the split (seeded)."""
    ids = split_items(spec.split)
    if len(ids) == 0:
        raise ConfigError("split", f"split {spec.split!r} is empty")
    if spec.n_queries > len(ids):
        raise ConfigError(
            "queries", f"{spec.n_queries} exceeds the {len(ids)} items of split {spec.split!r}"
        )
    return _rng(spec.seed, "items", spec.split).choice(ids, size=spec.n_queries, replace=False)


def arrival_times(spec: WorkloadSpec) -> np.ndarray:
    """Arrival times in seconds from 0, at ``rate_per_min`` on average."""
    n, rate_s = spec.n_queries, spec.rate_per_min / 60.0
    rng = _rng(spec.seed, "arrivals", spec.arrivals, spec.rate_per_min)
    if spec.arrivals == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate_s, size=n))
    t = data.trace(spec.arrivals.partition(":")[2])
    gaps = np.diff(t)
    # replay consecutive gaps from a seeded offset, wrapping; rescale to the target mean rate
    start = int(rng.integers(len(gaps)))
    g = np.take(gaps, np.arange(start, start + n), mode="wrap")
    g = g * (1.0 / rate_s) / gaps.mean()
    return np.cumsum(g)


def budgets(spec: WorkloadSpec) -> np.ndarray:
    """Per-query latency budgets, uniform in ``budget_range_s``."""
    lo, hi = spec.budget_range_s
    return _rng(spec.seed, "budgets").uniform(lo, hi, size=spec.n_queries)


def make_queries(spec: WorkloadSpec, task: TaskFamily | None = None) -> list[QueryInfo]:
    """The full query list of one run (arrival_s relative to the run's start), MMLU-Pro items
    unless ``task`` names another family."""
    spec.validate()
    task = task or mmlu_pro()
    items, times, buds = sample_items(spec), arrival_times(spec), budgets(spec)
    return [task.query(int(item), f"q{n:05d}-{int(item)}", float(b), float(t),
                       embedding=task.embedding(int(item)))
            for n, (item, t, b) in enumerate(zip(items, times, buds, strict=True))]
