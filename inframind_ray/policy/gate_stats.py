"""The statistics of guarded promotion (docs/continual.md, "Gates"), in one place.

- **Replay gate** (paired, fixed sample): candidate and incumbent answer the same validation
  queries with the same arrivals in the twin; per query the difference ``d = x_cand - x_inc`` of
  a 0/1 outcome (goodput, SLO attainment). One-sided non-inferiority: the candidate passes a
  metric iff the lower ``1 - alpha`` confidence bound of ``mean(d)`` (normal approximation,
  ``mean - z * sd / sqrt(n)``) is above ``-tolerance``.
- **Canary** (sequential, two independent arms): per arm an always-valid one-sided confidence
  sequence for the mean of a [0, 1] outcome (Robbins' normal mixture for a 1/2-sub-Gaussian
  sum, Howard et al. 2021, "Time-uniform, nonparametric, nonasymptotic confidence
  sequences"): valid at every query count at once, so the test can be
  looked at after every query. ``harm``: the candidate's upper bound minus the incumbent's lower
  bound is below ``-tolerance`` (worse by more than the tolerance, at level ``alpha``).
  ``non_inferior``: the candidate's lower bound minus the incumbent's upper bound is above
  ``-tolerance``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

SUB_GAUSSIAN_SIGMA = 0.5  # a [0, 1] outcome is 1/2-sub-Gaussian (Hoeffding)


@dataclass(frozen=True)
class PairedResult:
    """The replay gate's test of one metric."""

    metric: str
    n: int
    incumbent: float  # mean outcome
    candidate: float
    diff: float  # candidate - incumbent
    lower: float  # one-sided lower confidence bound of diff
    tolerance: float
    alpha: float
    passed: bool

    def as_dict(self) -> dict:
        """JSON-ready (rounded)."""
        return {k: round(v, 5) if isinstance(v, float) else v for k, v in asdict(self).items()}


def paired_noninferiority(metric: str, cand: np.ndarray, inc: np.ndarray, tolerance: float,
                          alpha: float) -> PairedResult:
    """One-sided paired non-inferiority of ``cand`` over ``inc`` (same queries, same order):
    passes iff ``mean(d) - z_{1-alpha} sd(d)/sqrt(n) > -tolerance``. ValueError on no pairs or
    mismatched lengths."""
    cand, inc = np.asarray(cand, float), np.asarray(inc, float)
    if cand.shape != inc.shape or cand.size < 2:
        raise ValueError(f"need >= 2 paired outcomes of equal length, got {cand.size}, "
                         f"{inc.size}")
    d = cand - inc
    n = d.size
    z = NormalDist().inv_cdf(1 - alpha)
    lower = float(d.mean() - z * d.std(ddof=1) / math.sqrt(n))
    return PairedResult(metric, n, float(inc.mean()), float(cand.mean()), float(d.mean()),
                        lower, tolerance, alpha, lower > -tolerance)


def mixture_rho(alpha: float, n_opt: float, sigma: float = SUB_GAUSSIAN_SIGMA) -> float:
    """The normal mixture's precision that makes the boundary tightest near ``n_opt``
    observations (Howard et al. 2021)."""
    la = 2 * math.log(1 / alpha)
    return sigma ** 2 * n_opt / (la + math.log(1 + la))


def cs_radius(n: int, alpha: float, rho: float, sigma: float = SUB_GAUSSIAN_SIGMA) -> float:
    """Radius of the one-sided always-valid confidence sequence for a mean after ``n``
    observations (``inf`` at 0): P(exists n: mean_n - mu > radius_n) <= alpha."""
    if n <= 0:
        return math.inf
    v = n * sigma ** 2 + rho
    return math.sqrt(2 * v * math.log(math.sqrt(v / rho) / alpha)) / n


@dataclass(frozen=True)
class ArmStats:
    """One arm's running counts of a 0/1 outcome."""

    n: int = 0
    successes: float = 0.0

    @property
    def mean(self) -> float:
        """Observed mean (nan with no observation)."""
        return self.successes / self.n if self.n else math.nan

    def add(self, x: float) -> ArmStats:
        """This arm with one more outcome."""
        return ArmStats(self.n + 1, self.successes + float(x))


@dataclass(frozen=True)
class SequentialResult:
    """The canary's test of one metric at one look."""

    metric: str
    n_candidate: int
    n_incumbent: int
    candidate: float
    incumbent: float
    diff: float
    diff_lower: float  # always-valid lower bound of candidate - incumbent
    diff_upper: float  # always-valid upper bound
    tolerance: float
    alpha: float
    harm: bool  # diff_upper < -tolerance
    non_inferior: bool  # diff_lower > -tolerance

    def as_dict(self) -> dict:
        """JSON-ready (rounded; infinities as None)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v)
                    else round(v, 5) if isinstance(v, float) else v)
                for k, v in asdict(self).items()}


def sequential_compare(metric: str, cand: ArmStats, inc: ArmStats, tolerance: float,
                       alpha: float, rho: float) -> SequentialResult:
    """Always-valid comparison of two independent arms: each side's bound uses ``alpha / 2``
    per arm, so ``harm`` and ``non_inferior`` each hold with error at most ``alpha`` at every
    look (a union bound over the two arms)."""
    rc, ri = cs_radius(cand.n, alpha / 2, rho), cs_radius(inc.n, alpha / 2, rho)
    mc = cand.mean if cand.n else 0.0
    mi = inc.mean if inc.n else 0.0
    lower, upper = (mc - rc) - (mi + ri), (mc + rc) - (mi - ri)
    return SequentialResult(metric, cand.n, inc.n, cand.mean, inc.mean, mc - mi, lower, upper,
                            tolerance, alpha, upper < -tolerance, lower > -tolerance)
