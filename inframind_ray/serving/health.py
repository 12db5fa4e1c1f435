"""``GET /healthz`` in an application of its own, so overload never sheds the health check.

Serve's HTTP proxy refuses every request for an application with 429 once that application's
queue in the proxy is full (``ingress_max_queued``), whatever its route: under overload the
ingress's own ``/healthz`` would fail with the queries, and a load balancer or a Kubernetes
readiness probe would take a saturated but working service out of rotation (all of it at
once, since every replica saturates together). This application holds only the health route
(``route_prefix`` ``/healthz``, the proxy's longest prefix match), with its own queue and
replica, so it answers while the ingress refuses.

It answers 503 ``starting`` until it has once seen the ingress application ``RUNNING``
(``serve.status()``, asked at most once a second), then 200 for as long as it runs: readiness at
start, liveness after. Serve's proxy answers ``/-/healthz`` itself (the proxy only).
"""

from __future__ import annotations

import asyncio
import time

from ray import serve
from ray.serve.schema import ApplicationStatus
from starlette.requests import Request
from starlette.responses import JSONResponse

HEALTH_APP = "inframind-health"
HEALTH_PATH = "/healthz"
_ASK_EVERY_S = 1.0


@serve.deployment(name="Health", num_replicas=1, max_ongoing_requests=256,
                  ray_actor_options={"num_cpus": 0.05})
class Health:
    """The health route; ``ingress_app``: the name of the application it vouches for."""

    def __init__(self, ingress_app: str) -> None:
        self.ingress_app = ingress_app
        self.ready = False
        self._asked = -_ASK_EVERY_S

    async def _ingress_running(self) -> bool:
        """Whether the ingress application has reached ``RUNNING`` (cached once it has).
        ``serve.status()`` blocks on the controller, so it runs on a worker thread."""
        now = time.monotonic()
        if not self.ready and now - self._asked >= _ASK_EVERY_S:
            self._asked = now
            status = await asyncio.to_thread(serve.status)
            app = status.applications.get(self.ingress_app)
            self.ready = app is not None and app.status == ApplicationStatus.RUNNING
        return self.ready

    async def __call__(self, request: Request) -> JSONResponse:
        """200 ``ok`` once the ingress has run; 503 ``starting`` before; 405 for other methods."""
        if request.method not in ("GET", "HEAD"):
            return JSONResponse({"error": f"method {request.method} not allowed on /healthz"},
                                status_code=405, headers={"Allow": "GET, HEAD"})
        if not await self._ingress_running():
            return JSONResponse({"status": "starting"}, status_code=503,
                                headers={"Retry-After": "1"})
        return JSONResponse({"status": "ok"})
