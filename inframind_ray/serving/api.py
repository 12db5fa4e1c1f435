"""HTTP ingress (Ray Serve + FastAPI): the query API, an OpenAI-compatible chat endpoint, live
state and health. Bad input gets a 4xx with a one-line reason; overload a 429/503 with
Retry-After.

No ``from __future__ import annotations`` here: FastAPI must see the real body classes through
Serve's method wrappers.
"""

import asyncio
import hmac
import os
import time

import ray
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from ray import serve
from ray.serve.config import BackpressureConfig
from starlette.exceptions import HTTPException as StarletteHTTPException

from inframind_ray.config import PoolConfig
from inframind_ray.serving.chat import (
    MAX_QUERY_CHARS,
    completion,
    conversation,
    stream,
)
from inframind_ray.serving.failover import Orchestrators
from inframind_ray.serving.gate import IngressGate
from inframind_ray.serving.metrics import ingress_limit_gauge, shed_counter
from inframind_ray.serving.router import ingress_router_config
from inframind_ray.serving.schemas import (
    ChatRequest,
    FeedbackRequest,
    GradeRequest,
    PolicyVersionRequest,
    PolicyVersionRequired,
    QueryRequest,
)

CHAT_PATH = "/v1/chat/completions"


def _error(status: int, msg: str, retry_after: int | None = None,
           openai: bool = False, headers: dict | None = None) -> JSONResponse:
    """A 4xx/5xx with a one-line reason: ``{"error": reason}``, or on the OpenAI-compatible
    endpoint OpenAI's shape ``{"error": {"message", "type", "code"}}``."""
    headers = {**(headers or {}), **({"Retry-After": str(retry_after)} if retry_after else {})}
    if openai:
        kind = "invalid_request_error" if status < 500 and status != 429 else "server_error"
        body: dict = {"error": {"message": msg, "type": kind, "code": status}}
    else:
        body = {"error": msg}
    return JSONResponse(body, status_code=status, headers=headers)


def _same(given: str, key: str) -> bool:
    """Constant-time comparison of an API key (no timing side channel)."""
    return hmac.compare_digest(given.encode(), key.encode())


def _first_error(exc: RequestValidationError) -> str:
    err = exc.errors()[0]
    if err.get("type") == "json_invalid":
        return "malformed JSON body"
    loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def _errors(*codes: int) -> dict:
    """OpenAPI responses of these error statuses (each a JSON body with a one-line reason)."""
    why = {400: "malformed JSON, an unknown policy, an answer the grader cannot read",
           401: "missing or wrong API key",
           404: "no such item (or model on the chat endpoint, query_id, policy version)",
           409: "a registry operation refused (pinned, nothing to roll back to, a candidate "
                "that cannot serve); the active version keeps serving",
           413: "body larger than serving.max_body_bytes",
           422: "a field or rule violated (or a budget that no model of the pool answers "
                "within even when idle)",
           429: "too many queries in flight (Retry-After)",
           503: "a replica on the query's path was full, no model is predicted to answer "
                "within the budget, the budget ran out before the query arrived "
                "(serving.request_start_header), or the orchestrator restarted (Retry-After)"}
    body = {"application/json": {"schema": {"type": "object", "required": ["error"],
                                            "properties": {"error": {}}}}}
    return {c: {"description": why[c], "content": body} for c in codes}


SSE_OK = {200: {"description": "the completion, or with `stream: true` server-sent events "
                 "(OpenAI's chat.completion.chunk objects, then `data: [DONE]`)",
                 "content": {"application/json": {}, "text/event-stream": {"schema": {
                     "type": "object", "required": ["data"],  # one event
                     "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}}}}}


def _budget_error(budget_s: float, lo: float, hi: float) -> str | None:
    """The budget's bounds (the pool's ``serving.min_budget_s`` / ``max_budget_s``, stated in
    the OpenAPI document): the 422 reason, or None."""
    if budget_s > hi:
        return f"budget_s: must be <= {hi:g} s"
    if budget_s < lo:
        return f"budget_s: must be >= {lo:g} s"
    return None


REQUEST_START = "x-request-start"


def request_start(value: str | None, now: float) -> float | None:
    """The epoch instant of an ``X-Request-Start`` header (``t=1700000000.123``, or the bare
    number; milli- and microseconds are read by their size), at most ``now``; None when it is
    absent or unreadable (the query then counts from its arrival here)."""
    if not value:
        return None
    try:
        t = float(value.strip().removeprefix("t="))
    except ValueError:
        return None
    while t > 1e11:  # ms or us since the epoch
        t /= 1000.0
    return min(t, now) if t > 0 else None


def _policy_names(cfg: PoolConfig) -> list[str]:
    from inframind_ray.policy.baselines import POLICIES

    return [*POLICIES, *(f"pinned:{m.name}" for m in cfg.models)]


def build_fastapi(cfg: PoolConfig) -> FastAPI:
    """The FastAPI app (routes call the orchestrators set by the Serve ingress class). Its
    OpenAPI document carries the pool's settings that the service enforces: the budget's
    maximum and the policy names."""
    app = FastAPI(title="inframind_ray", version="0.1.0")
    max_body = cfg.serving.max_body_bytes
    key_env = cfg.serving.api_key_env
    policies = _policy_names(cfg)

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for name in ("QueryRequest", "ChatRequest"):
                props = schema["components"]["schemas"][name]["properties"]
                props["budget_s"]["maximum"] = cfg.serving.max_budget_s
                props["budget_s"]["minimum"] = cfg.serving.min_budget_s
                props["policy"] = {"anyOf": [{"enum": policies}, {"type": "null"}],
                                   "title": "Policy"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), openai=request.url.path == CHAT_PATH,
                      headers=exc.headers)  # e.g. a 405's Allow

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400 if "malformed" in _first_error(exc) else 422, _first_error(exc),
                      openai=request.url.path == CHAT_PATH)

    @app.middleware("http")
    async def _guard(request: Request, call_next):  # noqa: ANN001, ANN202
        if request.method == "POST":
            length = request.headers.get("content-length")
            if length is not None and int(length) > max_body:
                return _error(413, f"body larger than {max_body} bytes")
            body = await request.body()
            if len(body) > max_body:
                return _error(413, f"body larger than {max_body} bytes")
        key = os.environ.get(key_env) if key_env else None
        if key and request.url.path.startswith("/v1/"):
            bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not (_same(bearer, key) or _same(request.headers.get("x-api-key", ""), key)):
                return _error(401, "missing or wrong API key")
        return await call_next(request)

    return app


async def _call(orchs: Orchestrators, method: str, *args: object) -> dict:
    """Call the active orchestrator. Its death or restart mid-query is a retryable 503 (the
    query was lost with it; Ray restarts the actor) and makes the standby active for the next
    queries; any other failure a JSON 500 with one line."""
    i, ref = orchs.submit(method, *args)
    try:
        return await ref
    except ray.exceptions.RayActorError:  # died, restarting or unreachable
        orchs.failed(i)
        return {"http_status": 503, "retry_after": 2,
                "error": "the orchestrator restarted; this query did not complete: retry it"}
    except Exception as e:  # noqa: BLE001 - reported to the client and in the replica log
        cause = getattr(e, "cause", None) or e
        first = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
        return {"http_status": 500, "error": f"internal error: {type(cause).__name__}: {first}"}


def _reply(out: dict, openai: bool = False) -> JSONResponse:
    status = out.pop("http_status", 200)
    if status >= 400:
        return _error(status, out.get("error", "error"), out.get("retry_after"), openai)
    return JSONResponse(out, status_code=status)


def ingress_options(cfg: PoolConfig) -> dict:
    """The ingress deployment's Serve options: Serve itself bounds the requests in the ingress
    replica at ``max_inflight_queries`` and queues at most ``ingress_max_queued`` more in the
    HTTP proxy; past that the proxy answers 429 with ``Retry-After: 1`` at once (Serve's
    ``max_queued_requests`` backpressure), without a hop to a busy ingress replica. The proxy's
    router (``IngressRouter``) holds queries at the bound the replica's gate reports, the
    adaptive one under ``serving.adaptive_inflight``."""
    s = cfg.serving
    return {"max_ongoing_requests": s.max_inflight_queries,
            "max_queued_requests": s.ingress_max_queued,
            "request_router_config": ingress_router_config(
                s.metrics_period_s, IngressGate.start_limit(s.max_inflight_queries,
                                                            s.adaptive_inflight)),
            "backpressure_config": BackpressureConfig(status_code=429, retry_after_s=1),
            "ray_actor_options": {"num_cpus": 0.1}}


def make_ingress(cfg: PoolConfig):  # noqa: ANN201
    """The Serve ingress deployment class bound to this config's FastAPI app."""
    app = build_fastapi(cfg)
    lo, hi = cfg.serving.min_budget_s, cfg.serving.max_budget_s
    stamped = cfg.serving.request_start_header

    @serve.deployment(**ingress_options(cfg))
    @serve.ingress(app)
    class Api:
        def __init__(self) -> None:
            self.orch = Orchestrators.lookup(cfg.serving.standby_orchestrator)
            self.gate = IngressGate(cfg.engine.admission_margin,
                                    cfg.serving.max_inflight_queries,
                                    adaptive=cfg.serving.adaptive_inflight)
            self.shed = shed_counter()
            self.limit_gauge = ingress_limit_gauge()

        def record_routing_stats(self) -> dict:
            """The gate's bound, for the proxy's ``IngressRouter`` (every
            ``metrics_period_s``); the bound is exported as a gauge too."""
            limit = self.gate.limit()
            self.limit_gauge.set(limit)
            return {"limit": limit}

        def _refused(self, budget_s: float) -> dict | None:
            """The ingress gate (the one admission rule, ``serving/gate.py``): its 429 / 503
            answer, counted as shed, or None to admit."""
            refusal = self.gate.refusal(budget_s)
            if refusal is not None:
                self.shed.inc(tags={"reason": "ingress_saturated" if refusal["http_status"] == 503
                                    else "max_inflight_queries"})
            return refusal

        def _started(self, request: Request, budget_s: float) -> tuple[float | None, dict | None]:
            """(the query's start instant from ``X-Request-Start`` when
            ``serving.request_start_header``, else None; the gate's refusal for the budget left
            after the wait in front of the service, or None)."""
            now = time.time()
            start = request_start(request.headers.get(REQUEST_START), now) if stamped else None
            waited = 0.0 if start is None else now - start
            if waited >= budget_s:
                self.shed.inc(tags={"reason": "budget_spent_before_arrival"})
                return start, {"http_status": 503, "retry_after": 1, "error":
                               f"the query's budget ran out before it reached the service: it "
                               f"was sent {waited:.3g} s ago, budget {budget_s:g} s"}
            return start, self._refused(budget_s - waited)

        async def _query(self, payload: dict) -> dict:
            """An admitted query at the active orchestrator, counted in flight at the gate
            until it is answered, failed or abandoned."""
            started, out = self.gate.enter(), {}
            try:
                out = await _call(self.orch, "query", payload)
                return out
            finally:
                self.gate.leave(started, out)

        @app.get("/healthz")
        async def healthz(self) -> dict:
            """In the schema; the proxy sends ``/healthz`` to the health application
            (``serving/health.py``, the same answer), so overload never sheds it."""
            return {"status": "ok"}

        @app.get("/v1/state", responses=_errors(401))
        async def state(self) -> JSONResponse:
            out = await _call(self.orch, "state")
            if out.get("http_status", 200) < 400:
                out |= {"failovers": self.orch.failovers, "ingress_inflight": self.gate.inflight,
                        "ingress_limit": self.gate.limit()}
            return _reply(out)

        @app.post("/v1/queries", responses=_errors(400, 401, 404, 409, 413, 422, 429, 503))
        async def queries(self, body: QueryRequest, request: Request) -> JSONResponse:
            if (bad := _budget_error(body.budget_s, lo, hi)) is not None:
                return _error(422, bad)
            start, refusal = self._started(request, body.budget_s)
            if refusal is not None:
                return _reply(refusal)
            return _reply(await self._query(body.model_dump() | {"request_start": start}))

        @app.post("/v1/feedback", responses=_errors(400, 401, 404, 413, 422))
        async def feedback(self, body: FeedbackRequest) -> JSONResponse:
            return _reply(await _call(self.orch, "feedback", body.query_id, body.score))

        @app.get("/v1/policies", responses=_errors(401))
        async def policies(self) -> JSONResponse:
            return _reply(await _call(self.orch, "policies_list"))

        @app.post("/v1/policies/promote", responses=_errors(400, 401, 404, 409, 413, 422))
        async def promote(self, body: PolicyVersionRequired) -> JSONResponse:
            return _reply(await _call(self.orch, "policy_op", "promote", body.version))

        @app.post("/v1/policies/canary", responses=_errors(400, 401, 404, 409, 413, 422))
        async def canary(self, body: PolicyVersionRequired) -> JSONResponse:
            return _reply(await _call(self.orch, "policy_op", "canary", body.version))

        @app.post("/v1/policies/rollback", responses=_errors(401, 409, 413))
        async def rollback(self) -> JSONResponse:
            return _reply(await _call(self.orch, "policy_op", "rollback"))

        @app.post("/v1/policies/pin", responses=_errors(400, 401, 404, 409, 413, 422))
        async def pin(self, body: PolicyVersionRequest) -> JSONResponse:
            """Pin a version (``{}``: the active one); a pinned version is never replaced
            automatically."""
            return _reply(await _call(self.orch, "policy_op", "pin", body.version))

        @app.post("/v1/policies/unpin", responses=_errors(401, 413))
        async def unpin(self) -> JSONResponse:
            return _reply(await _call(self.orch, "policy_op", "unpin"))

        @app.post("/v1/grade", responses=_errors(400, 401, 404, 413, 422))
        async def grade(self, body: GradeRequest) -> JSONResponse:
            return _reply(await _call(self.orch, "grade", body.model_dump()))

        @app.post(CHAT_PATH, responses={**SSE_OK, **_errors(400, 401, 404, 413, 422, 429, 503)})
        async def chat(self, body: ChatRequest, request: Request) -> JSONResponse:
            if (bad := _budget_error(body.budget_s, lo, hi)) is not None:
                return _error(422, bad, openai=True)
            if body.model != "inframind":
                return _error(404, f"model {body.model!r} not found; use 'inframind'",
                              openai=True)
            try:
                text = conversation(body.messages)
                payload = QueryRequest(query=text[-MAX_QUERY_CHARS:], item_id=body.item_id,
                                       budget_s=body.budget_s, task=body.task,
                                       reference=body.reference, policy=body.policy)
            except (ValueError, ValidationError) as e:
                msg = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
                return _error(422, str(msg).removeprefix("Value error, "), openai=True)
            start, refusal = self._started(request, body.budget_s)  # before any stream
            if refusal is not None:
                return _reply(refusal, openai=True)
            answer = asyncio.ensure_future(self._query(payload.model_dump()
                                                       | {"request_start": start}))
            if body.stream:
                usage = bool(body.stream_options and body.stream_options.include_usage)
                return StreamingResponse(stream(answer, usage), media_type="text/event-stream",
                                         headers={"cache-control": "no-cache"})
            out = await answer
            if out.get("http_status", 200) >= 400:
                return _reply(out, openai=True)
            return JSONResponse(completion(out))

    return Api
