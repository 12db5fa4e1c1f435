"""Start and stop the serving plane on a local or existing Ray cluster."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import ray
from ray import serve

from inframind_ray.config import PoolConfig
from inframind_ray.serving.api import make_ingress
from inframind_ray.serving.orchestrator import APP_NAME, Orchestrator
from inframind_ray.serving.replica import NAMESPACE, ORCHESTRATOR, ModelReplica, deployment_name
from inframind_ray.serving.router import router_config


@dataclass
class Session:
    """A running deployment of a pool."""

    cfg: PoolConfig
    orchestrator: ray.actor.ActorHandle
    url: str
    started_ray: bool

    def stop(self) -> None:
        """Flush records, delete the app and the orchestrator; shut Ray down if we started it."""
        with contextlib.suppress(Exception):  # best effort on the way out
            ray.get(self.orchestrator.flush_records.remote(), timeout=30)
        serve.delete(APP_NAME)
        ray.kill(self.orchestrator)
        if self.started_ray:
            serve.shutdown()
            ray.shutdown()


def init_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Connect to ``address`` (or $RAY_ADDRESS), else start a local cluster. True if started."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return False
    ray.init(num_cpus=num_cpus or max(8, os.cpu_count() or 1), include_dashboard=False,
             namespace=NAMESPACE, log_to_driver=False)
    return True


def start(cfg: PoolConfig, *, address: str | None = None, wait_s: float = 300.0) -> Session:
    """Deploy the pool: orchestrator actor, one deployment per model, the HTTP ingress."""
    started = init_ray(address)
    s = cfg.serving
    # Ray restarts a dead orchestrator (max_restarts); it rebuilds its load view from the
    # replicas' next pushes. Its in-flight queries are not retried (max_task_retries 0): the
    # ingress answers them 503 with Retry-After, since a query may already have run agent calls.
    # No runtime_env (tracing's mode is an argument): a restart can take a prestarted worker.
    orch = ray.remote(Orchestrator).options(
        name=ORCHESTRATOR, namespace=NAMESPACE, get_if_exists=False, max_concurrency=10_000,
        num_cpus=s.orchestrator_num_cpus, lifetime=None,
        max_restarts=s.orchestrator_max_restarts, max_task_retries=0,
    ).remote(cfg.model_dump(), otel=os.environ.get("INFRAMIND_OTEL"))
    serve.start(http_options={"host": s.host, "port": s.port}, proxy_location=s.proxy_location)
    models = [
        ModelReplica.options(name=deployment_name(m.name), num_replicas=m.replicas,
                             ray_actor_options=m.ray_actor_options,
                             max_ongoing_requests=m.max_num_seqs + m.max_queue + 64,
                             request_router_config=router_config(s.metrics_period_s))
        .bind(m.model_dump(), cfg.model_dump())
        for m in cfg.models
    ]
    ingress = make_ingress(cfg).bind(*models)
    serve.run(ingress, name=APP_NAME, route_prefix="/")
    ray.get(orch.ready.remote(), timeout=wait_s)
    deadline = time.time() + wait_s  # wait until every model has pushed metrics once
    while time.time() < deadline:
        st = ray.get(orch.state.remote())
        if all(v["age_s"] is not None for v in st["models"].values()):
            break
        time.sleep(0.2)
    return Session(cfg, orch, f"http://{s.host}:{s.port}", started)
