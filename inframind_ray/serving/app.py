"""Start and stop the serving plane on a local or existing Ray cluster."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import ray
from ray import serve
from ray.serve import Application
from ray.serve.api import RunTarget

from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.serving.api import make_ingress
from inframind_ray.serving.failover import STANDBY
from inframind_ray.serving.health import HEALTH_APP, HEALTH_PATH, Health
from inframind_ray.serving.orchestrator import APP_NAME, Orchestrator
from inframind_ray.serving.ray_address import join
from inframind_ray.serving.replica import NAMESPACE, ORCHESTRATOR, ModelReplica, deployment_name
from inframind_ray.serving.router import router_config


@dataclass
class Session:
    """A running deployment of a pool: one Serve application per model (``model:<name>``), the
    HTTP ingress application and the health route's (``serving/health.py``), so a model can be
    added or removed while the pool serves."""

    cfg: PoolConfig
    orchestrator: ray.actor.ActorHandle
    url: str
    started_ray: bool
    standby: ray.actor.ActorHandle | None = None

    @property
    def orchestrators(self) -> list[ray.actor.ActorHandle]:
        """The orchestrator and its warm standby (when it runs)."""
        return [self.orchestrator, *([self.standby] if self.standby is not None else [])]

    def add_model(self, model: ModelConfig, wait_s: float = 300.0) -> None:
        """Deploy one more model and, once its replicas run and report, put it in the
        orchestrator's pool (policies see it from the next decision on)."""
        if model.name in {m.name for m in self.cfg.models}:
            raise ValueError(f"model {model.name!r} is already in the pool")
        cfg = self.cfg.model_copy(update={"models": [*self.cfg.models, model]})
        serve.run_many([_model_target(model, cfg)])
        ray.get([o.set_pool.remote(cfg.model_dump()) for o in self.orchestrators])
        self.cfg = cfg
        _wait_reports(self.orchestrator, wait_s)

    def replace_model(self, model: ModelConfig, wait_s: float = 300.0) -> None:
        """Redeploy a model of the pool with a new config (replicas, engine): Serve rolls its
        replicas over; the orchestrator's pool takes the new card from the next decision."""
        if model.name not in {m.name for m in self.cfg.models}:
            raise ValueError(f"model {model.name!r} is not in the pool")
        cfg = self.cfg.model_copy(update={"models": [model if m.name == model.name else m
                                                     for m in self.cfg.models]})
        serve.run_many([_model_target(model, cfg)])
        ray.get([o.set_pool.remote(cfg.model_dump()) for o in self.orchestrators])
        self.cfg = cfg
        _wait_reports(self.orchestrator, wait_s)

    def remove_model(self, name: str, drain_s: float = 30.0) -> None:
        """Take a model out of the orchestrator's pool first (no new decisions route to it),
        let the calls already sent finish (at most ``drain_s``), then delete its application."""
        left = [m for m in self.cfg.models if m.name != name]
        if len(left) == len(self.cfg.models):
            raise ValueError(f"model {name!r} is not in the pool")
        if not left:
            raise ValueError("cannot remove the pool's last model")
        cfg = self.cfg.model_copy(update={"models": left})
        ray.get([o.set_pool.remote(cfg.model_dump()) for o in self.orchestrators])
        self.cfg = cfg
        handle = serve.get_deployment_handle(deployment_name(name), deployment_name(name))
        end = time.time() + drain_s
        while time.time() < end:
            snap = handle.snapshot.remote().result(timeout_s=10)
            if snap.waiting == 0 and snap.running == 0:
                break
            time.sleep(0.2)
        serve.delete(deployment_name(name))

    def stop(self) -> None:
        """Flush records, delete the apps and the orchestrator; shut Ray down if we started it."""
        with contextlib.suppress(Exception):  # best effort on the way out
            ray.get([o.flush_records.remote() for o in self.orchestrators], timeout=30)
        serve.delete(HEALTH_APP)
        serve.delete(APP_NAME)
        for m in self.cfg.models:
            serve.delete(deployment_name(m.name))
        for o in self.orchestrators:
            ray.kill(o)
        if self.started_ray:
            serve.shutdown()
            ray.shutdown()


def init_ray(address: str | None = None, num_cpus: int | None = None,
             metrics_export_port: int | None = None) -> bool:
    """Connect to ``address`` (or $RAY_ADDRESS), else start a local cluster (its Prometheus
    endpoint on ``metrics_export_port`` when given). True if started."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        join(address, namespace=NAMESPACE, log_to_driver=False)
        return False
    extra = {} if metrics_export_port is None else {"_metrics_export_port": metrics_export_port}
    ray.init(num_cpus=num_cpus or max(8, os.cpu_count() or 1), include_dashboard=False,
             namespace=NAMESPACE, log_to_driver=False, **extra)
    return True


def start(cfg: PoolConfig, *, address: str | None = None, wait_s: float = 300.0) -> Session:
    """Deploy the pool: orchestrator actor, one deployment per model, the HTTP ingress, then
    the health route (so ``/healthz`` answers once the rest is up)."""
    started = init_ray(address, metrics_export_port=cfg.serving.metrics_export_port)
    s = cfg.serving
    orch = orchestrator_actor(cfg, detached=False)
    standby = (orchestrator_actor(cfg, detached=False, name=STANDBY)
               if s.standby_orchestrator else None)
    serve.start(http_options={"host": s.host, "port": s.port}, proxy_location=s.proxy_location)
    serve.run_many([*(_model_target(m, cfg) for m in cfg.models),
                    RunTarget(make_ingress(cfg).bind(), name=APP_NAME, route_prefix="/")])
    serve.run(health_app(), name=HEALTH_APP, route_prefix=HEALTH_PATH)
    ray.get([o.ready.remote() for o in (orch, standby) if o is not None], timeout=wait_s)
    for o in (orch, standby):
        if o is not None:
            _wait_reports(o, wait_s)
    return Session(cfg, orch, f"http://{s.host}:{s.port}", started, standby)


def orchestrator_actor(cfg: PoolConfig, detached: bool,
                       name: str = ORCHESTRATOR) -> ray.actor.ActorHandle:
    """The named orchestrator actor (``name``: the active one's, or the standby's,
    ``serving/failover.py``), created if it does not exist (``detached``: it outlives the
    process that creates it, as under ``serve deploy``).

    Ray restarts it when it dies (``serving.orchestrator_max_restarts``); it rebuilds its load
    view from the replicas' next pushes. Its in-flight queries are not retried
    (``max_task_retries`` 0): the ingress answers them 503 with Retry-After, since a query may
    already have run agent calls. No runtime_env (tracing's mode is an argument), so a restart
    can take a prestarted worker."""
    s = cfg.serving
    return ray.remote(Orchestrator).options(
        name=name, namespace=NAMESPACE, get_if_exists=detached, max_concurrency=10_000,
        num_cpus=s.orchestrator_num_cpus, lifetime="detached" if detached else None,
        max_restarts=s.orchestrator_max_restarts, max_task_retries=0,
    ).remote(cfg.model_dump(mode="json"), otel=os.environ.get("INFRAMIND_OTEL"))


def health_app() -> Application:
    """The health route's application (``serving/health.py``), vouching for the ingress."""
    return Health.bind(APP_NAME)


def model_deployment(model: ModelConfig, cfg: PoolConfig) -> Application:
    """One model's Serve application: its deployment, bound to its config (no HTTP route; the
    orchestrator calls it by handle)."""
    return ModelReplica.options(
        name=deployment_name(model.name), num_replicas=model.replicas,
        ray_actor_options=model.ray_actor_options,
        max_ongoing_requests=model.max_num_seqs + model.max_queue + 64,
        request_router_config=router_config(cfg.serving.metrics_period_s),
    ).bind(model.model_dump(mode="json"), cfg.model_dump(mode="json"))


def _model_target(model: ModelConfig, cfg: PoolConfig) -> RunTarget:
    """A model's application, named as its deployment, with no HTTP route."""
    return RunTarget(model_deployment(model, cfg), name=deployment_name(model.name),
                     route_prefix=None)


def _wait_reports(orch: ray.actor.ActorHandle, wait_s: float) -> None:
    """Wait until every model of the orchestrator's pool has pushed metrics once."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        st = ray.get(orch.state.remote())
        if all(v["age_s"] is not None for v in st["models"].values()):
            return
        time.sleep(0.2)
