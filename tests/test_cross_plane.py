"""One system on two clocks: the same pool, policy and queries give the same per-node decisions
and the same admission outcomes (admitted / deadline-shed / overloaded) in the twin (virtual
clock) and on a real local Ray cluster with Serve (wall clock); and inside Serve a model's
replicas are chosen by the twin's own rule, the earliest predicted finish."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import ray
from served import wait_idle

from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.baselines import make_policy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.mmlu_pro import mmlu_pro
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import TwinLoadView, build_engines
from inframind_ray.twin.simloop import run_simulated

# "big" has one sequence slot, three queue places and a slow engine (x2.5): about 3.8 s per
# query, so the admission outcomes below are far from any timing edge on the wall clock.
# "small" (three 1-slot replicas) is for the replica-choice test.
POOL = """
name: cross-plane
engine: {scheduling: edf, on_deadline: abort}
models:
  - name: big
    recorded: Meta-Llama-3_1-70B-Instruct
    profile: llama3-70b@h100x4
    gpu: H200-141GB
    gpus_per_replica: 2
    max_num_seqs: 1
    max_queue: 3
    engine: {kind: twin, time_scale: 2.5}
  - name: small
    recorded: Phi-3-mini-4k-instruct
    profile: llama2-7b@h100x1
    max_num_seqs: 1
    max_queue: 16
    replicas: 3
    engine: {kind: twin, time_scale: 12}
    stand_ins: {gsm8k: Phi-3.5-mini-instruct}
serving:
  port: 8766
  metrics_period_s: 0.25
  stale_after_s: 1.0
  embed: false
"""
POLICY = "always-strongest"  # one agent on "big", DeepThink: every query meets one queue
# (arrival offset s, budget s, MMLU-Pro item): q0 runs, q1-q3 wait, q4 finds the queue full;
# q2 and q3 are shed when their deadlines pass in the queue (1.4 s, 2.1 s); q5 then finds room.
SCHEDULE = [(0.0, 600, 80), (0.2, 600, 81), (0.4, 1, 82), (0.6, 1.5, 83), (0.8, 1.5, 84),
            (2.5, 600, 85)]
EXPECTED = [[("big", "deepthink", s)] for s in
            ("ok", "ok", "deadline", "deadline", "overloaded", "ok")]


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> PoolConfig:
    path = tmp_path_factory.mktemp("pool") / "cross_plane.yaml"
    path.write_text(POOL)
    cfg = load_pool(path)
    return cfg.model_copy(update={"serving": cfg.serving.model_copy(update={
        "records_dir": str(tmp_path_factory.mktemp("records")),
        "controller_checkpoint": str(_agreement_controller(tmp_path_factory.mktemp("ctl")))})})


@pytest.fixture(scope="module")
def session(cfg):
    from inframind_ray.serving.app import start

    s = start(cfg)
    yield s
    s.stop()


def _twin_steps(cfg: PoolConfig) -> list[list[tuple[str, str, str]]]:
    """The schedule in the twin, wired as ``bench.runner`` wires a cell."""
    info, task = build_pool_info(cfg), mmlu_pro()
    policy = make_policy(POLICY, info, 0)
    outcome = OutcomeModel({m.name: m.recorded for m in cfg.models})

    async def main():
        loop = asyncio.get_running_loop()
        engines = build_engines(cfg)
        backend, state = TwinBackend(engines, outcome), TwinLoadView(engines)
        tasks = []
        for i, (at, budget, item) in enumerate(SCHEDULE):
            await asyncio.sleep(max(0.0, at - loop.time()))
            q = task.query(item, f"x{i}", budget, loop.time())
            tasks.append(loop.create_task(run_query(
                q, policy, backend, state, abort_on_deadline=cfg.engine.on_deadline == "abort")))
        return await asyncio.gather(*tasks)

    results, _ = run_simulated(main())
    return [[(s.model, s.strategy.value, s.status.api) for s in r.steps] for r in results]


def _post(session, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(session.url + "/v1/queries", data=json.dumps(body).encode(),
                                 method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())




def _serve_steps(session) -> list[list[tuple[str, str, str]]]:
    """The schedule over HTTP, each query sent at its offset on the wall clock."""
    t0 = time.time() + 0.5

    def one(i: int) -> tuple[int, dict]:
        at, budget, item = SCHEDULE[i]
        time.sleep(max(0.0, t0 + at - time.time()))
        return _post(session, {"item_id": item, "budget_s": budget, "policy": POLICY,
                               "query_id": f"x{i}"})

    with ThreadPoolExecutor(len(SCHEDULE)) as ex:
        outs = list(ex.map(one, range(len(SCHEDULE))))
    assert [c for c, _ in outs] == [503 if s[0][2] == "overloaded" else 200
                                    for s in EXPECTED], outs
    calls = _recorded_calls(session)
    return [[(s["model"], s["strategy"], s["status"]) for s in out["steps"]] if code == 200
            else calls[f"x{i}"] for i, (code, out) in enumerate(outs)]


def _recorded_calls(session) -> dict[str, list[tuple[str, str, str]]]:
    """Per query, its agent calls as the orchestrator recorded them (a 503 body has no steps)."""
    import pyarrow.parquet as pq

    ray.get(session.orchestrator.flush_records.remote())
    paths = sorted(Path(session.cfg.serving.records_dir).glob("calls*"))
    out: dict[str, list[tuple[str, str, str]]] = {}
    for row in sorted(pq.read_table(paths).to_pylist(), key=lambda r: r["node_id"]):
        out.setdefault(row["query_id"], []).append((row["model"], row["strategy"],
                                                    row["status"]))
    return out


def test_same_decisions_and_admission_outcomes_in_twin_and_serve(cfg, session):
    """Per query and node, (model, strategy, status) are equal across the planes and equal to
    the outcome the schedule is built for: admitted twice, shed at the deadline twice, one
    overloaded, and one admitted once the shed requests have left the queue."""
    twin = _twin_steps(cfg)
    assert twin == EXPECTED
    # warm the orchestrator's handles and the replica's path with a query shed at its deadline
    warm = _post(session, {"item_id": 79, "budget_s": 0.3, "policy": POLICY,
                           "query_id": "warm"})
    assert warm[1]["status"] == "deadline", warm
    wait_idle(session, 30.0, strict=True)
    assert _serve_steps(session) == twin


def test_serve_routes_to_the_shortest_queue(session):
    """Three 1-slot replicas, two kept busy: every new request goes to the idle one (Serve's
    default power-of-two router would pick a busy pair about a third of the time)."""
    from ray import serve

    from inframind_ray.serving.engines.base import GenerateRequest

    wait_idle(session, 30.0, strict=True)
    h = serve.get_deployment_handle("model:small", "model:small")

    async def main():
        # a new handle's first queue-length probes can time out on loaded cores, and Serve
        # then sends to the next rank: warm the handle up with short requests first. (The
        # first probe waited 4.3-4.4 s behind a blocker in two CI runs, 2026-12-03 and 12-05:
        # the blocker was still in transit when its replica's report was taken, which the
        # router now reads from the report's latest arrival.)
        for i in range(3):
            await h.generate.remote(GenerateRequest(
                f"warm{i}", "p", 2, time.time() + 30, strategy="flash", prompt_tokens_hint=10))
        await asyncio.sleep(0.5)
        blockers = []
        for i in range(2):
            blockers.append(h.generate.remote(GenerateRequest(
                f"block{i}", "p", 4096, time.time() + 60, prompt_tokens_hint=50)))
            await asyncio.sleep(0.3)
        probes = []
        for i in range(8):
            probes.append(await h.generate.remote(GenerateRequest(
                f"probe{i}", "p", 2, time.time() + 30, strategy="flash", prompt_tokens_hint=10)))
            # the router learns that a request ended from a done-callback on its own loop, a
            # moment after the caller has the answer: back-to-back probes would race it (until
            # it has, the idle replica and a blocker's tie, and the tie goes to the first; on
            # the shared 2-core machine 0.05 s was too short twice in a row)
            await asyncio.sleep(0.25)
        return probes, [await b for b in blockers]

    probes, blockers = asyncio.run(main())
    assert all(b.status.api == "ok" for b in blockers + probes)
    waits = [round(p.queue_wait_s, 3) for p in probes]
    assert max(waits) < 0.2, waits  # never queued behind a blocker
    assert min(b.latency_s for b in blockers) > 3.0  # the blockers outlived the probes


def test_router_counts_its_sends_since_each_replica_report():
    """No cluster: a replica's load is its last report, plus this router's sends after that
    report still in flight, less its requests in the report that have ended since; with no
    service time reported, the shortest queue ranks first, the others next."""
    from types import SimpleNamespace

    from ray.serve._private.common import DeploymentID, ReplicaID

    from inframind_ray.serving.router import DeadlineRouter

    router = object.__new__(DeadlineRouter)  # Serve builds it; only our state is needed
    router.initialize_state()
    dep = DeploymentID("model:m", "inframind")
    reps = [SimpleNamespace(replica_id=ReplicaID(u, dep), routing_stats=s) for u, s in (
        ("a", {"waiting": 2, "running": 1, "timestamp": 100.0}),
        ("b", {"waiting": 1, "running": 1, "timestamp": 100.0}),
        ("c", {}))]  # c has not reported yet
    inf = float("inf")
    router._sent = {reps[0].replica_id: [[98.0, 99.0], [99.0, 100.5]],  # ended before / after
                    reps[1].replica_id: [[99.0, inf], [101.0, inf]],  # in the report / not
                    reps[2].replica_id: [[1.0, inf], [102.0, inf]]}
    loads = [router.snapshot(r) for r in reps]
    assert [(s.waiting, s.running) for s in loads] == [(1, 1), (2, 1), (2, 0)]
    ranks = asyncio.run(router.choose_replicas(reps))
    assert ranks == [[reps[0]], [reps[1], reps[2]]]  # a and c tie: the first
    router.on_request_completed(reps[2].replica_id, "x")  # c's oldest send ends now
    assert router.snapshot(reps[2]).waiting == 1
    assert asyncio.run(router.choose_replicas(reps))[0] == [reps[2]]
    # a send before b's report that had not reached b when it was taken (its latest arrival
    # is older) is not in the report: it counts, and ends without being taken off
    reps[1].routing_stats = {**reps[1].routing_stats, "timestamp": 103.0, "last_arrival": 100.9}
    assert router.snapshot(reps[1]).waiting == 2  # 1 reported + the send at 101.0
    router.on_request_completed(reps[1].replica_id, "y")  # 99.0's send ends: in the report
    assert router.snapshot(reps[1]).waiting == 1


# LAMaS's execution controller on both clocks: MoA on this pool is two proposers ("big",
# "small") and an aggregator ("big"); each GSM8K query runs alone. The controller is a
# checkpoint in the shipped format whose delta is a rule on the agreement features (stop once
# two answers agree, run on a split), far from its threshold: the shipped fitted controller's
# deltas here sit within 0.01-0.02 of it and move with the load snapshots' KV usage
# (docs/controller.md), which the two planes sample at different instants.
CONTROLLED_ITEMS = (1, 134)  # the voters agree / split; their ends are >= 1.5 s apart


def _agreement_controller(path: Path) -> Path:
    """delta = top - 1.5 - 10 * (groups - 1) in answers: > 0 iff >= 2 answers, all agreeing."""
    import numpy as np

    from inframind_ray.orchestration.controller import FEATURE_NAMES, ControllerModel

    n = len(FEATURE_NAMES)
    w = np.zeros((n, 1), np.float32)
    w[FEATURE_NAMES.index("top_count"), 0] = 6.0  # features hold counts / MAX_AGENTS (6)
    w[FEATURE_NAMES.index("n_groups"), 0] = -60.0
    return ControllerModel([(w, np.array([8.5], np.float32))], np.zeros(n, np.float32),
                           np.ones(n, np.float32)).save(path)


def _controlled(res) -> tuple:
    """What the controller did to one query: stopped, cancelled nodes, answer, decisions."""
    return (res["stopped_early"], tuple(res["cancelled"]), res["answer"],
            tuple((d["node"], d["stop"]) for d in res["decisions"]))


def _twin_controlled(cfg: PoolConfig) -> list[tuple]:
    from inframind_ray.orchestration.controller import ExecutionController
    from inframind_ray.tasks.registry import family

    info, task = build_pool_info(cfg), family("gsm8k")
    policy = make_policy("moa", info, 0)
    outcome = OutcomeModel.for_models(cfg.models)
    ctl = ExecutionController.load(cfg.serving.controller_checkpoint)

    async def main():
        loop = asyncio.get_running_loop()
        engines = build_engines(cfg)
        backend, state = TwinBackend(engines, outcome), TwinLoadView(engines)
        out = []
        for item in CONTROLLED_ITEMS:
            q = task.query(item, f"c{item}", 60, loop.time())
            r = await run_query(q, policy, backend, state, controller=ctl)
            out.append({"stopped_early": r.stopped_early, "cancelled": r.cancelled,
                        "answer": r.answer, "decisions": [
                            {"node": d.node_id, "stop": d.stop} for d in r.decisions]})
            await asyncio.sleep(1.0)
        return out

    return [_controlled(r) for r in run_simulated(main())[0]]


def test_controller_makes_the_same_decisions_in_twin_and_serve(cfg, session):
    """MoA with the controller on, item by item: the same decisions at the same nodes, the
    same cancelled nodes and the same answer in the twin and on Ray Serve (twin engines), and
    the items include a stopped query and one that ran to its end."""
    twin = _twin_controlled(cfg)
    assert {t[0] for t in twin} == {True, False}, twin
    wait_idle(session, 30.0, strict=True)
    served = []
    for item in CONTROLLED_ITEMS:
        code, out = _post(session, {"item_id": item, "task": "gsm8k", "budget_s": 60,
                                    "policy": "moa", "controller": "on", "query_id": f"c{item}"})
        assert code == 200, out
        served.append(_controlled({**out["controller"], "answer": out["answer"]}))
        wait_idle(session, 10.0)
    assert served == twin


def test_twin_and_serve_router_choose_the_same_replica():
    """The same replica states, as the twin's pool sees them and as Serve's router gets them
    (each replica's routing stats, stamped on the wall clock): the same replica for requests
    due at different times. Replica 0 runs one request with three due in 100 s waiting;
    replica 1 runs one with one due in 1 s waiting: a request due in 3 s goes to 0 (nothing due
    before it there), one due in 200 s to 1 (the shorter queue); shortest-queue sends both to
    1."""
    from types import SimpleNamespace

    from ray.serve._private.common import DeploymentID, ReplicaID

    from inframind_ray.core.profile import IterationProfile
    from inframind_ray.core.request import EngineRequest
    from inframind_ray.serving.engines.base import GenerateRequest
    from inframind_ray.serving.router import DeadlineRouter, routing_stats
    from inframind_ray.twin.engine import TwinEngine
    from inframind_ray.twin.pool import ModelReplicas, TwinReplica

    profile = IterationProfile(c0=0.01, c_prefill=0.0, c_decode=0.001, c_kv=0.0)
    reps = ModelReplicas("m", [TwinReplica("m", TwinEngine(
        f"m/{i}", profile, max_num_seqs=1, kv_capacity_tokens=100_000), 8) for i in range(2)])
    for r in reps.replicas:
        r.seed_history(0.05, 0.011, 1.1)
    due_in = (3.0, 200.0)

    async def main():
        loop = asyncio.get_running_loop()
        t = loop.time()
        for i, late in ((0, 100.0), (0, 100.0), (0, 100.0), (0, 100.0), (1, 100.0), (1, 1.0)):
            loop.create_task(reps.replicas[i].generate(EngineRequest("x", 10, 100,
                                                                     deadline=t + late)))
        await asyncio.sleep(0)
        snaps = [r.snapshot() for r in reps.replicas]
        picks = [reps.replicas.index(reps.pick(loop.time() + d)) for d in due_in]
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        return snaps, picks

    (snaps, twin_picks), _ = run_simulated(main())
    assert [(s.waiting, s.running) for s in snaps] == [(3, 1), (1, 1)]
    router = object.__new__(DeadlineRouter)
    router.initialize_state()
    dep = DeploymentID("model:m", "inframind")
    now = time.time()
    served = [SimpleNamespace(replica_id=ReplicaID(f"r{i}", dep), routing_stats={
        **routing_stats(s, now), "timestamp": now}) for i, s in enumerate(snaps)]
    serve_picks = []
    for d in due_in:
        req = SimpleNamespace(args=[GenerateRequest("p", "q", 10, now + d)],
                              routing_context=SimpleNamespace(should_backoff=False))
        ranks = asyncio.run(router.choose_replicas(served, req))
        serve_picks.append(served.index(ranks[0][0]))
    assert twin_picks == serve_picks == [0, 1]
