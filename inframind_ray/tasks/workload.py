"""Workload: real benchmark items from one split (MMLU-Pro, or a stated mix of task families),
arrivals (Poisson or replayed trace), budgets."""

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
from inframind_ray.tasks.registry import family

SPLITS = ("train", "val", "test")
MMLU_ONLY = (("mmlu_pro", 1.0),)


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
    tasks: tuple[tuple[str, float], ...] = MMLU_ONLY  # (family, share of the queries)

    def __post_init__(self) -> None:
        # the arrival stream is keyed on the rate's text: 300 and 300.0 must be the same rate
        object.__setattr__(self, "rate_per_min", float(self.rate_per_min))

    def validate(self) -> None:
        """Raise ConfigError naming the bad field."""
        if not self.rate_per_min > 0:
            raise ConfigError("rate", f"must be > 0 req/min, got {self.rate_per_min}")
        if self.n_queries < 1:
            raise ConfigError("queries", f"must be >= 1, got {self.n_queries}")
        if not self.tasks:
            raise ConfigError("tasks", "names no task family")
        for t, share in self.tasks:
            try:
                family(t)
            except ValueError as e:
                raise ConfigError("tasks", str(e)) from None
            if not share > 0:
                raise ConfigError("mix", f"share of {t} must be > 0, got {share}")
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
    """``n_queries`` distinct MMLU-Pro question ids of the split (seeded). More queries than
    the split has items (a long ``bench --duration`` cell at a high rate) take every item in a
    seeded order, then again in fresh orders, as the mixed workload's small splits do."""
    ids = split_items(spec.split)
    if len(ids) == 0:
        raise ConfigError("split", f"split {spec.split!r} is empty")
    rng = _rng(spec.seed, "items", spec.split)
    if spec.n_queries <= len(ids):
        return rng.choice(ids, size=spec.n_queries, replace=False)
    reps = -(-spec.n_queries // len(ids))
    return np.concatenate([rng.permutation(ids) for _ in range(reps)])[:spec.n_queries]


def family_counts(spec: WorkloadSpec) -> dict[str, int]:
    """Queries per family: the shares of ``n_queries``, rounded by largest remainder."""
    raw = {t: share * spec.n_queries for t, share in spec.tasks}
    counts = {t: int(np.floor(v)) for t, v in raw.items()}
    left = spec.n_queries - sum(counts.values())
    for t in sorted(raw, key=lambda t: (counts[t] - raw[t], t))[:left]:
        counts[t] += 1
    return counts


def sample_task_items(spec: WorkloadSpec) -> list[tuple[str, int]]:
    """(family, item id) of every query, in arrival order (seeded; the same for every policy
    and rate). MMLU-Pro alone draws as :func:`sample_items`. In a mix each family draws its
    share from its split's replayable items without replacement, and again from the start of
    a fresh permutation where the split has fewer items than the share (small code splits)."""
    if spec.tasks == MMLU_ONLY:
        return [("mmlu_pro", int(i)) for i in sample_items(spec)]
    out: list[tuple[str, int]] = []
    for t, n in family_counts(spec).items():
        ids = family(t).split_ids(spec.split)
        if len(ids) == 0:
            raise ConfigError("split", f"split {spec.split!r} of {t} has no items")
        rng = _rng(spec.seed, "items", spec.split, t)
        reps = -(-n // len(ids))
        drawn = np.concatenate([rng.permutation(ids) for _ in range(reps)])[:n]
        out += [(t, int(i)) for i in drawn]
    order = _rng(spec.seed, "order", spec.split).permutation(len(out))
    return [out[i] for i in order]


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


def make_queries(spec: WorkloadSpec) -> list[QueryInfo]:
    """The full query list of one run (arrival_s relative to the run's start)."""
    spec.validate()
    items, times, buds = sample_task_items(spec), arrival_times(spec), budgets(spec)
    out = []
    for n, ((t, item), at, b) in enumerate(zip(items, times, buds, strict=True)):
        fam = family(t)
        qid = f"q{n:05d}-{item}" if t == "mmlu_pro" else f"q{n:05d}-{t}-{item}"
        out.append(fam.query(item, qid, float(b), float(at), embedding=fam.embedding(item)))
    return out
