"""Guarded promotion (no Ray): the statistics, the canary's routing and decisions, the
registry's gate results and canary states, the orchestrator's canary in process, the twin
replay gate on a small pool, and the CLI over them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inframind_ray.config import CanaryConfig, load_pool
from inframind_ray.errors import InframindError
from inframind_ray.policy.degrade import invert_preferences
from inframind_ray.policy.gate_stats import (
    ArmStats,
    cs_radius,
    mixture_rho,
    paired_noninferiority,
    sequential_compare,
)
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT
from inframind_ray.policy.registry import PolicyRegistry, RegistryError, VersionState
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.serving.canary import Canary, routed_to_candidate

POOL = Path(__file__).parent / "pools" / "serve_test.yaml"


@pytest.fixture(scope="module")
def pool():
    return build_pool_info(load_pool(POOL))


@pytest.fixture
def reg(pool, tmp_path):
    """A registry: v0001 the shipped policy (active), v0002 its inverted copy (candidate)."""
    r = PolicyRegistry(tmp_path / "reg")
    r.seed(DEFAULT_CHECKPOINT, pool)
    r.register(invert_preferences(DEFAULT_CHECKPOINT, tmp_path / "bad"), pool, parent="v0001")
    return r


# ------------------------------------------------------------------ statistics
def test_paired_noninferiority_passes_equal_and_fails_worse():
    rng = np.random.default_rng(0)
    inc = (rng.random(300) < 0.6).astype(float)
    same = paired_noninferiority("goodput", inc, inc, 0.02, 0.05)
    assert same.passed and same.lower == 0.0
    worse = inc * (rng.random(300) < 0.8)  # loses a fifth of the successes
    r = paired_noninferiority("goodput", worse, inc, 0.02, 0.05)
    assert not r.passed and r.diff < -0.05 and r.lower < r.diff
    # a small sample with the same small drop is not called non-inferior either
    with pytest.raises(ValueError):
        paired_noninferiority("goodput", inc[:1], inc[:1], 0.02, 0.05)


def test_confidence_sequence_is_always_valid_and_shrinks():
    """Over 400 null streams of 300 Bernoulli(0.5) outcomes, the share whose running mean ever
    leaves the one-sided bound is at most alpha (it is a bound at every n at once)."""
    alpha, n_max = 0.05, 300
    rho = mixture_rho(alpha, 100)
    rad = np.array([cs_radius(n, alpha, rho) for n in range(1, n_max + 1)])
    assert np.all(np.diff(rad) < 0) and math.isinf(cs_radius(0, alpha, rho))
    rng = np.random.default_rng(1)
    x = rng.random((400, n_max)) < 0.5
    means = np.cumsum(x, axis=1) / np.arange(1, n_max + 1)
    crossed = (means - 0.5 > rad).any(axis=1).mean()
    assert crossed <= alpha


def test_sequential_compare_harm_and_non_inferiority():
    rho = mixture_rho(0.025, 200)
    bad = sequential_compare("goodput", ArmStats(60, 6), ArmStats(600, 360), 0.05, 0.05, rho)
    assert bad.harm and not bad.non_inferior
    few = sequential_compare("goodput", ArmStats(5, 0), ArmStats(50, 30), 0.05, 0.05, rho)
    assert not few.harm  # five failures are not evidence yet
    good = sequential_compare("goodput", ArmStats(2000, 1400), ArmStats(20000, 12000), 0.05,
                              0.05, rho)
    assert good.non_inferior and not good.harm


# ------------------------------------------------------------------ canary
def _run_canary(p_cand: float, p_inc: float, cfg: CanaryConfig, n: int = 5000,
                seed: int = 0) -> Canary:
    rng = np.random.default_rng(seed)
    c = Canary("v0002", "v0001", cfg)
    for i in range(n):
        to_cand = c.route(f"q{i}")
        c.observe(to_cand, bool(rng.random() < (p_cand if to_cand else p_inc)), True)
        if c.decision is not None:
            break
    return c


def test_routing_is_a_seeded_hash_of_the_query_id():
    ids = [f"q{i}" for i in range(20000)]
    share = np.mean([routed_to_candidate(q, 0.1, 0) for q in ids])
    assert 0.09 < share < 0.11
    assert [routed_to_candidate(q, 0.1, 0) for q in ids[:200]] == \
        [routed_to_candidate(q, 0.1, 0) for q in ids[:200]]
    assert [routed_to_candidate(q, 0.1, 0) for q in ids[:200]] != \
        [routed_to_candidate(q, 0.1, 1) for q in ids[:200]]


def test_canary_rolls_back_a_bad_candidate_before_its_cap():
    cfg = CanaryConfig()
    c = _run_canary(0.1, 0.6, cfg)
    assert c.decision == "rollback" and c.reason.startswith("harm"), c.reason
    assert c.routed["candidate"] < cfg.max_queries
    assert c.describe()["served_share"] < cfg.share + 0.03


def test_canary_never_routes_past_its_cap_and_promotes_an_equal_candidate():
    cfg = CanaryConfig(max_queries=60)
    c = _run_canary(0.6, 0.6, cfg)
    assert c.decision == "promote" and c.routed["candidate"] == 60, c.describe()
    assert not c.route("after")  # decided: everything to the incumbent


def _live_vs_incumbent(guard: bool, p_cand: float, p_inc: float,
                       n: int = 4000) -> tuple[Canary, float]:
    """A canary run with outcomes observed as they are routed; also the lowest, over every
    query from the first on, of cumulative live goodput (both arms) minus the incumbent arm's."""
    c = Canary("v0002", "v0001", CanaryConfig(harm_guard=guard))
    rng = np.random.default_rng(0)
    arms = {True: [0, 0], False: [0, 0]}  # to the candidate?: [queries, good]
    worst = 0.0
    for i in range(n):
        to_cand = c.route(f"q{i}")
        ok = bool(rng.random() < (p_cand if to_cand else p_inc))
        arms[to_cand][0] += 1
        arms[to_cand][1] += ok
        c.observe(to_cand, ok, True)
        if arms[False][0]:
            live = (arms[True][1] + arms[False][1]) / (arms[True][0] + arms[False][0])
            worst = min(worst, live - arms[False][1] / arms[False][0])
        if c.decision is not None:
            break
    return c, worst


def test_the_harm_guard_keeps_live_goodput_within_the_tolerance_at_every_query():
    """A candidate that is always wrong against an incumbent always right (share 0.1,
    tolerance 0.05): with the harm guard live goodput stays within the tolerance of the
    incumbent's after every query, from the first, and the canary still rolls it back; without
    the guard the same query ids take it below. An equal candidate's share rises to the
    configured one as it shows it is not worse, and it is promoted."""
    bad, worst = _live_vs_incumbent(True, 0.0, 1.0)
    assert bad.decision == "rollback" and bad.reason.startswith("harm"), bad.reason
    assert worst >= -bad.cfg.tolerance - 1e-12, worst
    assert bad.describe()["share_cap"] == pytest.approx(bad.cfg.tolerance)
    unguarded, worst_off = _live_vs_incumbent(False, 0.0, 1.0)
    assert unguarded.decision == "rollback" and worst_off < -unguarded.cfg.tolerance, worst_off
    equal, _ = _live_vs_incumbent(True, 0.6, 0.6)
    assert equal.decision == "promote", equal.describe()
    assert equal.share_cap() == equal.cfg.share > equal.cfg.tolerance
    with pytest.raises(ValueError, match="harm_guard needs tolerance > 0"):
        CanaryConfig(tolerance=0.0)
    assert CanaryConfig(tolerance=0.0, harm_guard=False).share == 0.1


# ------------------------------------------------------------------ registry
def test_gate_results_and_canary_states_in_the_registry(reg, pool):
    reg.record_gate("v0002", "replay", {"passed": True, "x": 1})
    assert reg.meta("v0002").gates["replay"] == {"passed": True, "x": 1}
    reg.check("v0002", pool)  # the digest covers weights and spec, not meta.json
    st = reg.start_canary("v0002", pool)
    assert st.canary == "v0002"
    with pytest.raises(RegistryError, match="a canary of v0002 is running"):
        reg.start_canary("v0002", pool)
    st = reg.end_canary("v0002", False, "harm: x", pool)
    assert st.canary is None and st.states["v0002"] is VersionState.REJECTED
    assert st.log[-1]["op"] == "canary_rollback" and st.log[-1]["reason"] == "harm: x"
    assert st.active == "v0001"
    with pytest.raises(RegistryError, match="rejected, not a candidate"):
        reg.start_canary("v0002", pool)


def test_a_pinned_version_is_never_replaced_by_a_canary(reg, pool):
    reg.pin()
    with pytest.raises(RegistryError, match="pinned"):
        reg.start_canary("v0002", pool)
    reg.unpin()
    v3 = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    reg.start_canary("v0002", pool, actor="learner", queue=True)
    reg.start_canary(v3, pool, actor="learner", queue=True)
    st = reg.pin()  # pinned while a canary runs: it stops, the queued one leaves the queue
    assert (st.canary, st.next_canary, st.active) == (None, None, "v0001")
    assert st.states["v0002"] is st.states[v3] is VersionState.CANDIDATE
    assert [(e["op"], e["version"], e.get("reason")) for e in st.log[-3:]] == [
        ("pin", "v0001", None), ("canary_stopped", "v0002", "v0001 pinned"),
        ("canary_dropped", v3, "v0001 pinned")]
    with pytest.raises(RegistryError, match="no canary of v0002 is running"):
        reg.end_canary("v0002", True, "non-inferior", pool)
    reg.unpin()
    reg.start_canary("v0002", pool)
    with reg._locked() as raw:  # a pin written by another process's older code
        raw.pinned = "v0001"
    st = reg.end_canary("v0002", True, "non-inferior", pool)  # promotion refused: rejected
    assert st.active == "v0001" and st.states["v0002"] is VersionState.REJECTED
    assert "not promoted: v0001 is pinned" in st.log[-1]["reason"]


def test_the_newest_candidate_queues_behind_a_running_canary(reg, pool):
    """The learner's path (``queue``): a candidate that passes while a canary runs waits as
    ``next_canary``; a newer one supersedes it (the older stays a candidate); when the running
    canary ends, promoted or rolled back, the queued one's canary starts. A human's request
    is still refused while one runs. A queued candidate promoted by hand leaves the queue;
    one still queued when the canary ends under a pin is dropped."""
    v3 = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    v4 = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    reg.start_canary("v0002", pool, actor="learner", queue=True)
    st = reg.start_canary(v3, pool, actor="learner", queue=True)
    assert (st.canary, st.next_canary) == ("v0002", v3)
    with pytest.raises(RegistryError, match="a canary of v0002 is running"):
        reg.start_canary(v4, pool)
    st = reg.start_canary(v4, pool, actor="learner", queue=True)
    assert (st.canary, st.next_canary) == ("v0002", v4)
    assert [e["op"] for e in st.log[-2:]] == ["canary_superseded", "canary_queued"]
    assert st.log[-2]["version"] == v3 and st.states[v3] is VersionState.CANDIDATE
    st = reg.end_canary("v0002", False, "harm: x", pool)
    assert (st.canary, st.next_canary, st.active) == (v4, None, "v0001")
    assert st.log[-1] == {**st.log[-1], "op": "canary_start", "version": v4, "queued": True}
    st = reg.start_canary(v3, pool, actor="learner", queue=True)
    st = reg.end_canary(v4, True, "non-inferior", pool)
    assert (st.active, st.canary) == (v4, v3)  # v3's canary now runs against v4
    reg.end_canary(v3, False, "harm: y", pool)
    v5 = reg.register(DEFAULT_CHECKPOINT, pool, parent=v4).version
    v6 = reg.register(DEFAULT_CHECKPOINT, pool, parent=v4).version
    reg.start_canary(v5, pool, actor="learner", queue=True)
    reg.start_canary(v6, pool, actor="learner", queue=True)
    with reg._locked() as raw:  # pinned without the pin's own stop (older code): the queued
        raw.pinned = v4         # one is dropped when the running canary ends
    st = reg.end_canary(v5, False, "harm: z", pool)
    assert st.canary is None and st.next_canary is None and st.log[-1]["op"] == "canary_dropped"
    assert st.states[v6] is VersionState.CANDIDATE


def _gated(reg, version, goodput, config=None):
    """Record a passed replay gate on ``version`` with twin goodput ``goodput`` (incumbent
    0.90), as the gate writes it."""
    reg.record_gate(version, "replay", {
        "passed": True, "incumbent": "v0001", "config": config or {"seed": 0},
        "pool_models": ["a", "b"],
        "tests": [{"metric": "goodput", "candidate": goodput, "incumbent": 0.90,
                   "diff": goodput - 0.90},
                  {"metric": "slo_attainment", "candidate": 1.0, "incumbent": 1.0,
                   "diff": 0.0}]})


def test_the_best_twin_candidate_gets_the_canary(reg, pool):
    """The learner's path chooses by the twin gate's goodput: a candidate better than the
    running canary by more than the margin supersedes it, at most ``max_supersedes`` times
    before a canary ends; a worse one does not displace a better queued one; a queued one
    no better than the version that became active is dropped; scores from another gate
    workload do not compare (the newer queues)."""
    kw = {"actor": "learner", "queue": True, "supersede_margin": 0.02, "max_supersedes": 2}
    v = {g: reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
         for g in (0.91, 0.925, 0.94, 0.97, 0.99, 0.95, 0.96)}
    del v[0.91]  # the fixture's v0002 (never gated: no score) runs the first canary
    for g, ver in v.items():
        _gated(reg, ver, g)
    reg.start_canary("v0002", pool, **kw)
    st = reg.start_canary(v[0.925], pool, **kw)  # no score to beat: it queues
    assert (st.canary, st.next_canary) == ("v0002", v[0.925])
    _gated(reg, "v0002", 0.91)
    st = reg.start_canary(v[0.94], pool, **kw)  # 0.94 > 0.91 + 0.02: supersedes the canary
    assert (st.canary, st.next_canary, st.canary_supersedes) == (v[0.94], None, 1)
    assert [e["op"] for e in st.log[-3:]] == ["canary_superseded", "canary_superseded",
                                              "canary_start"]
    assert st.log[-3]["version"] == "v0002" and st.log[-3]["running"] is True
    assert st.states["v0002"] is VersionState.CANDIDATE
    st = reg.start_canary(v[0.95], pool, **kw)  # within the margin of 0.94: queues
    assert (st.canary, st.next_canary) == (v[0.94], v[0.95])
    st = reg.start_canary(v[0.97], pool, **kw)  # second supersession: the bound's last
    assert (st.canary, st.next_canary, st.canary_supersedes) == (v[0.97], None, 2)
    st = reg.start_canary(v[0.99], pool, **kw)  # better, but the bound: queues instead
    assert (st.canary, st.next_canary) == (v[0.97], v[0.99])
    st = reg.start_canary(v[0.96], pool, **kw)  # worse than the queued one: not queued
    assert st.next_canary == v[0.99] and st.log[-1]["op"] == "canary_not_queued"
    st = reg.end_canary(v[0.97], True, "non-inferior", pool)
    assert (st.active, st.canary, st.canary_supersedes) == (v[0.97], v[0.99], 0)
    st = reg.start_canary(v[0.96], pool, **kw)  # 0.96 queued behind 0.99 ...
    st = reg.end_canary(v[0.99], True, "non-inferior", pool)
    assert st.active == v[0.99] and st.canary is None  # ... dropped: 0.99 serves
    assert st.log[-1]["op"] == "canary_dropped" and "scores as high" in st.log[-1]["reason"]
    other = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    _gated(reg, other, 0.999, config={"seed": 1})  # another workload: does not compare
    reg.start_canary(v[0.95], pool, **kw)
    st = reg.start_canary(other, pool, **kw)
    assert (st.canary, st.next_canary) == (v[0.95], other)


def test_orchestrator_runs_the_registrys_canary(reg, pool, tmp_path):
    """In process (no Ray): the registry's canary request starts a canary at the next sync;
    outcomes of a candidate that never answers right roll it back, with the reason in the event
    log, the test in its gate results and the last canary in /v1/state; the incumbent serves."""
    from inframind_ray.serving.orchestrator import Orchestrator

    cfg = load_pool(POOL)
    serving = cfg.serving.model_copy(update={
        "records_dir": str(tmp_path / "rec"), "registry_dir": str(reg.root), "embed": False,
        "canary": CanaryConfig(share=0.5, min_queries=10, max_queries=100)})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    assert orch.policy_version == "v0001" and orch.canary.running is None
    reg.start_canary("v0002", pool)
    orch._sync_registry()
    assert orch.canary.running is not None and orch.state()["canary"]["candidate"] == "v0002"
    for i in range(2000):
        to_cand = orch.canary.route(f"q{i}")
        if orch.canary.observe(to_cand, True, not to_cand, orch.pool_info):
            break
    st = orch.state()
    assert st["canary"] is None and st["last_canary"]["decision"] == "rollback"
    assert st["last_canary"]["routed"]["candidate"] < 100
    assert st["policy_version"] == "v0001"
    rs = reg.state()
    assert rs.states["v0002"] is VersionState.REJECTED and rs.log[-1]["op"] == "canary_rollback"
    assert reg.meta("v0002").gates["canary"]["passed"] is False

    # a candidate queued behind a running canary starts at the sync after it ends
    v3 = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    v4 = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    reg.start_canary(v3, pool, actor="learner", queue=True)
    orch._sync_registry()
    reg.start_canary(v4, pool, actor="learner", queue=True)
    orch._sync_registry()
    assert orch.canary.running.candidate == v3 and reg.state().next_canary == v4
    for i in range(4000):  # equal policies: non-inferior, promoted
        to_cand = orch.canary.route(f"r{i}")
        if orch.canary.observe(to_cand, True, True, orch.pool_info):
            break
    orch._sync_registry()
    st = orch.state()
    assert st["last_canary"]["decision"] == "promote" and st["policy_version"] == v3
    assert st["canary"]["candidate"] == v4 and st["canary"]["incumbent"] == v3


# ------------------------------------------------------------------ replay gate and CLI
def test_replay_gate_stops_the_inverted_candidate_and_passes_its_twin(reg, pool):
    """The gate by the CLI on the inverted candidate: fails (exit 1), its result in meta.json,
    no canary started; the learner's path on a copy of the incumbent: passes and requests the
    canary. Four twin cells of 20
    validation queries on the test pool: 3 s on an idle core, up to ~60 s measured on this
    shared 2-core machine under other jobs (the gate end to end has no cheaper test)."""
    from inframind_ray.bench.replay_gate import ReplayGateConfig, gate_then_canary
    from inframind_ray.cli import app

    out = CliRunner().invoke(app, ["policy", "gate", "v0002", "-c", str(POOL), "--registry",
                                   str(reg.root), "--queries", "20", "--rate", "30",
                                   "--canary"])
    assert out.exit_code == 1 and "replay gate of v0002: failed" in out.output, out.output
    gate = reg.meta("v0002").gates["replay"]
    assert gate["passed"] is False and gate["config"]["split"] == "val"
    assert gate["tests"][0]["n"] == 20 and gate["tests"][0]["diff"] < 0
    assert reg.state().canary is None  # a failed gate starts no canary
    good = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    same = gate_then_canary(load_pool(POOL), reg, good,
                            cfg=ReplayGateConfig(n_queries=20, rate_per_min=30.0))
    assert same["passed"] and all(t["diff"] == 0 for t in same["tests"]), same["tests"]
    assert same["canary"] == "requested" and reg.state().canary == good
    assert same["eligible"] and same["canaried"]
    newer = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    queued = gate_then_canary(load_pool(POOL), reg, newer,
                              cfg=ReplayGateConfig(n_queries=20, rate_per_min=30.0))
    assert queued["canary"] == f"queued behind {good}" and reg.state().next_canary == newer
    assert queued["eligible"] and queued["canaried"]
    no_gain = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    kept = gate_then_canary(load_pool(POOL), reg, no_gain, min_gain=0.0,
                            cfg=ReplayGateConfig(n_queries=20, rate_per_min=30.0))
    assert kept["passed"] and kept["canary"].startswith("not requested: twin goodput +0.0000")
    assert not kept["eligible"] and not kept["canaried"]
    assert reg.state().next_canary == newer


def test_a_gain_is_confirmed_on_a_fresh_draw_before_the_canary(reg, pool):
    """With ``confirm``, a candidate whose gain the gate shows is replayed on its own draw of
    validation queries (the gate's seed + 1 + its number, against the same incumbent, recorded
    as ``gates.replay_confirm``) and the canary follows that draw's verdict. A copy of the
    incumbent with ``min_gain`` below 0 shows the "gain" on both draws and gets the canary;
    with ``min_gain`` 0 it shows none and is not replayed again. With ``confirm_queries`` the
    draw has that size; with ``confirm_alpha`` spent, the k-th confirmation against one
    incumbent (counted from the registry) tests at ``alpha 6 / (pi^2 k^2)``. Eight twin cells
    of 20-30 validation queries, then two. The verdict itself on real paired tests: a gain on the
    confirmation draw passes; none, or a failed gate there, does not, with a one-line reason."""
    from inframind_ray.bench.replay_gate import (
        ReplayGateConfig,
        confirm_seed,
        confirmations_against,
        confirmed,
        gate_then_canary,
        spent_alpha,
    )

    cfg = ReplayGateConfig(n_queries=20, rate_per_min=30.0, seed=5)
    copy = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    out = gate_then_canary(load_pool(POOL), reg, copy, cfg=cfg, min_gain=-0.5,
                           gain_evidence="lower", confirm=True, confirm_queries=30,
                           confirm_alpha="spent")
    again = reg.meta(copy).gates["replay_confirm"]
    assert again["config"]["seed"] == confirm_seed(cfg, copy) == 5 + 1 + 3
    assert again["config"]["split"] == "val" and again["incumbent"] == "v0001"
    assert out["confirm"]["tests"][0]["n"] == 30 and out["confirm"]["k"] == 1
    assert again["config"]["alpha"] == pytest.approx(0.05 * 6 / math.pi ** 2)
    assert out["eligible"] and out["canary"] == "requested" and reg.state().canary == copy
    assert confirmations_against(reg, "v0001") == 1
    second = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    out = gate_then_canary(load_pool(POOL), reg, second, cfg=cfg, min_gain=-0.5,
                           gain_evidence="lower", confirm=True, confirm_alpha="spent")
    assert out["confirm"]["k"] == 2 and out["confirm"]["tests"][0]["n"] == 20
    assert out["confirm"]["config"]["alpha"] == pytest.approx(spent_alpha(0.05, 2))
    assert confirmations_against(reg, "v0001") == 2 and confirmations_against(reg, copy) == 0
    # the levels of all confirmations against one incumbent sum to at most alpha
    levels = [spent_alpha(0.05, k) for k in range(1, 100_001)]
    assert 0.04999 < sum(levels) <= 0.05 and levels[1] == pytest.approx(levels[0] / 4)
    with pytest.raises(ValueError, match="counts from 1"):
        spent_alpha(0.05, 0)
    same = reg.register(DEFAULT_CHECKPOINT, pool, parent="v0001").version
    kept = gate_then_canary(load_pool(POOL), reg, same, cfg=cfg, min_gain=0.0,
                            gain_evidence="lower", confirm=True)
    assert "confirm" not in kept and "replay_confirm" not in reg.meta(same).gates
    assert not kept["eligible"] and "lower bound" in kept["canary"]

    def result(wins: int, losses: int, slo_losses: int = 0, n: int = 300) -> dict:
        inc, cand, slo = np.zeros(n), np.zeros(n), np.ones(n)
        cand[:wins] = 1
        inc[wins:wins + losses] = 1
        slo[:slo_losses] = 0
        tests = [paired_noninferiority("goodput", cand, inc, 0.02, 0.05).as_dict(),
                 paired_noninferiority("slo_attainment", slo, np.ones(n), 0.02, 0.05).as_dict()]
        return {"passed": all(t["passed"] for t in tests), "tests": tests,
                "config": {"seed": 9}}

    assert confirmed(result(30, 0), 0.0, "lower") == (True, "")
    ok, why = confirmed(result(2, 2), 0.0, "lower")
    assert not ok and why.startswith("not confirmed on fresh queries (seed 9)") and "lower" in why
    ok, why = confirmed(result(30, 0, slo_losses=60), 0.0, "lower")
    assert not ok and why.endswith("the replay gate failed")


def test_a_canary_needs_a_gain_the_twin_resolves():
    """gain_shown on real paired tests: +1 point from 4 of 300 queries passes by its mean but
    not by its lower bound; +10 points from 30 of 300 passes both; no gain passes neither."""
    from inframind_ray.bench.replay_gate import gain_shown
    from inframind_ray.policy.gate_stats import paired_noninferiority

    def test(wins: int, losses: int, n: int = 300) -> dict:
        inc, cand = np.zeros(n), np.zeros(n)
        cand[:wins] = 1
        inc[wins:wins + losses] = 1
        return paired_noninferiority("goodput", cand, inc, 0.02, 0.05).as_dict()

    small, large, none = test(4, 1), test(30, 0), test(2, 2)
    assert gain_shown(small, 0.0, "mean")[0] and not gain_shown(small, 0.0, "lower")[0]
    assert "lower bound" in gain_shown(small, 0.0, "lower")[1]
    assert gain_shown(large, 0.0, "lower")[0] and gain_shown(large, 0.0, "mean")[0]
    assert not gain_shown(none, 0.0, "mean")[0] and not gain_shown(none, 0.0, "lower")[0]
    assert not gain_shown(large, 0.2, "lower")[0]  # 0.1 is not above a min_gain of 0.2
    with pytest.raises(ValueError, match="gain_evidence"):
        gain_shown(large, 0.0, "median")


def test_cli_refusals_are_one_line(reg):
    from inframind_ray.cli import app

    runner = CliRunner()
    common = ["-c", str(POOL), "--registry", str(reg.root)]
    out = runner.invoke(app, ["policy", "gate", "v0002", *common, "--tolerance", "2"])
    # the entry point (cli.main) prints an InframindError as its one line and exits 2
    assert isinstance(out.exception, InframindError), out.output
    assert str(out.exception) == "--tolerance: Input should be less than 1"
    reg.pin()
    out = runner.invoke(app, ["policy", "canary", "v0002", *common])
    assert isinstance(out.exception, RegistryError)
    assert str(out.exception) == "v0001 is pinned: unpin it before you start a canary"
    listing = json.loads(runner.invoke(app, ["policy", "list", *common, "--json"]).output)
    assert listing["canary"] is None and listing["pinned"] == "v0001"


def test_a_pool_change_restarts_the_canary(reg, pool, tmp_path):
    """A drift that changes the pool (here a model's replicas) restarts the running canary on
    the new pool with empty arms; the candidate policy is rebuilt for that pool."""
    from inframind_ray.serving.drift import ReplicaLost, apply_to_config
    from inframind_ray.serving.orchestrator import Orchestrator

    cfg = load_pool(POOL)
    cfg = cfg.model_copy(update={"models": [cfg.models[0].model_copy(update={"replicas": 2}),
                                            cfg.models[1]]})
    serving = cfg.serving.model_copy(update={
        "records_dir": str(tmp_path / "rec"), "registry_dir": str(reg.root), "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    reg.start_canary("v0002", pool)
    orch._sync_registry()
    orch.canary.running.observe(True, True, True)
    old = orch.canary.policy
    orch.set_pool(apply_to_config(orch.cfg, ReplicaLost(model="big")).model_dump())
    running = orch.canary.running
    assert running is not None and running.candidate == "v0002"
    assert running.arms["candidate"]["goodput"].n == 0 and orch.canary.policy is not old


def test_a_restarted_orchestrator_takes_up_the_registrys_canary(reg, pool, tmp_path):
    from inframind_ray.serving.orchestrator import Orchestrator

    reg.start_canary("v0002", pool)
    cfg = load_pool(POOL)
    serving = cfg.serving.model_copy(update={
        "records_dir": str(tmp_path / "rec"), "registry_dir": str(reg.root), "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    assert orch.canary.running is not None and orch.canary.running.candidate == "v0002"
