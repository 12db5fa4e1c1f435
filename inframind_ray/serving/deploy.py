"""Serve's own config files for a pool: application builders that ``serve deploy`` / ``serve run``
import, and the generator of the file (``inframind serve-config``).

The generated file has one application per model (``model:<name>``, no HTTP route), the
ingress application (``inframind``, route ``/``) and the health route's (``inframind-health``,
route ``/healthz``, ``serving/health.py``). Each application's ``args`` carry the whole
validated pool, so the file is self-contained; its ``deployments`` section repeats the settings
an operator edits (replicas, Ray resources) where Serve's own tooling expects them. The
ingress builder creates the orchestrator (and its warm standby) as detached named actors when
none runs.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from inframind_ray.config import PoolConfig
from inframind_ray.serving.api import make_ingress
from inframind_ray.serving.app import health_app as _health_app
from inframind_ray.serving.app import model_deployment, orchestrator_actor
from inframind_ray.serving.failover import STANDBY
from inframind_ray.serving.health import HEALTH_APP, HEALTH_PATH
from inframind_ray.serving.orchestrator import APP_NAME
from inframind_ray.serving.replica import deployment_name

MODULE = __name__


def _pool(args: dict[str, Any]) -> PoolConfig:
    if "pool" not in args:
        raise ValueError("the application's args need 'pool' (a validated pool config)")
    return PoolConfig.model_validate(args["pool"])


def model_app(args: dict[str, Any]) -> Application:
    """Builder of one model's application: ``args`` = {pool, model}."""
    cfg = _pool(args)
    name = args.get("model")
    model = next((m for m in cfg.models if m.name == name), None)
    if model is None:
        raise ValueError(f"model {name!r} is not in pool {cfg.name!r}")
    return model_deployment(model, cfg)


def ingress_app(args: dict[str, Any]) -> Application:
    """Builder of the HTTP ingress; starts the orchestrator (detached) if none runs."""
    cfg = _pool(args)
    orchestrator_actor(cfg, detached=True)
    if cfg.serving.standby_orchestrator:
        orchestrator_actor(cfg, detached=True, name=STANDBY)
    return make_ingress(cfg).bind()


def health_app(args: dict[str, Any]) -> Application:
    """Builder of the health route (``args`` unused: it needs no pool)."""
    return _health_app()


def serve_config(cfg: PoolConfig) -> dict[str, Any]:
    """Serve's config (``ServeDeploySchema``) for a pool."""
    pool = cfg.model_dump(mode="json")
    s = cfg.serving
    apps: list[dict[str, Any]] = [{
        "name": deployment_name(m.name), "route_prefix": None,
        "import_path": f"{MODULE}:model_app", "args": {"pool": pool, "model": m.name},
        "deployments": [{"name": deployment_name(m.name), "num_replicas": m.replicas,
                         "max_ongoing_requests": m.max_num_seqs + m.max_queue + 64,
                         "ray_actor_options": m.ray_actor_options}],
    } for m in cfg.models]
    apps.append({"name": APP_NAME, "route_prefix": "/", "import_path": f"{MODULE}:ingress_app",
                 "args": {"pool": pool}})
    apps.append({"name": HEALTH_APP, "route_prefix": HEALTH_PATH,
                 "import_path": f"{MODULE}:health_app", "args": {}})
    return {"proxy_location": s.proxy_location,
            "http_options": {"host": s.host, "port": s.port},
            "applications": apps}
