"""The serving plane on a real local Ray cluster: Serve replicas with EDF queues, the metrics
plane, the orchestrator actor and the HTTP API, on the twin engine (wall clock)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import ray
from ray import serve
from served import wait_idle

from inframind_ray.config import load_pool
from inframind_ray.core.types import SystemState
from inframind_ray.orchestration.runner import run_query
from inframind_ray.policy.baselines import make_policy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.tasks.workload import WorkloadSpec, make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import build_engines
from inframind_ray.twin.simloop import run_simulated

POOL = Path(__file__).parent / "pools" / "serve_test.yaml"


class _OTLPReceiver(BaseHTTPRequestHandler):
    """A real OTLP/HTTP trace receiver on loopback: decodes each export request's spans."""

    spans: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        req = ExportTraceServiceRequest()
        req.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
        for rs in req.resource_spans:
            service = next((a.value.string_value for a in rs.resource.attributes
                            if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    self.spans.append({
                        "name": sp.name, "service": service, "trace_id": sp.trace_id.hex(),
                        "span_id": sp.span_id.hex(), "parent": sp.parent_span_id.hex(),
                        "attributes": {a.key: a.value.string_value or a.value.int_value
                                       for a in sp.attributes}})
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


@pytest.fixture(scope="module")
def otlp():
    """The OTLP receiver's spans; the served pool exports to it."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _OTLPReceiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def session(tmp_path_factory, otlp):
    import os

    from inframind_ray.serving.app import start

    # the orchestrator keeps its spans in memory, and every process exports them over OTLP
    os.environ["INFRAMIND_OTEL"] = "memory,otlp"
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{otlp.server_port}"
    os.environ["RAY_metrics_report_interval_ms"] = "1000"  # noqa: SIM112 - export every 1 s
    cfg = load_pool(POOL)
    # the shipped learned policy serves by default, on a pool it was never trained on
    cfg = cfg.model_copy(update={"serving": cfg.serving.model_copy(
        update={"records_dir": str(tmp_path_factory.mktemp("records")),
                "registry_dir": str(tmp_path_factory.mktemp("policies")),
                "policy_checkpoint": None})})
    s = start(cfg)
    yield s
    s.stop()
    os.environ.pop("INFRAMIND_OTEL", None)
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    os.environ.pop("RAY_metrics_report_interval_ms", None)  # noqa: SIM112


def http(session, method: str, path: str, body=None, raw: bytes | None = None,
         headers: dict | None = None) -> tuple[int, dict, object]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(session.url + path, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, _json(r.status, r.read()), r.headers
    except urllib.error.HTTPError as e:
        return e.code, _json(e.code, e.read()), e.headers


def _json(code: int, raw: bytes) -> dict:
    try:
        return json.loads(raw or b"{}")
    except json.JSONDecodeError:
        raise AssertionError(f"HTTP {code} with a non-JSON body: {raw[:300]!r}") from None


def handle(model: str):
    return serve.get_deployment_handle(f"model:{model}", f"model:{model}")




def test_edf_order_inside_a_replica(session):
    """One slot, concurrent requests with shuffled deadlines: they finish in deadline order."""
    wait_idle(session)
    h = handle("big")

    async def main():
        order = []

        async def one(name, deadline_in, strategy="flash", tokens=8):
            req = GenerateRequest(name, "p", tokens, time.time() + deadline_in,
                                  strategy=strategy, prompt_tokens_hint=50)
            res = await h.generate.remote(req)
            order.append((name, res.status.api))

        await h.generate.remote(GenerateRequest("warm", "p", 1, time.time() + 30))
        blocker = asyncio.create_task(one("blocker", 100, "concise", 40))
        await asyncio.sleep(0.4)  # the blocker holds the only engine slot
        await asyncio.gather(blocker, *(one(f"d{d}", d) for d in (40, 10, 30, 20)))
        return order

    order = asyncio.run(main())
    assert [n for n, _ in order] == ["blocker", "d10", "d20", "d30", "d40"], order
    assert all(s == "ok" for _, s in order)


def test_infeasible_deadline_and_queue_full_answers(session):
    """A deadline that cannot be met is answered at once; a full replica queue says overloaded."""
    wait_idle(session)
    h = handle("big")
    t = time.time()
    res = h.generate.remote(GenerateRequest("late", "p", 8, time.time() - 1)).result()
    assert res.status.api == "deadline" and time.time() - t < 2.0

    async def main():
        reqs = [GenerateRequest(f"r{i}", "p", 30, time.time() + 60, strategy="concise",
                                prompt_tokens_hint=50) for i in range(6)]
        return await asyncio.gather(*(h.generate.remote(r) for r in reqs))

    statuses = sorted(r.status.api for r in asyncio.run(main()))
    # 1 slot + 4 queued are served, the rest are told at once that the queue is full
    assert statuses.count("ok") == 5 and statuses.count("overloaded") == 1


def test_degrade_answers_a_refused_call_with_the_fastest_model(session):
    """``engine.on_deadline: degrade`` on Ray Serve: a call the full replica refuses is sent
    again to the fastest model and the query is answered within its budget, the response naming
    the model given up; with the pool's ``abort`` the same query gets the replica's 503."""
    wait_idle(session)
    base = session.cfg.model_dump()
    degrade = {**base, "engine": {**base["engine"], "on_deadline": "degrade"}}
    h = handle("big")
    query = {"item_id": 70, "budget_s": 30, "policy": "always-strongest"}

    async def fill_big_then_query():
        # big's one slot and its four-deep queue taken, the next request finds it full
        reqs = [h.generate.remote(GenerateRequest(f"fill{i}", "p", 60, time.time() + 60,
                                                  strategy="concise", prompt_tokens_hint=50))
                for i in range(5)]
        await asyncio.sleep(0.3)
        out = await asyncio.to_thread(http, session, "POST", "/v1/queries", query)
        await asyncio.gather(*reqs)
        return out

    try:
        ray.get([o.set_pool.remote(degrade) for o in session.orchestrators])
        code, out, _ = asyncio.run(fill_big_then_query())
        assert code == 200, out
        assert out["steps"][-1]["degraded_from"] == "big" and out["steps"][-1]["model"] == "small"
        assert 0 <= out["steps"][-1]["given_up_start_s"] <= out["steps"][-1]["start_s"]
        assert out["within_budget"] and out["status"] == "ok"
    finally:
        ray.get([o.set_pool.remote(base) for o in session.orchestrators])
    wait_idle(session)
    code, out, _ = asyncio.run(fill_big_then_query())
    assert code == 503 and "overloaded" in out["error"], out


def test_metrics_reach_orchestrator_and_go_stale(session):
    """Snapshots arrive within 1 s; a replica that stops pushing is shown as stale."""
    st = ray.get(session.orchestrator.state.remote())["models"]
    assert all(m["age_s"] is not None and m["age_s"] < 1.0 for m in st.values())
    h = handle("small")
    assert h.set_push_enabled.remote(False).result() is False
    try:
        time.sleep(2.0)
        st = ray.get(session.orchestrator.state.remote())["models"]
        assert st["small"]["stale"] and st["small"]["age_s"] > 1.0
        assert not st["big"]["stale"]
    finally:
        h.set_push_enabled.remote(True).result()
    time.sleep(1.0)
    assert not ray.get(session.orchestrator.state.remote())["models"]["small"]["stale"]


def test_http_query_returns_graded_answer(session):
    """POST /v1/queries with an MMLU-Pro item: a graded answer, the plan and the trace."""
    wait_idle(session)
    code, out, _ = http(session, "POST", "/v1/queries", {"item_id": 70, "budget_s": 60})
    assert code == 200, out
    assert out["policy"] == "inframind"  # the learned checkpoint, served by default
    assert out["answer"] in list("ABCDEFGHIJ") and isinstance(out["correct"], bool)
    assert out["within_budget"] and 0 < out["latency_s"] < 60
    assert out["plan"]["topology"] and len(out["steps"]) >= 1
    assert out["steps"][-1]["end_s"] == pytest.approx(out["latency_s"], abs=0.05)
    code, chat, _ = http(session, "POST", "/v1/chat/completions", {
        "model": "inframind", "messages": [{"role": "user", "content": "What is 2+2?"}],
        "budget_s": 30})
    assert code == 200 and chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["content"]
    code, st, _ = http(session, "GET", "/v1/state")
    assert code == 200 and set(st["models"]) == {"big", "small"}
    assert st["default_policy"] == "inframind" and st["policy_status"] == "ok"
    assert http(session, "GET", "/healthz")[:2] == (200, {"status": "ok"})
    code, out, headers = http(session, "POST", "/healthz", {})
    assert code == 405 and "not allowed" in out["error"] and headers["Allow"] == "GET, HEAD"
    routes = http(session, "GET", "/-/routes")[1]  # Serve's proxy: route prefix -> application
    assert routes["/healthz"] == "inframind-health" and routes["/"] == "inframind", routes


def test_same_plan_in_twin_and_serve(session):
    """One workflow code: the same policy on the same items plans and routes identically."""
    wait_idle(session)
    cfg = load_pool(POOL)
    outcome = OutcomeModel({m.name: m.recorded for m in cfg.models})
    info = build_pool_info(cfg)
    queries = make_queries(WorkloadSpec(10, 5, seed=4))
    for policy in ("random", "always-strongest"):
        pol = make_policy(policy, info, 0)

        async def twin_run(q, pol=pol):
            loop = asyncio.get_running_loop()
            engines = build_engines(cfg)
            backend = TwinBackend(engines, outcome)
            return await run_query(q, pol, backend, lambda: SystemState(
                loop.time(), {m: r.load() for m, r in engines.items()}))

        for q in queries:
            twin, _ = run_simulated(twin_run(q))
            code, out, _ = http(session, "POST", "/v1/queries", {
                "item_id": q.item_id, "budget_s": 600, "policy": policy,
                "query_id": q.query_id})
            assert code == 200, out
            assert out["plan"]["topology"] == twin.plan.topology.value
            assert out["plan"]["k"] == twin.plan.k
            assert [(s["model"], s["strategy"]) for s in out["steps"]] == [
                (s.model, s.strategy.value) for s in twin.steps]


@pytest.mark.parametrize(
    "raw,code,word",
    [
        (b"{not json", 400, "malformed"),
        (b'{"budget_s": 10}', 422, "query"),
        (b'{"query": "hi", "budget_s": 0}', 422, "budget_s"),
        (b'{"query": "hi", "budget_s": -3}', 422, "budget_s"),
        (b'{"query": "hi", "budget_s": 1e9}', 422, "budget_s"),
        (b'{"query": "hi", "budget_s": 5e-324}', 422, "budget_s: must be >= 0.1 s"),
        (b'{"query": "hi", "task": "poetry"}', 422, "task"),
        (b'{"item_id": 99999999, "budget_s": 10}', 404, "99999999"),
        (b'{"item_id": 5, "task": "gsm9k", "budget_s": 10}', 422, "task"),
        (b'{"item_id": 5000, "task": "gsm8k", "budget_s": 10}', 404, "gsm8k item id 5000"),
        (b'{"item_id": 500, "task": "humaneval", "budget_s": 10}', 404, "humaneval item"),
        (b'{"item_id": false, "budget_s": 10}', 422, "item_id"),
        (b'{"query": "hi", "reference": "4", "task": "mbpp"}', 422, "item"),
        (b'{"query": "hi", "policy": "magic"}', 400, "magic"),
        (b'{"query": "hi", "policy": "pinned:nope"}', 400, "pinned"),
        (b'{"query": "' + b"x" * 5000 + b'"}', 413, "larger"),
    ],
)
def test_bad_input_gets_4xx_one_line(session, raw, code, word):
    """Bad input: a 4xx with a one-line reason, and the service keeps serving (its health and
    state answer at once; the next tests' queries are answered after all of these)."""
    got, out, _ = http(session, "POST", "/v1/queries", raw=raw)
    assert got == code, out
    assert word in out["error"] and "\n" not in out["error"]
    assert http(session, "GET", "/healthz")[0] == 200
    assert http(session, "GET", "/v1/state")[1]["ingress_inflight"] == 0


def test_every_task_family_through_http(session):
    """A GSM8K, MATH and HumanEval item through the HTTP API on the twin engines: the response is
    graded by the family's real grader (code in the sandbox) as the grader run here says; free
    text grades against a reference; /v1/grade grades unparsable code as wrong, saying why."""
    from inframind_ray.tasks.registry import family

    wait_idle(session)
    for task, item in (("gsm8k", 3), ("math", 5), ("humaneval", 0), ("mbpp", 2)):
        code, out, _ = http(session, "POST", "/v1/queries", {
            "item_id": item, "task": task, "budget_s": 120, "policy": "always-strongest"})
        assert code == 200, out
        assert out["task"] == task and out["status"] == "ok" and out["text"]
        assert out["correct"] == family(task).grade(item, out["text"])
    code, out, _ = http(session, "POST", "/v1/queries", {
        "query": "What is 6 times 7?", "reference": "42", "task": "gsm8k", "budget_s": 30})
    assert code == 200 and isinstance(out["correct"], bool)
    code, out, _ = http(session, "POST", "/v1/grade", {
        "task": "humaneval", "item_id": 0, "answer": "def has_close_elements(:\n  pass"})
    assert code == 200 and out["correct"] is False and "does not parse" in out["detail"]
    canonical = family("humaneval").correct_text(0)
    code, out, _ = http(session, "POST", "/v1/grade", {
        "task": "humaneval", "item_id": 0, "answer": canonical})
    assert code == 200 and out["correct"] is True
    code, out, _ = http(session, "POST", "/v1/grade", {
        "task": "math", "reference": "\\frac{1}{2}", "answer": "The answer is 0.5"})
    assert code == 200 and out["correct"] is True


def test_calibrate_writes_a_served_models_card(session, tmp_path):
    """`inframind calibrate`: validation items of each family go to the pinned model; the card's
    accuracy is the share the service graded correct, which on the twin engine is the recorded
    answers' (a lone DeepThink agent replays them)."""
    from inframind_ray.core.strategy import Strategy
    from inframind_ray.errors import ConfigError
    from inframind_ray.serving.calibrate import CalibrationSpec, run_calibration

    wait_idle(session)
    spec = CalibrationSpec("small", ("gsm8k", "math"), per_family=4, budget_s=120)
    card, records = asyncio.run(run_calibration(session.url, spec))
    assert len(records) == 8 and all(r["status"] == "ok" for r in records), records
    outcome = OutcomeModel.for_models(load_pool(POOL).models)
    for t in ("gsm8k", "math"):
        f = card["families"][t]
        want = np.mean([outcome.would_be_correct(i, "small", Strategy.DEEPTHINK, t)
                        for task, i in spec.items() if task == t])
        assert f["n"] == 4 and f["accuracy"] == pytest.approx(want)
        lo, hi = f["accuracy_ci95"]
        assert lo <= f["accuracy"] <= hi and f["output_tokens_mean"] > 0
    with pytest.raises(ConfigError, match="not served"):
        asyncio.run(run_calibration(session.url, CalibrationSpec("nope", ("gsm8k",), 1)))


def _post_raw(session, path: str, body: dict) -> tuple[int, bytes, object]:
    req = urllib.request.Request(session.url + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def test_overload_gets_429_or_503_with_retry_after(session):
    """A burst of queries and chats alike: some answered, the rest refused with Retry-After:
    503 with a JSON reason when the 70B's replica queue is full, 429 from Serve's proxy (its
    backpressure, a plain-text reason) when more than max_inflight_queries are in the ingress and
    ingress_max_queued wait in the proxy. Which of the two a request meets depends on how fast
    the ingress refuses the others (on CI's 2 cores the proxy's queue may never fill), so the
    test asserts a refusal and the shape of each, not the 429. ``/healthz``, polled throughout,
    answers 200 every time. Then the service serves again, and the ingress gate counts nothing
    in flight."""
    wait_idle(session)

    def one(i):
        if i % 2:
            return _post_raw(session, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"long question {i}"}],
                "budget_s": 60, "policy": "always-strongest"})
        return _post_raw(session, "/v1/queries", {
            "query": f"long question {i}", "budget_s": 60, "policy": "always-strongest"})

    health: list[int] = []
    burst = threading.Event()

    def poll_health():
        while not burst.is_set():
            health.append(http(session, "GET", "/healthz")[0])
            time.sleep(0.05)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with ThreadPoolExecutor(40) as ex:  # past 8 in the ingress + 16 queued in the proxy
            results = list(ex.map(one, range(40)))
    finally:
        burst.set()
        poller.join(timeout=30)
    codes = [c for c, _, _ in results]
    assert 200 in codes and set(codes) <= {200, 429, 503} and {429, 503} & set(codes), codes
    # the health route is its own application: never shed with the queries (serving/health.py)
    assert health and set(health) == {200}, health
    for c, raw, headers in results:
        if c in (429, 503):
            assert headers.get("Retry-After") == "1", (c, raw)
        if c == 429:
            assert b"backpressure" in raw or b"too many" in raw, raw
        if c == 503:
            assert json.loads(raw)["error"], raw
    wait_idle(session)
    assert http(session, "POST", "/v1/queries", {"item_id": 71, "budget_s": 60})[0] == 200
    assert http(session, "GET", "/v1/state")[1]["ingress_inflight"] == 0


def test_chat_is_admitted_by_the_ingress_gate(session):
    """A chat completion is a query in flight at the ingress gate while it streams (the same
    rule and bound as /v1/queries), and leaves it when answered."""
    wait_idle(session)
    req = urllib.request.Request(session.url + "/v1/chat/completions", method="POST",
                                 headers={"content-type": "application/json"},
                                 data=json.dumps({"messages": [{"role": "user", "content": "q"}],
                                                  "budget_s": 60, "stream": True,
                                                  "policy": "always-strongest"}).encode())
    with urllib.request.urlopen(req, timeout=120) as r:
        first = r.readline()
        assert first.startswith(b"data: ")
        assert http(session, "GET", "/v1/state")[1]["ingress_inflight"] == 1
        rest = r.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert http(session, "GET", "/v1/state")[1]["ingress_inflight"] == 0


def test_records_written_as_parquet(session):
    """Per-call and per-query rows are written as Parquet (the learned policy's decisions and
    rollouts too: those are also flushed every ``rollouts.flush_s``, so some may already lie in
    the folder before this flush)."""
    import pyarrow.parquet as pq

    paths = ray.get(session.orchestrator.flush_records.remote())
    assert {Path(p).name.split("-")[0] for p in paths} >= {"calls", "queries"}
    written = Path(session.cfg.serving.records_dir).glob("*.parquet")
    kinds = {p.name.split("-")[0] for p in written}
    assert kinds == {"calls", "queries", "decisions", "rollouts"}, kinds
    calls = pq.read_table([p for p in paths if Path(p).name.startswith("calls")][0])
    assert {"query_id", "model", "strategy", "queue_wait_s", "ttft_s", "latency_s",
            "deadline_in_s", "status"} <= set(calls.column_names)


def test_opentelemetry_spans_per_query_and_call(session):
    """Each query is a span; its agent calls are child spans in the same trace."""
    wait_idle(session)
    code, out, _ = http(session, "POST", "/v1/queries", {"item_id": 72, "budget_s": 60,
                                                          "policy": "random",
                                                          "query_id": "trace-me"})
    assert code == 200
    spans = ray.get(session.orchestrator.traces.remote())
    q = [s for s in spans if s["name"] == "query" and s["attributes"]["query_id"] == "trace-me"]
    calls = [s for s in spans if s["name"] == "agent_call"
             and s["attributes"]["query_id"] == "trace-me"]
    assert len(q) == 1 and len(calls) == len(out["steps"])
    assert all(c["trace_id"] == q[0]["trace_id"] for c in calls)


def test_openai_client_plain_and_streaming_with_history(session):
    """The official ``openai`` client: the message history becomes the query, a plain call and a
    streaming call both bring the answer's text and real token usage, bad requests raise."""
    import openai

    wait_idle(session)
    client = openai.OpenAI(base_url=session.url + "/v1", api_key="unused", max_retries=0,
                           timeout=60)
    history = [{"role": "system", "content": "Answer briefly."},
               {"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "4"},
               {"role": "user", "content": "And 3+3?"}]
    chat = client.chat.completions.create(model="inframind", messages=history,
                                          extra_body={"budget_s": 30})
    text = chat.choices[0].message.content
    assert text and chat.choices[0].finish_reason == "stop"
    u = chat.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert chat.model_extra["inframind"]["status"] == "ok"

    chunks = list(client.chat.completions.create(
        model="inframind", messages=history, stream=True,
        stream_options={"include_usage": True}, extra_body={"budget_s": 30}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed.strip()
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens > 0 and usage[0].prompt_tokens > 0
    assert all(c.id == chunks[0].id for c in chunks)

    with pytest.raises(openai.UnprocessableEntityError, match="user message"):
        client.chat.completions.create(model="inframind", messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "  "}])
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.chat.completions.create(model="gpt-9", messages=history, stream=True)


def test_otlp_traces_span_orchestrator_and_replicas(session, otlp):
    """Traces reach a real OTLP receiver: the query span, its agent calls, and each replica's
    ``replica_generate`` span as the child of its agent call, all in one trace."""
    wait_idle(session)
    code, out, _ = http(session, "POST", "/v1/queries", {"item_id": 73, "budget_s": 60,
                                                          "policy": "random",
                                                          "query_id": "otlp-me"})
    assert code == 200
    ray.get(session.orchestrator.traces.remote())  # flushes the orchestrator's batch
    end = time.time() + 20
    while time.time() < end:
        spans = list(_OTLPReceiver.spans)
        q = [s for s in spans if s["name"] == "query" and s["attributes"].get("query_id")
             == "otlp-me"]
        calls = [s for s in spans if s["name"] == "agent_call"
                 and s["attributes"].get("query_id") == "otlp-me"]
        reps = [s for s in spans if s["name"] == "replica_generate"
                and str(s["attributes"].get("request_id", "")).startswith("otlp-me/")]
        if q and len(calls) == len(out["steps"]) and len(reps) == len(calls):
            break
        time.sleep(0.5)
    assert len(q) == 1 and q[0]["service"] == "inframind-orchestrator"
    assert len(calls) == len(out["steps"]) and len(reps) == len(calls), (len(calls), len(reps))
    assert {s["trace_id"] for s in calls + reps} == {q[0]["trace_id"]}
    assert {r["parent"] for r in reps} == {c["span_id"] for c in calls}
    assert all(r["service"].startswith("inframind-replica-") for r in reps)


def test_prometheus_metrics_and_dashboard(session):
    """Ray's Prometheus endpoint carries the package's counters, histograms and gauges; the
    query counter matches the queries served; every metric the Grafana dashboard plots exists."""
    import re

    from inframind_ray.serving.metrics import NAMES

    wait_idle(session)
    for i in range(3):
        assert http(session, "POST", "/v1/queries", {"item_id": 500 + i, "budget_s": 60})[0] == 200
    port = session.cfg.serving.metrics_export_port
    served = ray.get(session.orchestrator.state.remote())["served_queries"]

    def scrape() -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        totals: dict[str, float] = {}
        for line in text.decode().splitlines():
            m = re.match(r"ray_(inframind_[a-z_]+?)(_bucket|_count|_sum)?\{.*\} ([0-9.e+-]+)$",
                         line)
            if m:
                key = m.group(1) + (m.group(2) or "")
                totals[key] = totals.get(key, 0.0) + float(m.group(3))
        return totals

    end, got = time.time() + 30, {}
    while time.time() < end:
        got = scrape()  # each process exports on its own period: wait for all of them
        if got.get("inframind_queries_total") == served and {
                "inframind_replica_requests_total", "inframind_policy_info",
                "inframind_replica_waiting"} <= set(got):
            break
        time.sleep(1.0)
    assert got.get("inframind_queries_total") == served, (served, got)
    assert got["inframind_query_latency_s_count"] == served
    assert got["inframind_agent_calls_total"] >= served
    assert got["inframind_replica_requests_total"] >= got["inframind_agent_calls_total"] * 0.9
    assert got["inframind_policy_info"] >= 1
    dash = json.loads((Path(__file__).parents[1] / "deployments" / "grafana"
                       / "inframind.json").read_text())
    used = set(re.findall(r"ray_(inframind_[a-z_]+?)(?:_bucket|_count|_sum)?\b",
                          json.dumps(dash)))
    assert used and used <= set(NAMES), used - set(NAMES)


def test_policy_registry_rollouts_and_feedback(session, tmp_path):
    """The registry through the API: a promote swaps the served version without touching the
    query in flight; pin blocks promote; a corrupt candidate is refused (409, one line) and the
    incumbent serves; rollback. Every served decision is a rollout row whose observation gives
    back the recorded action; graded queries carry quality, free text only its latency cost,
    and POST /v1/feedback adds a score to a recent query (404 unknown, 422 bad score)."""

    import pyarrow.parquet as pq

    from inframind_ray.policy.features import EXECUTOR_OBS, PLANNER_OBS
    from inframind_ray.policy.learned import LearnedPolicy
    from inframind_ray.policy.registry import PolicyRegistry

    wait_idle(session)
    orch = session.orchestrator
    reg = PolicyRegistry(session.cfg.serving.registry_dir)
    pool = build_pool_info(session.cfg)
    st = http(session, "GET", "/v1/state")[1]
    assert (st["policy_version"], st["policy_pinned"]) == ("v0001", False)
    v2 = reg.register(LearnedPolicy(pool, seed=7, hidden=16).save(tmp_path / "c2"), pool,
                      parent="v0001").version
    inflight = orch.query.remote({"item_id": 71, "budget_s": 60, "query_id": "swap-1"})
    end = time.time() + 20
    while ray.get(orch.state.remote())["rollouts"]["in_flight"] == 0:  # started, with v0001
        assert time.time() < end, "the query never showed in flight"
        time.sleep(0.01)
    promoted = ray.get(orch.policy_op.remote("promote", v2), timeout=60)
    assert ray.get(orch.state.remote())["rollouts"]["in_flight"] == 1  # swapped mid-query
    assert promoted["serving"] == v2 and promoted["active"] == v2
    assert ray.get(inflight, timeout=120)["http_status"] == 200
    code, out, _ = http(session, "POST", "/v1/queries",
                        {"item_id": 72, "budget_s": 60, "query_id": "after-1"})
    assert code == 200, out
    assert http(session, "POST", "/v1/policies/pin", {})[0] == 200
    assert http(session, "GET", "/v1/state")[1]["policy_pinned"] is True
    code, out, _ = http(session, "POST", "/v1/policies/promote", {"version": "v0001"})
    assert code == 409 and out["error"] == f"{v2} is pinned: unpin it before you promote"
    assert http(session, "POST", "/v1/policies/unpin")[0] == 200
    v3 = reg.register(LearnedPolicy(pool, seed=8, hidden=16).save(tmp_path / "c3"), pool).version
    (reg.path(v3) / "policy.safetensors").write_bytes(b"flipped")
    code, out, _ = http(session, "POST", "/v1/policies/promote", {"version": v3})
    assert code == 409 and "digest mismatch" in out["error"] and "\n" not in out["error"]
    assert http(session, "POST", "/v1/policies/promote", {"version": "v0077"})[0] == 404
    for route in ("promote", "canary"):  # the version is required, in the schema too
        code, out, _ = http(session, "POST", f"/v1/policies/{route}", {})
        assert code == 422 and out["error"] == "version: Field required", out
    assert http(session, "POST", "/v1/policies/pin", raw=b"null")[0] == 422
    code, out, _ = http(session, "POST", "/v1/policies/canary", {"version": "v0077"})
    assert code == 404 and "v0077" in out["error"], out  # the canary route reaches the registry
    assert http(session, "GET", "/v1/state")[1]["policy_version"] == v2
    # one query served by a version that is not active (two versions side by side)
    code, out, _ = http(session, "POST", "/v1/queries", {
        "item_id": 73, "budget_s": 60, "query_id": "pv-1", "policy_version": "v0001"})
    assert code == 200 and out["policy_version"] == "v0001", out
    for body, want in (({"policy_version": "v0077"}, 404), ({"policy_version": v3}, 409),
                       ({"policy_version": "v0001", "policy": "always-strongest"}, 422),
                       ({"policy_version": "1"}, 422)):
        code, out, _ = http(session, "POST", "/v1/queries", {"item_id": 73, **body})
        assert code == want and "\n" not in out["error"], (body, code, out)
    code, out, _ = http(session, "POST", "/v1/queries", {"query": "Name a prime number.",
                                                        "budget_s": 30, "query_id": "fb-1"})
    assert code == 200 and out["correct"] is None
    code, out, _ = http(session, "POST", "/v1/policies/rollback")
    assert code == 200 and out["serving"] == "v0001" and out["active"] == "v0001"

    # feedback: a recent query's score; unknown id 404; a bad score 422; in the OpenAPI schema
    code, fb, _ = http(session, "POST", "/v1/feedback", {"query_id": "fb-1", "score": 0.75})
    assert code == 200 and fb["score"] == 0.75
    assert http(session, "POST", "/v1/feedback", {"query_id": "nope", "score": 1})[0] == 404
    for bad in (1.5, -0.1, "high", False):  # false is no score
        assert http(session, "POST", "/v1/feedback", {"query_id": "fb-1", "score": bad})[0] == 422
    schema = http(session, "GET", "/openapi.json")[1]
    assert schema["components"]["schemas"]["FeedbackRequest"]["properties"]["score"][
        "maximum"] == 1
    assert "/v1/feedback" in schema["paths"] and "/v1/policies/promote" in schema["paths"]
    assert schema["components"]["schemas"]["PolicyVersionRequired"]["required"] == ["version"]
    assert schema["components"]["schemas"]["QueryRequest"]["properties"]["budget_s"][
        "minimum"] == session.cfg.serving.min_budget_s
    chat_ok = schema["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert {"application/json", "text/event-stream"} <= set(chat_ok)

    # the rollouts: decisions, episodes, feedback
    paths = ray.get(orch.flush_records.remote())
    root = Path(session.cfg.serving.records_dir)
    table = {k: pq.read_table(sorted(root.glob(f"{k}-*.parquet"))).to_pylist()
             for k in ("decisions", "rollouts", "feedback")}
    assert paths and not list(root.glob(".*.tmp"))
    eps = {r["query_id"]: r for r in table["rollouts"]}
    assert (eps["swap-1"]["policy_version"], eps["after-1"]["policy_version"],
            eps["fb-1"]["policy_version"], eps["pv-1"]["policy_version"]) == (
        "v0001", v2, v2, "v0001")
    assert eps["after-1"]["quality"] in (0.0, 1.0) and eps["fb-1"]["quality"] is None
    assert 0.0 <= eps["fb-1"]["latency_cost"] <= 1.0
    assert [f["rollout_id"] for f in table["feedback"]] == [eps["fb-1"]["rollout_id"]]
    ids = [d["decision_id"] for d in table["decisions"]]
    assert len(ids) == len(set(ids))
    served = {v: reg.check(v, pool) for v in ("v0001", v2)}
    for name in ("swap-1", "after-1", "fb-1", "pv-1"):
        ep = eps[name]
        rows = sorted((d for d in table["decisions"] if d["rollout_id"] == ep["rollout_id"]),
                      key=lambda d: d["index"])
        assert len(rows) == ep["n_decisions"] == 1 + ep["n_calls"]
        assert [d["kind"] for d in rows] == ["plan"] + ["step"] * ep["n_calls"]
        for d in rows:
            sizes = PLANNER_OBS if d["kind"] == "plan" else EXECUTOR_OBS
            obs = {k: np.asarray(d["obs_" + ("ctx" if k in ("emb", "sem") else k)], np.float32)
                   for k in sizes}
            assert {k: len(v) for k, v in obs.items()} == sizes
            action, logp, value = served[ep["policy_version"]].act(
                "planner" if d["kind"] == "plan" else "executor", obs)
            assert action == d["action"] and logp == pytest.approx(d["logp"], abs=1e-4)
            assert value == pytest.approx(d["value"], abs=1e-4) and d["logp"] <= 0
            if d["kind"] == "step":
                assert d["model"] in {"big", "small"} and d["call_status"] is not None
                assert d["load_replicas"] >= 1 and d["call_latency_s"] >= 0

    # the served version as a Prometheus gauge
    port = session.cfg.serving.metrics_export_port
    end, line = time.time() + 30, None
    while time.time() < end and line is None:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        line = next((ln for ln in text.decode().splitlines()
                     if ln.startswith("ray_inframind_policy_version_info{")
                     and 'policy_version="v0001"' in ln and 'pinned="false"' in ln
                     and ln.endswith("} 1.0")), None)
        time.sleep(0.5)
    assert line is not None


def test_model_removed_and_added_while_serving(session):
    """A model taken out of the running pool: queries keep being answered and none routes to
    it; added back, it reports and serves again; slowed, it is redeployed with the new engine
    and still serves. The three go through the drift kit's ``apply_to_session`` (its last
    replica lost, the model added, the model slowed). (Last in this module: it changes the
    pool.)"""
    from inframind_ray.serving.drift import ModelAdded, ModelSlowed, ReplicaLost, apply_to_session

    wait_idle(session)
    small = next(m for m in session.cfg.models if m.name == "small")
    results: list[tuple[int, dict]] = []
    stop = threading.Event()

    def load(k: int) -> None:
        i = 0
        while not stop.is_set() and i < 40:  # bounded
            results.append(http(session, "POST", "/v1/queries",
                                {"item_id": 400 + 8 * i + k, "budget_s": 60,
                                 "policy": "round-robin"})[:2])
            i += 1

    threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        apply_to_session(session, ReplicaLost(model="small"))  # its only replica: out of the pool
        removed_at = len(results)
        st = ray.get(session.orchestrator.state.remote())
        assert set(st["models"]) == {"big"}
        time.sleep(3.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert results and all(code == 200 for code, _ in results), results
    after = [out for _, out in results[removed_at + 2:]]  # sent after the removal
    assert after and all(s["model"] == "big" for out in after for s in out["steps"])
    st = ray.get(session.orchestrator.state.remote())
    assert st["policy_status"] == "ok"  # the shipped checkpoint serves the one-model pool
    code, out, _ = http(session, "POST", "/v1/queries", {"item_id": 590, "budget_s": 60})
    assert code == 200 and out["policy"] == "inframind"
    assert {s["model"] for s in out["steps"]} == {"big"}
    assert apply_to_session(session, ModelAdded(added=small)) is session.cfg
    st = ray.get(session.orchestrator.state.remote())
    assert set(st["models"]) == {"big", "small"} and st["models"]["small"]["age_s"] is not None
    assert st["policy_status"] == "ok" and st["default_policy"] == "inframind"
    outs = [http(session, "POST", "/v1/queries", {"item_id": 600 + i, "budget_s": 60,
                                                  "policy": "round-robin"}) for i in range(3)]
    assert all(code == 200 for code, _, _ in outs)
    assert any(s["model"] == "small" for _, out, _ in outs for s in out["steps"])

    slowed = apply_to_session(session, ModelSlowed(model="small", factor=2.0))
    assert next(m for m in slowed.models if m.name == "small").engine.time_scale == 1.0
    assert session.cfg is slowed
    st = ray.get(session.orchestrator.state.remote())
    assert set(st["models"]) == {"big", "small"} and st["policy_status"] == "ok"
    outs = [http(session, "POST", "/v1/queries", {"item_id": 610 + i, "budget_s": 60,
                                                  "policy": "round-robin"}) for i in range(3)]
    assert all(code == 200 for code, _, _ in outs), outs
    assert any(s["model"] == "small" for _, out, _ in outs for s in out["steps"])
