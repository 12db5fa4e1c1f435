"""A KubeRay ``RayService`` manifest for a pool, built from the same Serve config as
``inframind serve-config`` (``serveConfigV2``) and a Ray cluster sized from the pool.

Worker groups follow the pool's placement: every custom resource a model's replicas ask for
(``ray_actor_options.resources``, e.g. ``h100_node``) becomes a worker group whose pods carry
that resource, sized by the GPUs its models need; models with no custom resource share a
``gpu`` group (or a ``cpu`` group when they need no GPU). The head runs the orchestrator and the
HTTP proxy and no model replica (``num-cpus`` left to Ray; no GPUs).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import yaml

from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.serving.deploy import serve_config

RAY_VERSION = "2.60.0"


def gpus_needed(model: ModelConfig) -> float:
    """GPUs of one replica: its actor's ``num_gpus``, or a vLLM engine's tensor x pipeline
    parallel workers (placed by vLLM's Ray executor, outside the replica actor)."""
    n = float(model.ray_actor_options.get("num_gpus", 0))
    if model.engine.kind == "vllm":
        kw = model.engine.engine_kwargs
        par = int(kw.get("tensor_parallel_size", 1)) * int(kw.get("pipeline_parallel_size", 1))
        if par > 1:
            n = max(n, float(par))
    return n


def _group_of(model: ModelConfig) -> str:
    res = sorted((model.ray_actor_options.get("resources") or {}).keys())
    if res:
        return res[0]
    return "gpu" if gpus_needed(model) else "cpu"


def worker_groups(cfg: PoolConfig) -> dict[str, dict[str, float]]:
    """Per worker group: GPUs and CPUs its models' replicas need."""
    need: dict[str, dict[str, float]] = defaultdict(lambda: {"gpus": 0.0, "cpus": 0.0})
    for m in cfg.models:
        g = need[_group_of(m)]
        g["gpus"] += m.replicas * gpus_needed(m)
        g["cpus"] += m.replicas * float(m.ray_actor_options.get("num_cpus", 1))
    return dict(need)


def _container(image: str, cpus: float, memory: str, gpus: int) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": str(max(1, math.ceil(cpus))), "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {"name": "ray", "image": image, "resources": {"limits": limits, "requests": limits}}


def rayservice(cfg: PoolConfig, *, name: str, image: str, gpus_per_node: int = 8,
               cpus_per_node: int = 32, memory_per_node: str = "256Gi") -> dict[str, Any]:
    """The ``RayService`` (``ray.io/v1``) manifest."""
    if gpus_per_node < 1 or cpus_per_node < 1:
        raise ValueError("gpus_per_node and cpus_per_node must be at least 1")
    groups = []
    for group, need in sorted(worker_groups(cfg).items()):
        gpu = need["gpus"] > 0
        nodes = max(1, math.ceil(need["gpus"] / gpus_per_node) if gpu
                    else math.ceil(need["cpus"] / cpus_per_node))
        params: dict[str, str] = {}
        if group not in ("gpu", "cpu"):
            params["resources"] = json.dumps({group: 1})
        groups.append({
            "groupName": group.replace("_", "-"), "replicas": nodes, "minReplicas": nodes,
            "maxReplicas": nodes, "rayStartParams": params,
            "template": {"spec": {"containers": [_container(
                image, cpus_per_node, memory_per_node, gpus_per_node if gpu else 0)]}},
        })
    serve = serve_config(cfg)
    serve["http_options"] = {"host": "0.0.0.0", "port": cfg.serving.port}  # the pod's interface
    serve_yaml = yaml.safe_dump(serve, sort_keys=False)
    return {
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "inframind-ray",
                                              "inframind.io/pool": cfg.name}},
        "spec": {
            "serveConfigV2": serve_yaml,
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                    "template": {"spec": {"containers": [{
                        **_container(image, 8, "32Gi", 0),
                        "ports": [{"containerPort": 6379, "name": "gcs"},
                                  {"containerPort": 8265, "name": "dashboard"},
                                  {"containerPort": 10001, "name": "client"},
                                  {"containerPort": cfg.serving.port, "name": "serve"}],
                    }]}},
                },
                "workerGroupSpecs": groups,
            },
        },
    }
