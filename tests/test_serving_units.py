"""Serving-plane pieces without Ray: the replica admission on the wall clock and the load view."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fakes import DEADLINE, OK, OVERLOADED, Clock

from inframind_ray.core.clock import WALL_CLOCK
from inframind_ray.core.request import RequestStatus
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.admission import DeadlineQueue
from inframind_ray.replica.load_view import LoadView
from inframind_ray.serving.engines.base import GenerateRequest, GenerateResult
from inframind_ray.serving.replica import admit


def _queue(capacity: int, max_queue: int) -> DeadlineQueue:
    return DeadlineQueue(capacity, max_queue, clock=WALL_CLOCK)


def _req(name: str, deadline_in: float) -> GenerateRequest:
    return GenerateRequest(name, "p", 1, time.time() + deadline_in)


async def _work(req: GenerateRequest, order: list[str], dt: float = 0.02) -> GenerateResult:
    await asyncio.sleep(dt)
    order.append(req.request_id)
    return GenerateResult(req.request_id, OK, "x")


def _snap(rid: str, waiting: int, t: float, **kw) -> LoadSnapshot:
    return LoadSnapshot("m", 1, waiting, 2, 0.5, 0.1, 0.02, 1.0, t, replica_id=rid, **kw)


def test_edf_admission_order():
    """With one engine slot, queued requests are admitted in deadline order."""
    order: list[str] = []

    async def main():
        q = _queue(1, 10)
        run = lambda r: _work(r, order)  # noqa: E731
        blocker = asyncio.create_task(admit(q, run, _req("blocker", 60)))
        await asyncio.sleep(0)
        jobs = [admit(q, run, _req(f"d{d}", d)) for d in (50, 10, 40, 20, 30)]
        res = await asyncio.gather(blocker, *jobs)
        assert all(r.status is OK for r in res)
        assert q.in_engine == 0 and len(q) == 0

    asyncio.run(main())
    assert order == ["blocker", "d10", "d20", "d30", "d40", "d50"]


def test_infeasible_deadline_and_full_queue_answer_at_once():
    """A past deadline and a full queue are answered immediately, never queued."""

    async def main():
        q = _queue(1, 1)
        order: list[str] = []
        t = time.time()
        late = await admit(q, lambda r: _work(r, order), _req("late", -1))
        assert late.status is DEADLINE and time.time() - t < 0.05
        a = asyncio.create_task(admit(q, lambda r: _work(r, order, 0.2), _req("a", 10)))
        await asyncio.sleep(0)
        b = asyncio.create_task(admit(q, lambda r: _work(r, order), _req("b", 10)))
        await asyncio.sleep(0)
        c = await admit(q, lambda r: _work(r, order), _req("c", 10))
        assert c.status is OVERLOADED and c.status.api == "overloaded"
        assert (await a).status is OK and (await b).status is OK
        assert (await b).queue_wait_s > 0.1
        assert order == ["a", "b"]
        assert q.counts == {DEADLINE: 1, OVERLOADED: 1, OK: 2}

    asyncio.run(main())


def test_deadline_passes_while_waiting_and_cancel_frees_slot():
    """A waiting request whose deadline passes is answered 'deadline'; cancelling a running one
    gives its slot to the next."""

    async def main():
        q = _queue(1, 5)
        order: list[str] = []
        a = asyncio.create_task(admit(q, lambda r: _work(r, order, 0.5), _req("a", 10)))
        await asyncio.sleep(0)
        b = await admit(q, lambda r: _work(r, order), _req("b", 0.1))
        assert b.status is DEADLINE and "queue" in b.detail
        a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await a
        c = await asyncio.wait_for(admit(q, lambda r: _work(r, order), _req("c", 10)), 1.0)
        assert c.status is OK and q.in_engine == 0

    asyncio.run(main())


def test_engine_error_is_an_answer():
    """An engine exception becomes an 'error' result, and the slot is released."""

    async def boom(req):
        raise RuntimeError("engine died")

    async def main():
        q = _queue(1, 1)
        r = await admit(q, boom, _req("x", 10))
        assert r.status is RequestStatus.ERROR and "engine died" in r.detail and q.in_engine == 0

    asyncio.run(main())


def test_statuses_map_to_their_api_strings_and_back():
    """One map between terminal statuses and the strings of responses and records."""
    assert [s.api for s in (OK, DEADLINE, RequestStatus.REJECTED, OVERLOADED,
                            RequestStatus.ERROR)] == ["ok", "deadline", "rejected", "overloaded",
                                                      "error"]
    assert RequestStatus.ABORTED is DEADLINE and all(
        RequestStatus.from_api(s.api) is s for s in RequestStatus if s.is_finished)
    with pytest.raises(ValueError, match="unknown status 'timed_out'"):
        RequestStatus.from_api("timed_out")
    with pytest.raises(KeyError):
        RequestStatus.RUNNING.api  # noqa: B018 - not terminal, no API string


def test_metrics_staleness():
    """Fresh snapshots aggregate; old ones are visible as old; silent models go unavailable."""
    clock = Clock(1000.0)
    view = LoadView(["m"], clock=clock, stale_after_s=1.0, unavailable_after_s=5.0,
                    evict_after_s=100.0)
    assert not view.load("m").available
    for rid, w in (("r1", 3), ("r2", 4)):
        view.push(_snap(rid, w, clock.t))
    ld = view.load("m")
    assert (ld.waiting, ld.running, ld.replicas) == (7, 4, 2) and ld.age(clock.t) == 0
    clock.t += 2.0
    view.push(_snap("r1", 1, clock.t))
    ld = view.load("m")
    assert ld.age(clock.t) == pytest.approx(2.0) and ld.available
    assert view.describe()["m"]["stale"]
    clock.t += 6.0
    assert not view.load("m").available
    state = view.system_state()
    assert state.now == clock.t and state.models["m"].age(state.now) == pytest.approx(8.0)


def test_replica_lists_its_deadline_mix_and_the_view_merges_it():
    """The replica queue's snapshot view lists seconds to each waiting deadline, earliest first;
    the load view merges replicas, so a policy counts the waiting requests due before its own."""

    async def main():
        q = _queue(1, 10)
        order: list[str] = []
        run = lambda r: _work(r, order, 0.05)  # noqa: E731
        jobs = [asyncio.create_task(admit(q, run, _req(f"d{d}", d))) for d in (60, 30, 5)]
        await asyncio.sleep(0.01)
        now = time.time()
        slacks = q.slacks(now)
        await asyncio.gather(*jobs)
        return now, slacks

    now, slacks = asyncio.run(main())
    assert slacks == pytest.approx([5, 30], abs=0.05)  # d60 arrived first and runs
    view = LoadView(["m"], clock=Clock(now))
    view.push(_snap("r1", 2, now, waiting_slack_s=tuple(slacks)))
    view.push(_snap("r2", 3, now, waiting_slack_s=(10.0, 40.0)))  # one unlisted: counts as ahead
    ld = view.load("m")
    assert ld.waiting_slack_s == pytest.approx([5, 10, 30, 40], abs=0.05)
    assert [ld.waiting_ahead(d, now) for d in (1, 20, 35, 100)] == [1, 3, 4, 5]
    assert "waiting_slack_s" not in view.describe()["m"]


@pytest.mark.parametrize("break_it", ["missing", "corrupt", "positional"])
def test_bad_checkpoint_falls_back_to_heuristic_and_says_so(tmp_path, break_it):
    """A missing, corrupt or old positional (v1) learned-policy checkpoint: the orchestrator
    serves with the infra-aware heuristic and /v1/state says why."""
    from inframind_ray.config import load_pool
    from inframind_ray.policy.baselines import InfraHeuristic
    from inframind_ray.policy.learned import LearnedPolicy
    from inframind_ray.pools.cards import build_pool_info
    from inframind_ray.serving.orchestrator import Orchestrator

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    ckpt = tmp_path / "ckpt"
    if break_it == "corrupt":
        info = build_pool_info(cfg)
        LearnedPolicy(info, hidden=16).save(ckpt)
        (ckpt / "policy.safetensors").write_bytes(b"not a tensor file")
    elif break_it == "positional":
        from inframind_ray.policy.positional import V1_CHECKPOINT

        ckpt = V1_CHECKPOINT  # the previous policy's checkpoint: per-model vectors in order
    serving = cfg.serving.model_copy(update={
        "records_dir": str(tmp_path / "rec"), "registry_dir": str(tmp_path / "reg"),
        "policy_checkpoint": None if ckpt is None
        else str(ckpt), "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    st = orch.state()
    assert st["default_policy"] == "inframind"
    assert st["policy_status"].startswith("fallback to infra-heuristic: checkpoint"), st
    assert isinstance(orch._policy("inframind"), InfraHeuristic)


def test_ingress_refuses_a_query_no_model_can_answer_within_its_budget(tmp_path):
    """The orchestrator (in process, no Ray) admits by the replicas' rule: with every model's
    replica reporting a queue whose predicted finish (EDF requests ahead, capacity, service-time
    EWMA) is far past a query's budget, the query is refused at once with 503, a Retry-After of
    the predicted excess and the reason; a budget that the fastest model's finish fits, or a
    margin of null, admits it (the policy then plans)."""
    from inframind_ray.config import load_pool
    from inframind_ray.serving.orchestrator import Orchestrator
    from inframind_ray.serving.queries import query_info

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    serving = cfg.serving.model_copy(update={"records_dir": str(tmp_path / "rec"),
                                             "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    now = time.time()
    # big: 1 slot, 3 waiting due within 10 s, 3 s per request -> a new call ends in 15 s;
    # small: 8 slots all busy, 8 waiting, 0.5 s each -> (1 + 9/8) x 0.5 = 1.06 s
    orch.push_metrics(LoadSnapshot("big", waiting=3, running=1, waiting_slack_s=(5, 6, 9),
                                   capacity=1, service_s=3.0, timestamp=now, replica_id="b0"))
    orch.push_metrics(LoadSnapshot("small", waiting=8, running=8, capacity=8, service_s=0.5,
                                   timestamp=now, replica_id="s0"))
    t0 = time.perf_counter()
    out = asyncio.run(orch.query({"item_id": 70, "budget_s": 0.6}))
    refused_s = time.perf_counter() - t0
    assert out["http_status"] == 503 and out["retry_after"] == 1, out
    assert out["error"].startswith("no model is predicted to answer within the budget"), out
    assert "1.06 s" in out["error"] and refused_s < 0.05 and orch.inflight == 0
    q = query_info({"item_id": 70, "budget_s": 0.8}, time.time())
    assert orch._admit(q) is None  # 1.06 s <= 1.5 x 0.8 s
    orch.cfg = orch.cfg.model_copy(update={"engine": orch.cfg.engine.model_copy(update={
        "admission_margin": None})})
    q = query_info({"item_id": 70, "budget_s": 0.6}, time.time())
    assert orch._admit(q) is None


def test_a_budget_no_idle_model_can_meet_is_the_clients_error(tmp_path):
    """A budget shorter than every model's service time (even an idle replica would miss it)
    is a 422 with the reason, not a retryable 503: no load would make it fit. The same queue
    with a budget the idle service time fits stays a 503 (test above)."""
    from inframind_ray.config import load_pool
    from inframind_ray.serving.orchestrator import Orchestrator

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    serving = cfg.serving.model_copy(update={"records_dir": str(tmp_path / "rec"),
                                             "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    now = time.time()
    orch.push_metrics(LoadSnapshot("big", waiting=0, running=0, capacity=1, service_s=3.0,
                                   timestamp=now, replica_id="b0"))
    orch.push_metrics(LoadSnapshot("small", waiting=0, running=0, capacity=8, service_s=0.5,
                                   timestamp=now, replica_id="s0"))
    out = asyncio.run(orch.query({"item_id": 70, "budget_s": 0.2}))
    assert out["http_status"] == 422 and "retry_after" not in out, out
    assert out["error"].startswith("budget_s: 0.2 s is shorter than"), out
    assert "0.5 s" in out["error"] and orch.inflight == 0


def test_ingress_gate_refuses_by_the_control_planes_delay():
    """The ingress replica's gate: a query's time outside its agent calls (its time at the
    ingress less its calls' span) feeds the delay EWMA; a budget that delay exceeds by more
    than the margin is refused at once (503, Retry-After = the excess, the reason), a longer
    one admitted; with nothing in flight the delay is forgotten; the rule off admits all. Ahead
    of any slow answer, Little's law: 100 in flight at 2 completions/s whose calls span 2 s
    predict a 48 s wait, refused by at the throughput's upper 95 % bound (10 completions in 5 s:
    at most 3.4/s, so 27.5 s); one completion in 5 s is no evidence of a 48 s wait; a fallback's
    given-up call counts as agent-call time; ``max_inflight`` answers 429."""
    from scipy.special import gammaincinv

    from inframind_ray.serving.gate import IngressGate

    clock = Clock(0.0)
    gate = IngressGate(0.5, clock=clock.now)
    first, second = gate.enter(), gate.enter()
    clock.t = 40.0  # 40 s at the ingress, 4 s of it in agent calls: 36 s outside them
    gate.leave(first, {"steps": [{"start_s": 30.0, "end_s": 33.0},
                                 {"start_s": 31.0, "end_s": 34.0}]})
    assert gate.delay_s == pytest.approx(36.0) and gate.inflight == 1
    out = gate.refusal(20.0)
    assert out["http_status"] == 503 and out["retry_after"] == 16, out
    assert out["error"].startswith("the service is saturated: a new query is predicted to wait "
                                   "36 s outside")
    assert gate.refusal(30.0) is None  # 36 <= 1.5 x 30
    gate.leave(second, {"http_status": 503, "error": "x"})  # no steps: no sample
    assert gate.delay_s == pytest.approx(36.0)
    assert gate.refusal(20.0) is None and gate.delay_s == 0.0  # nothing in flight
    off = IngressGate(None, clock=clock.now)
    off.enter()
    off.delay_s = 1e6
    assert off.refusal(0.1) is None
    little = IngressGate(0.5, window_s=5.0, clock=clock.now)
    for _ in range(100):
        little.enter()
    for _ in range(10):  # answered fast (0.1 s outside 2 s of calls), 0.4 s apart
        clock.t += 0.4
        little.leave(little.enter() - 2.1, {"steps": [{"start_s": 0.05, "end_s": 2.05}]})
    assert little.delay_s == pytest.approx(0.1) and little.span_s == pytest.approx(2.0)
    assert little.backlog_s() == pytest.approx(48.0)  # the point estimate (the adaptive bound's)
    bound = 100 * 5.0 / gammaincinv(11, 0.95) - 2.0
    assert little.predicted_delay_s() == pytest.approx(bound) and 27 < bound < 28
    assert little.refusal(15.0)["retry_after"] == 13 and little.refusal(20.0) is None
    assert "backlog 27.5 s: 100 in flight, 10 answered in the last 5 s" in little.refusal(
        15.0)["error"]
    cold = IngressGate(0.5, window_s=5.0, clock=clock.now)  # 10 in flight, 1 answered
    for _ in range(10):
        cold.enter()
    cold.leave(cold.enter() - 0.5, {"steps": [{"start_s": 0.1, "end_s": 0.5}]})
    assert cold.backlog_s() == pytest.approx(49.6) and cold.refusal(21.0) is None
    fb = IngressGate(0.5, clock=clock.now)  # a fallback at 20-22 s for a call given up at 20
    fb.enter()
    fb.enter()
    fb.leave(clock.t - 22.5, {"steps": [{"start_s": 20.0, "end_s": 22.0,
                                         "given_up_start_s": 0.2}]})
    assert fb.span_s == pytest.approx(21.8) and fb.delay_s == pytest.approx(0.7)
    full = IngressGate(None, max_inflight=2, clock=clock.now)
    full.enter()
    assert full.refusal(1.0) is None
    full.enter()
    assert full.refusal(1.0) == {"http_status": 429, "error": "too many queries in flight",
                                 "retry_after": 1}


def test_ingress_is_bounded_by_serve_and_fails_over_to_the_standby():
    """Serve itself bounds the ingress (``max_ongoing_requests`` = ``max_inflight_queries``,
    ``ingress_max_queued`` in the proxy, past it 429 with Retry-After: 1 from the proxy). A
    call that fails because the active orchestrator died is a retryable 503 and makes the
    standby active; a second failure from the same dead one does not switch back."""
    import ray

    from inframind_ray.config import load_pool
    from inframind_ray.serving.api import _call, make_ingress
    from inframind_ray.serving.failover import Orchestrators

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    dep = make_ingress(cfg)
    assert dep.max_ongoing_requests == cfg.serving.max_inflight_queries == 8
    assert dep.max_queued_requests == cfg.serving.ingress_max_queued
    assert (dep.backpressure_config.status_code, dep.backpressure_config.retry_after_s) == (429, 1)

    class Handle:
        def __init__(self, dead: bool) -> None:
            self.dead, self.calls = dead, 0
            self.query = self

        def remote(self, payload: dict):  # noqa: ANN202
            self.calls += 1

            async def answer() -> dict:
                if self.dead:
                    raise ray.exceptions.RayActorError()
                return {"http_status": 200, "echo": payload}
            return answer()

    active, standby = Handle(dead=True), Handle(dead=False)
    orchs = Orchestrators([active, standby])
    lost = asyncio.run(_call(orchs, "query", {"i": 1}))
    assert lost["http_status"] == 503 and lost["retry_after"] == 2 and "retry" in lost["error"]
    assert orchs.active == 1 and orchs.failovers == 1
    assert asyncio.run(_call(orchs, "query", {"i": 2})) == {"http_status": 200, "echo": {"i": 2}}
    orchs.failed(0)  # a late failure of the dead one's in-flight call
    assert orchs.active == 1 and (active.calls, standby.calls) == (1, 1)
    alone = Orchestrators([active])
    assert asyncio.run(_call(alone, "query", {}))["http_status"] == 503 and alone.active == 0


def test_replica_latency_ewmas_count_the_queue_wait():
    """The replica reports TTFT and end-to-end latency from arrival at the replica, its EDF
    queue's wait included (as the twin's engine measures them), not from engine admission."""

    async def main():
        q = _queue(1, 5)
        order: list[str] = []

        async def work(req):
            await asyncio.sleep(0.1)
            order.append(req.request_id)
            return GenerateResult(req.request_id, OK, "x", ttft_s=0.02)

        await asyncio.gather(*(admit(q, work, _req(f"r{i}", 10)) for i in range(3)))
        return q

    q = asyncio.run(main())
    # latencies 0.1, 0.2, 0.3 s (two waited in the queue); EWMA 0.2 from the first value
    want_e2e = 0.1
    for v in (0.2, 0.3):
        want_e2e = 0.8 * want_e2e + 0.2 * v
    assert q.e2e_ewma == pytest.approx(want_e2e, abs=0.02)
    assert q.ttft_ewma == pytest.approx(want_e2e - 0.08, abs=0.02)
    assert q.e2e_ewma > 0.12  # an engine-side EWMA would stay at ~0.1


def test_serve_config_is_valid_for_serve_deploy(tmp_path):
    """`inframind serve-config` writes a file Serve's own schema accepts: one application per
    model (no route) and the ingress at /, each builder importable and building its app from
    the file's args alone; a bad model name in the args is refused."""
    import subprocess
    import sys

    import yaml
    from ray.serve import Application
    from ray.serve._private.utils import import_attr
    from ray.serve.schema import ServeDeploySchema

    out = tmp_path / "serve.yaml"
    pool = Path(__file__).parent / "pools" / "serve_test.yaml"
    subprocess.run([sys.executable, "-m", "inframind_ray.cli", "serve-config", "-c", str(pool),
                    "-o", str(out)], check=True, capture_output=True, timeout=120)
    raw = yaml.safe_load(out.read_text())
    schema = ServeDeploySchema.model_validate(raw)
    apps = {a.name: a for a in schema.applications}
    assert set(apps) == {"model:big", "model:small", "inframind", "inframind-health"}
    assert apps["inframind"].route_prefix == "/"
    assert apps["inframind-health"].route_prefix == "/healthz"
    assert isinstance(import_attr(apps["inframind-health"].import_path)({}), Application)
    assert apps["model:big"].route_prefix is None
    for name in ("model:big", "model:small"):
        built = import_attr(apps[name].import_path)(apps[name].args)
        assert isinstance(built, Application)
    with pytest.raises(ValueError, match="not in pool"):
        import_attr(apps["model:big"].import_path)({**apps["model:big"].args, "model": "nope"})


def _unpruned(node: object, schema: dict, path: str = "") -> list[str]:
    """Fields of ``node`` the CRD's structural schema would silently prune (unknown keys)."""
    out: list[str] = []
    if isinstance(node, dict) and "properties" in schema:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return out
        for k, v in node.items():
            if k not in schema["properties"]:
                out.append(f"{path}.{k}")
            else:
                out += _unpruned(v, schema["properties"][k], f"{path}.{k}")
    elif isinstance(node, list) and "items" in schema:
        for i, v in enumerate(node):
            out += _unpruned(v, schema["items"], f"{path}[{i}]")
    return out


@pytest.mark.parametrize("pool", ["deployments/vllm_gpu_pool.yaml", "deployments/twin_pool.yaml"])
def test_rayservice_manifest_matches_the_kuberay_crd(tmp_path, pool):
    """`inframind kuberay` writes a RayService the KubeRay CRD's schema (offline copy) accepts,
    with no field the API server would prune; its serveConfigV2 is a valid Serve config; the
    GPU pool's worker groups carry the pool's placement resources and enough GPUs."""
    import json
    import subprocess
    import sys

    import jsonschema
    import yaml
    from ray.serve.schema import ServeDeploySchema

    root = Path(__file__).parents[1]
    out = tmp_path / "rayservice.yaml"
    subprocess.run([sys.executable, "-m", "inframind_ray.cli", "kuberay", "-c", str(root / pool),
                    "--image", "example.com/inframind-ray:0.1.0", "-o", str(out)],
                   check=True, capture_output=True, timeout=120)
    manifest = yaml.safe_load(out.read_text())
    crd = json.loads((root / "tests/data/kuberay/rayservice_v1_schema.json").read_text())
    assert manifest["apiVersion"] == f"{crd['group']}/{crd['version']}"
    assert manifest["kind"] == crd["kind"]
    jsonschema.Draft7Validator(crd["schema"]).validate(manifest)
    assert _unpruned(manifest, crd["schema"]) == []
    serve = ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    assert serve.http_options.host == "0.0.0.0"
    groups = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    if "gpu" in pool:
        from inframind_ray.config import load_pool

        cfg = load_pool(root / pool)
        need: dict[str, int] = {}
        for m in cfg.models:  # GPUs per replica: its own, or its vLLM tensor-parallel workers
            res = next(iter(m.ray_actor_options.get("resources", {})), "gpu")
            tp = m.engine.engine_kwargs.get("tensor_parallel_size", 1)
            need[res] = need.get(res, 0) + m.replicas * max(
                m.ray_actor_options.get("num_gpus", 0), tp)
        for g in groups:
            res = json.loads(g["rayStartParams"]["resources"])
            (name,) = res
            gpus = g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            assert g["replicas"] * gpus >= need[name] > 0
    # a manifest the schema must refuse: replicas as a string
    bad = json.loads(json.dumps(manifest))
    bad["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(crd["schema"]).validate(bad)


def test_adaptive_bound_settles_where_littles_law_puts_it():
    """``serving.adaptive_inflight``: the bound starts at its floor, does not move without a
    completion in the window, does not grow while less than half of it is used, grows by the
    latency ratio plus sqrt headroom while the control plane's delay is under the target, and,
    with a saturated control plane (4 completions/s, calls spanning 8 s), shrinks from its
    ceiling to within a step of Little's law's X * (span + target) = 4 * 10 = 40."""
    from inframind_ray.config import AdaptiveInflightConfig
    from inframind_ray.serving.gate import IngressGate

    clock = Clock(0.0)
    a = AdaptiveInflightConfig(target_delay_s=2.0, min_inflight=4, update_s=1.0)
    gate = IngressGate(None, max_inflight=200, clock=clock.now, adaptive=a)
    assert gate.limit() == 4
    for _ in range(3):
        gate.enter()
    clock.t = 1.0
    assert gate.limit() == 4  # no completion yet: no step
    for t in (1.0, 1.5):  # two answered, each replaced: 0.1 s outside 8 s of calls
        clock.t = t
        gate.leave(gate.enter() - 8.1, {"steps": [{"start_s": 0.0, "end_s": 8.0}]})
    assert gate.inflight == 3 and gate.limit() == 4  # stepped within update_s: unchanged
    clock.t = 2.0
    # 3 of 4 in use, delay 0.1 s (Little's law: 3 in flight at 2 per 5 s is under the 8 s
    # span): gain (8 + 2) / (8 + 0.1), plus sqrt(4)
    grown = gate.limit()
    assert grown == round(4 * 10 / 8.1 + 2) == 7
    gate.leave(gate.enter() - 8.1, {"steps": [{"start_s": 0.0, "end_s": 8.0}]})
    clock.t = 3.0
    assert gate.limit() == 7  # 3 of 7 in use: under half, no evidence for more
    idle = IngressGate(None, max_inflight=50, clock=clock.now, adaptive=a)
    idle.leave(idle.enter(), {})
    clock.t = 4.0
    assert idle.limit() == 4  # nothing in flight: the window is forgotten, the floor holds

    sat = IngressGate(None, max_inflight=200, clock=clock.now, adaptive=a)
    sat._limit = 200
    started: list[float] = []  # in flight, oldest first; the control plane ends 4 a second
    trace = []
    for _ in range(240):
        for _ in range(4):
            clock.t += 0.25
            if started:
                sat.leave(started.pop(0), {"steps": [{"start_s": 0.5, "end_s": 8.5}]})
            while sat.inflight < sat.limit():  # 10x overload: the bound is always full
                started.append(sat.enter())
        trace.append(sat.limit())
    assert trace[2] < 200 and min(trace) >= 4
    assert all(abs(x - 40) <= 12 for x in trace[-60:]), trace[-60:]


def test_ingress_router_holds_queries_at_the_reported_bound():
    """The proxy's ``IngressRouter``: a query goes to an ingress replica only while this
    router's requests in flight there are under the bound the replica reports (before a
    report: ``start_limit`` when given, else its ``max_ongoing_requests``); at the bound it
    returns no replica (the request waits in the proxy's queue, with backoff); health and state
    requests pass; completions and a dead replica free their slots."""
    from types import SimpleNamespace

    from inframind_ray.serving.router import IngressRouter

    def replica(name: str, limit: int | None) -> SimpleNamespace:
        return SimpleNamespace(replica_id=name, max_ongoing_requests=8,
                               routing_stats={} if limit is None else {"limit": limit})

    def pending(route: str) -> SimpleNamespace:
        return SimpleNamespace(metadata=SimpleNamespace(route=route),
                               routing_context=SimpleNamespace(should_backoff=False))

    router = IngressRouter.__new__(IngressRouter)
    router.initialize_state()
    a, b = replica("a", 2), replica("b", None)
    choose = lambda rs, route: asyncio.run(router.choose_replicas(rs, pending(route)))  # noqa: E731
    assert choose([a], "/v1/queries") == [[a]]
    router._use_replica_queue_len_cache = False
    router.on_send_request("a")
    router.on_send_request("a")
    p = pending("/v1/chat/completions")
    assert asyncio.run(router.choose_replicas([a], p)) == [] and p.routing_context.should_backoff
    assert choose([a], "/healthz") == [[a]] and choose([a], "/v1/state") == [[a]]
    assert choose([a, b], "/v1/queries") == [[b]]  # b: no report yet, Serve's 8
    assert router.limit(b) == 8
    router._start_limit = 3  # the adaptive bound's start (its floor), passed by Serve
    assert router.limit(b) == 3 and router.limit(a) == 2
    router.on_request_completed("a", "r1")
    assert choose([a], "/v1/queries") == [[a]]
    router._replicas, router._replica_id_set = {}, set()
    router._queue_len_gauge_last_update = {}
    router.on_replica_actor_died("a")
    assert "a" not in router._inflight


def test_a_controller_delta_that_was_not_asked_is_null_in_json():
    """A decision made with no answer to give has delta -inf, which JSON cannot carry (it was a
    500 on a GSM8K query whose first answers held no number): the response says null."""
    from inframind_ray.serving.queries import _finite

    assert _finite(float("-inf")) is None and _finite(float("nan")) is None
    assert _finite(0.123456789) == 0.12346


def test_the_orchestrator_explores_its_share_of_learned_queries(tmp_path):
    """``serving.rollouts.explore_share``: the learned policy's recorded queries explore by the
    query id's hash (about the share; counted in /v1/state's counters), with the configured
    epsilon; at 0 (the default) none does."""
    from inframind_ray.config import load_pool
    from inframind_ray.policy.learned import LearnedPolicy
    from inframind_ray.serving.orchestrator import Orchestrator
    from inframind_ray.serving.queries import query_info

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    for share, lo, hi in ((0.0, 0, 0), (0.3, 40, 80)):
        rollouts = cfg.serving.rollouts.model_copy(update={"explore_share": share,
                                                           "explore_epsilon": 0.25})
        serving = cfg.serving.model_copy(update={
            "records_dir": str(tmp_path / f"rec{share}"), "registry_dir": str(tmp_path / "reg"),
            "embed": False, "rollouts": rollouts})
        orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
        learned = orch.policies[LearnedPolicy.name]
        explored = 0
        for i in range(200):
            q = query_info({"item_id": 70, "budget_s": 30, "query_id": f"e{i}"}, time.time())
            ep, served = orch._recording(q, learned, orch.policy_version)
            assert ep is not None and served.inner is learned
            explored += served.explore is not None
            assert served.epsilon == 0.25
            orch.rollouts.abandon(ep)
        assert lo <= explored <= hi and orch.state()["counters"].get("explored_queries", 0) \
            == explored


def test_a_query_stamped_before_a_wait_has_that_much_less_budget(tmp_path):
    """``X-Request-Start`` (read only under ``serving.request_start_header``): the header's
    forms (``t=`` seconds, ms, us; garbage or absent: None; never after now). A query sent
    0.5 s before it reaches the orchestrator has 0.1 s of a 0.6 s budget left: refused with
    503 where the same query counted from its arrival is admitted (the fastest model, idle,
    takes 0.5 s; the margin 0.5)."""
    from inframind_ray.config import load_pool
    from inframind_ray.serving.api import request_start
    from inframind_ray.serving.orchestrator import Orchestrator
    from inframind_ray.serving.queries import query_info

    now = 1_800_000_000.0
    assert request_start("t=1799999999.5", now) == 1799999999.5
    assert request_start("1799999999500", now) == 1799999999.5  # ms
    assert request_start("1799999999500000", now) == 1799999999.5  # us
    assert request_start("t=1800000009", now) == now  # a clock ahead: no negative wait
    assert request_start("t=soon", now) is None and request_start(None, now) is None

    cfg = load_pool(Path(__file__).parent / "pools" / "serve_test.yaml")
    serving = cfg.serving.model_copy(update={"records_dir": str(tmp_path / "rec"),
                                             "embed": False})
    orch = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump())
    t = time.time()
    for name, service in (("big", 3.0), ("small", 0.5)):
        orch.push_metrics(LoadSnapshot(name, capacity=8, service_s=service, timestamp=t,
                                       replica_id=f"{name}0"))
    assert orch._admit(query_info({"item_id": 70, "budget_s": 0.6}, t)) is None
    late = orch._admit(query_info({"item_id": 70, "budget_s": 0.6}, t - 0.5))
    assert late["http_status"] == 503 and "s left)" in late["error"], late


def test_policy_version_rule_is_in_the_schema_and_enforced():
    """A query naming a policy_version with a policy other than the learned one is refused by
    the body model (422) and by its JSON Schema alike (the OpenAPI document says so)."""
    import jsonschema
    from pydantic import ValidationError

    from inframind_ray.serving.schemas import QueryRequest

    schema = jsonschema.Draft202012Validator(QueryRequest.model_json_schema())
    ok = [{"item_id": 1, "policy_version": "v0002"},
          {"item_id": 1, "policy_version": "v0002", "policy": "inframind"},
          {"item_id": 1, "policy": "round-robin"}]
    bad = {"item_id": 1, "policy_version": "v0002", "policy": "round-robin"}
    for body in ok:
        QueryRequest.model_validate(body)
        assert schema.is_valid(body), body
    with pytest.raises(ValidationError, match="applies to the learned policy"):
        QueryRequest.model_validate(bad)
    assert not schema.is_valid(bad)
