"""The canary: a candidate version serves a configured share of live queries beside the
incumbent until a sequential test (``policy/gate_stats.py``) decides promote or rollback.

Routing is per query: a seeded hash of the query id below ``share`` goes to the candidate, so a
client's retried query id lands on the same arm (unless the harm guard held it back). With
``harm_guard`` (the default) a query goes to the candidate only if the candidate's share of the
canary's queries, this one included, stays at most ``tolerance / G``, where ``G`` (at most 1) is
the larger over the two metrics of the always-valid upper bound of the incumbent's lead over
the candidate. Live goodput is the incumbent's plus that share times the candidate's observed
difference, which the bound covers, so live goodput and SLO attainment during the canary stay
within ``tolerance`` of the incumbent's: the share starts at ``tolerance`` (nothing is known
yet) and rises towards ``share`` as the candidate shows that it is not worse.

Every answered query of either arm adds its goodput (correct and within budget; unlabelled
queries add nothing to goodput) and its SLO attainment (within budget) to that arm. After each
outcome (from ``min_queries`` canary queries on) the test looks:

- **rollback** when the candidate is worse than the incumbent by more than ``tolerance`` on
  either metric (always-valid bound, ``alpha``);
- **promote** when it is non-inferior on both metrics (always-valid bound), or when it has
  served ``max_queries`` with no harm detected and observed differences above ``-tolerance``;
- **rollback** ("inconclusive") at ``max_queries`` otherwise.

No more than ``max_queries`` queries are ever routed to the candidate.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field

from inframind_ray.config import CanaryConfig
from inframind_ray.core.types import PoolInfo
from inframind_ray.policy.gate_stats import (
    ArmStats,
    SequentialResult,
    mixture_rho,
    sequential_compare,
)
from inframind_ray.policy.learned import LearnedPolicy
from inframind_ray.policy.registry import PolicyRegistry, RegistryError
from inframind_ray.serving.metrics import OrchestratorMetrics

log = logging.getLogger(__name__)

METRICS = ("goodput", "slo_attainment")


def query_hash(key: str) -> int:
    """A stable 64-bit hash of ``key`` (a seed and a query id): query ids split by share."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def routed_to_candidate(query_id: str, share: float, seed: int) -> bool:
    """Whether a query id goes to the candidate: its seeded hash, as a number in [0, 1),
    is below ``share``."""
    return query_hash(f"{seed}:{query_id}") / 2 ** 64 < share


@dataclass
class Canary:
    """A running canary of ``candidate`` against ``incumbent`` (in memory, per orchestrator)."""

    candidate: str
    incumbent: str
    cfg: CanaryConfig
    started: float = field(default_factory=time.time)
    arms: dict[str, dict[str, ArmStats]] = field(default_factory=lambda: {
        a: {m: ArmStats() for m in METRICS} for a in ("candidate", "incumbent")})
    routed: dict[str, int] = field(default_factory=lambda: {"candidate": 0, "incumbent": 0})
    decision: str | None = None  # promote | rollback
    reason: str = ""

    def route(self, query_id: str) -> bool:
        """True if this query goes to the candidate (never past ``max_queries``, nor once
        decided, nor past the harm guard's share)."""
        to_cand = (self.decision is None and self.routed["candidate"] < self.cfg.max_queries
                   and routed_to_candidate(query_id, self.cfg.share, self.cfg.seed)
                   and (self.routed["candidate"] + 1) <= self.share_cap() * (
                       sum(self.routed.values()) + 1))
        self.routed["candidate" if to_cand else "incumbent"] += 1
        return to_cand

    def share_cap(self, tests: list[SequentialResult] | None = None) -> float:
        """The most the candidate's share of the canary's queries may be now: ``share``, or
        with the harm guard ``min(share, tolerance / G)`` (module docstring); ``tests``: the
        tests now, if already computed."""
        if not self.cfg.harm_guard:
            return self.cfg.share
        # the incumbent's lead, upper bound, over the metrics either arm has outcomes of
        # (unlabelled traffic gives no goodput); before any outcome it is taken as 1
        leads = [-t.diff_lower for t in tests or self.tests()
                 if t.n_candidate + t.n_incumbent > 0]
        lead = min(1.0, max(leads, default=1.0))
        return min(self.cfg.share, self.cfg.tolerance / max(lead, 1e-9))

    def observe(self, candidate: bool, correct: bool | None, within_budget: bool) -> None:
        """One answered query's outcome on its arm; then decide, if the test can."""
        arm = self.arms["candidate" if candidate else "incumbent"]
        arm["slo_attainment"] = arm["slo_attainment"].add(within_budget)
        if correct is not None:
            arm["goodput"] = arm["goodput"].add(bool(correct) and within_budget)
        if self.decision is None:
            self._decide()

    def tests(self) -> list[SequentialResult]:
        """The sequential test of each metric now."""
        rho = mixture_rho(self.cfg.alpha / 2, self.cfg.max_queries)
        return [sequential_compare(m, self.arms["candidate"][m], self.arms["incumbent"][m],
                                   self.cfg.tolerance, self.cfg.alpha, rho) for m in METRICS]

    def _decide(self) -> None:
        n = self.arms["candidate"]["slo_attainment"].n
        if n < self.cfg.min_queries:
            return
        tests = self.tests()
        harmed = [t.metric for t in tests if t.harm]
        if harmed:
            self.decision = "rollback"
            self.reason = (f"harm: candidate worse than incumbent by more than "
                           f"{self.cfg.tolerance:g} on {', '.join(harmed)} after {n} canary "
                           "queries (always-valid bound, alpha "
                           f"{self.cfg.alpha:g})")
        elif all(t.non_inferior for t in tests):
            self.decision = "promote"
            self.reason = f"non-inferior on {', '.join(METRICS)} after {n} canary queries"
        elif n >= self.cfg.max_queries:
            ok = all(t.n_candidate > 0 and t.diff > -self.cfg.tolerance for t in tests)
            self.decision = "promote" if ok else "rollback"
            self.reason = (f"canary cap of {self.cfg.max_queries} queries reached with no harm "
                           "detected" + ("" if ok else " but an observed drop past the "
                                         "tolerance (inconclusive)"))

    def describe(self) -> dict:
        """For ``/v1/state`` and the registry's gate results."""
        total = sum(self.routed.values())
        tests = self.tests()
        return {"candidate": self.candidate, "incumbent": self.incumbent,
                "started": round(self.started, 3), "config": self.cfg.model_dump(),
                "routed": dict(self.routed),
                "served_share": round(self.routed["candidate"] / total, 4) if total else 0.0,
                "share_cap": round(self.share_cap(tests), 4),
                "decision": self.decision, "reason": self.reason,
                "tests": [t.as_dict() for t in tests]}


class CanaryRunner:
    """The orchestrator's side: starts the canary the registry asks for, routes queries,
    observes their outcomes, and hands the decision to the registry (promote, or the candidate
    rejected with the reason; the test into its gate results)."""

    def __init__(self, registry: PolicyRegistry, cfg: CanaryConfig,
                 metrics: OrchestratorMetrics) -> None:
        self.registry, self.cfg, self.metrics = registry, cfg, metrics
        self.running: Canary | None = None
        self.policy: LearnedPolicy | None = None  # the candidate's, on the pool
        self.last: dict | None = None  # the last finished canary's outcome

    def reset(self) -> None:
        """Drop the running canary (a pool change: its outcomes were on the old pool)."""
        self.running, self.policy = None, None

    def sync(self, version: str | None, incumbent: str | None, pool: PoolInfo) -> None:
        """Start the registry's canary of ``version`` against ``incumbent`` (the version
        serving), or drop one the registry no longer names; a candidate that cannot load ends
        rejected at once. RegistryError if the registry cannot be written."""
        if self.running is not None and self.running.candidate != version:
            log.info("canary of %s dropped by the registry", self.running.candidate)
            self.reset()
        if version is None or self.running is not None or incumbent is None:
            return
        try:
            self.policy = self.registry.check(version, pool)
        except RegistryError as e:
            self.registry.end_canary(version, False, f"cannot load: {e}", pool)
            return
        self.running = Canary(version, incumbent, self.cfg)
        log.info("canary of %s against %s: %s of the queries", version, incumbent,
                 self.cfg.share)

    def route(self, query_id: str) -> bool:
        """True if the query goes to the candidate (False when no canary runs)."""
        return self.running is not None and self.running.route(query_id)

    def observe(self, to_candidate: bool, within_budget: bool, correct: bool | None,
                pool: PoolInfo) -> bool:
        """One answered query into the running canary; True once it has decided (the
        registry then has the outcome)."""
        c = self.running
        if c is None:
            return False
        c.observe(to_candidate, correct, within_budget)
        self.metrics.set_canary(c.candidate, c.routed)
        if c.decision is None:
            return False
        self.reset()
        out = c.describe()
        try:
            self.registry.record_gate(c.candidate, "canary", {"passed": c.decision == "promote",
                                                              **out})
            self.registry.end_canary(c.candidate, c.decision == "promote", c.reason, pool)
        except RegistryError as e:
            out["registry_error"] = str(e)
            log.warning("canary of %s: %s", c.candidate, e)
        self.last = out
        self.metrics.set_canary(None, {})
        log.info("canary of %s: %s (%s)", c.candidate, c.decision, c.reason)
        return True

    def describe(self) -> dict:
        """``/v1/state``'s ``canary`` (the running one) and ``last_canary``."""
        return {"canary": None if self.running is None else self.running.describe(),
                "last_canary": self.last}
