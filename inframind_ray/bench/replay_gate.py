"""The twin replay gate: a candidate policy version against the incumbent on validation items,
paired (same items, budgets and arrivals) in the twin built from the pool's live state (its
current model cards and profiles), with the one-sided non-inferiority test of
``policy/gate_stats.py`` on goodput and SLO attainment. The result goes into the candidate's
``meta.json`` (``gates.replay``)."""

from __future__ import annotations

import math
import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from inframind_ray import assumptions as A
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import PoolConfig
from inframind_ray.policy.gate_stats import paired_noninferiority
from inframind_ray.policy.registry import PolicyRegistry, RegistryError
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec

METRICS = ("goodput", "slo_attainment")


class ReplayGateConfig(BaseModel):
    """The gate's workload and test (docs/continual.md says why these defaults)."""

    model_config = ConfigDict(extra="forbid")
    n_queries: int = Field(300, ge=10, le=100_000)
    rate_per_min: float = Field(60.0, gt=0)
    split: str = "val"  # never the training items
    seed: int = 0
    tasks: tuple[tuple[str, float], ...] = MMLU_ONLY
    budget_range_s: tuple[float, float] = A.BUDGET_RANGE_S  # scale it with a pool's time_scale
    tolerance: float = Field(0.02, ge=0, lt=1)
    alpha: float = Field(0.05, gt=0, lt=0.5)  # per metric, one-sided


def _outcomes(rows: list[dict]) -> dict[str, dict[str, float]]:
    return {r["query_id"]: {"goodput": float(r["correct"] and r["within_budget"]),
                            "slo_attainment": float(r["within_budget"])} for r in rows}


def replay_gate(pool: PoolConfig, registry: PolicyRegistry, candidate: str,
                incumbent: str | None = None, cfg: ReplayGateConfig | None = None,
                record_as: str | None = "replay") -> dict:
    """Run the gate (the incumbent defaults to the active version); the result, also written
    into the candidate's gate results under ``record_as`` (None: not written). ``passed``:
    non-inferior on every metric.
    RegistryError (one line) for an unknown version or no incumbent."""
    cfg = cfg or ReplayGateConfig()
    incumbent = incumbent or registry.state().active
    if incumbent is None:
        raise RegistryError("no incumbent: the registry has no active version")
    if cfg.split == "train":
        raise RegistryError("the replay gate never runs on training items")
    wl = WorkloadSpec(rate_per_min=cfg.rate_per_min, n_queries=cfg.n_queries, split=cfg.split,
                      seed=cfg.seed, tasks=tuple(cfg.tasks),
                      budget_range_s=tuple(cfg.budget_range_s))
    wl.validate()
    t0 = time.time()
    cells = {}
    for arm, version in (("incumbent", incumbent), ("candidate", candidate)):
        path = registry.path(version)
        cells[arm] = run_cell(CellSpec(pool=pool, policy="inframind", workload=wl,
                                       checkpoint=str(path)))
    inc, cand = (_outcomes(cells[a].queries) for a in ("incumbent", "candidate"))
    ids = sorted(set(inc) & set(cand))
    tests = [paired_noninferiority(m, np.array([cand[i][m] for i in ids]),
                                   np.array([inc[i][m] for i in ids]), cfg.tolerance,
                                   cfg.alpha).as_dict() for m in METRICS]
    out = {"passed": all(t["passed"] for t in tests), "candidate": candidate,
           "incumbent": incumbent, "pool": pool.name,
           "pool_models": [m.name for m in pool.models], "config": cfg.model_dump(mode="json"),
           "tests": tests, "wall_s": round(time.time() - t0, 2), "at": round(time.time(), 3)}
    if record_as is not None:
        registry.record_gate(candidate, record_as, out)
    return out


def gain_shown(test: dict, min_gain: float, evidence: str = "mean") -> tuple[bool, str]:
    """Whether a replay-gate goodput test (``PairedResult.as_dict``) shows a gain above
    ``min_gain``: by its mean difference (``mean``), or by its one-sided (1 - alpha) lower
    bound (``lower``: a gain the gate's queries resolve, not one within their noise); and, if
    not, why (one line)."""
    if evidence not in ("mean", "lower"):
        raise ValueError(f"gain_evidence must be mean or lower, got {evidence!r}")
    if evidence == "mean":
        return test["diff"] > min_gain, (f"twin goodput {test['diff']:+.4f}, not above "
                                         f"{min_gain:g}")
    return test["lower"] > min_gain, (
        f"twin goodput {test['diff']:+.4f}, its one-sided {1 - test['alpha']:.0%} lower bound "
        f"{test['lower']:+.4f} not above {min_gain:g}")


def confirm_seed(cfg: ReplayGateConfig, candidate: str) -> int:
    """The confirmation replay's seed: the gate's seed + 1 + the version's number (the
    registry names versions ``v0001``, ``v0002``, ...: ``v0014`` gives +15), so every
    candidate is confirmed on its own draw, never on the gate's."""
    return cfg.seed + 1 + int(candidate.removeprefix("v"))


def spent_alpha(alpha: float, k: int) -> float:
    """The level of the ``k``-th confirmation (1, 2, ...) against one incumbent:
    ``alpha * 6 / (pi^2 k^2)``, which sums to ``alpha`` over all ``k``, so that the chance
    that any confirmation against that incumbent passes a candidate without the gain stays
    at most ``alpha`` however many candidates a run confirms (Bonferroni over an unbounded
    sequence: ``alpha_1`` = 0.61 ``alpha``, ``alpha_2`` = 0.15 ``alpha``, ...)."""
    if k < 1:
        raise ValueError(f"k counts from 1, got {k}")
    return alpha * 6 / (math.pi ** 2 * k ** 2)


def confirmations_against(registry: PolicyRegistry, incumbent: str) -> int:
    """How many versions were confirmation-replayed against ``incumbent`` (their
    ``gates.replay_confirm``): read from the registry, so a learner restart keeps the count."""
    n = 0
    for info in registry.list():
        c = info.meta.gates.get("replay_confirm")
        n += isinstance(c, dict) and c.get("incumbent") == incumbent
    return n


def _goodput(result: dict) -> dict:
    return next(t for t in result["tests"] if t["metric"] == "goodput")


def confirmed(again: dict, min_gain: float, evidence: str) -> tuple[bool, str]:
    """Whether the confirmation replay (a ``replay_gate`` result on the candidate's own draw)
    passed and shows the gain again (:func:`gain_shown`); and, if not, why (one line)."""
    seed = again["config"]["seed"]
    if not again["passed"]:
        return False, f"not confirmed on fresh queries (seed {seed}): the replay gate failed"
    shown, why = gain_shown(_goodput(again), min_gain, evidence)
    return shown, "" if shown else f"not confirmed on fresh queries (seed {seed}): {why}"


def gate_then_canary(pool: PoolConfig, registry: PolicyRegistry, candidate: str,
                     cfg: ReplayGateConfig | None = None, canary: bool = True, *,
                     min_gain: float | None = None, supersede_margin: float | None = None,
                     max_supersedes: int = 0, gain_evidence: str = "mean",
                     confirm: bool = False, confirm_queries: int | None = None,
                     confirm_alpha: str = "fixed") -> dict:
    """The automatic path of a new candidate: the replay gate, then (if it passed, ``canary``,
    and its twin goodput gain over the incumbent is above ``min_gain`` by ``gain_evidence``,
    see :func:`gain_shown`; None: no such condition) the canary request to the serving pool,
    which may supersede the running canary or queue behind it
    (``PolicyRegistry.start_canary``). With ``confirm`` (and a ``min_gain``), a candidate
    whose gain the gate shows is replayed once more on a fresh draw of validation queries
    (:func:`confirm_seed`; ``gates.replay_confirm`` in its meta) and must pass and show the
    gain there too: the learner picks among many candidates on the gate's one draw, so the
    gain it shows on that draw is biased upward. ``confirm_queries``: that draw's size (None:
    the gate's); ``confirm_alpha`` ``spent``: the k-th confirmation against one incumbent
    tests at :func:`spent_alpha` (the run's confirmations together at ``cfg.alpha``),
    ``fixed``: each at ``cfg.alpha``. Returns the gate's result with ``canary``:
    "requested", "queued behind vN", or why not; ``eligible``: it passed with the gain the
    canary asks for (whether or not the queue then took it); ``canaried``: it started the
    canary or queued for it; ``confirm``: the confirmation's result, when one ran."""
    if confirm_alpha not in ("fixed", "spent"):
        raise ValueError(f"confirm_alpha must be fixed or spent, got {confirm_alpha!r}")
    cfg = cfg or ReplayGateConfig()
    out = replay_gate(pool, registry, candidate, cfg=cfg)
    out["canaried"] = out["eligible"] = False
    shown, why = (True, "") if min_gain is None else gain_shown(_goodput(out), min_gain,
                                                                gain_evidence)
    if out["passed"] and canary and shown and confirm and min_gain is not None:
        k = 1 + confirmations_against(registry, out["incumbent"])
        ccfg = cfg.model_copy(update={
            "seed": confirm_seed(cfg, candidate), "n_queries": confirm_queries or cfg.n_queries,
            "alpha": spent_alpha(cfg.alpha, k) if confirm_alpha == "spent" else cfg.alpha})
        again = replay_gate(pool, registry, candidate, incumbent=out["incumbent"], cfg=ccfg,
                            record_as="replay_confirm")
        out["confirm"] = again | {"k": k}
        shown, why = confirmed(again, min_gain, gain_evidence)
    if not out["passed"]:
        out["canary"] = "not requested: the replay gate failed"
    elif not canary:
        out["canary"] = "not requested: canary off"
    elif not shown:
        out["canary"] = f"not requested: {why} against {out['incumbent']}"
    else:
        from inframind_ray.pools.cards import build_pool_info

        out["eligible"] = True
        try:
            st = registry.start_canary(candidate, build_pool_info(pool), actor="learner",
                                       queue=True, supersede_margin=supersede_margin,
                                       max_supersedes=max_supersedes)
            out["canaried"] = candidate in (st.canary, st.next_canary)
            out["canary"] = ("requested" if st.canary == candidate
                             else f"queued behind {st.canary}" if st.next_canary == candidate
                             else f"not queued: {st.next_canary} scores higher in the twin")
        except RegistryError as e:
            out["canary"] = f"not requested: {e}"
    return out
