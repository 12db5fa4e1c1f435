"""Multi-node: cluster.yaml validates offline; model deployments land on the nodes their custom
resources name (a real two-node ray.cluster_utils.Cluster)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from inframind_ray.config import load_pool

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_yaml_validates():
    """cluster.yaml passes Ray's own schema and defaults, and offers every pinned resource."""
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    cfg = prepare_config(raw)
    validate_config(cfg)
    offered = {r for t in cfg["available_node_types"].values() for r in t.get("resources", {})}
    for name in ("vllm_gpu_pool.yaml", "twin_pool.yaml", "vllm_cpu_pool.yaml", "echo_pool.yaml"):
        pool = load_pool(ROOT / "deployments" / name)
        if name == "vllm_gpu_pool.yaml":
            for m in pool.models:
                assert set(m.ray_actor_options.get("resources", {})) <= offered, m.name
    assert any("pip install" in c and "inframind" in c for c in cfg["setup_commands"])


SCRIPT = r"""
import json, sys
import ray
from ray import serve
from ray.cluster_utils import Cluster
from inframind_ray.config import PoolConfig
from inframind_ray.serving.app import start

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
a = cluster.add_node(num_cpus=2, resources={"node_a": 1})
b = cluster.add_node(num_cpus=2, resources={"node_b": 1})
cluster.wait_for_nodes()
model = lambda name, res: {"name": name, "recorded": "Yi-34B", "profile": "llama2-70b@h100x4",
    "gpus_per_replica": 2, "engine": {"kind": "echo"}, "max_num_seqs": 8,
    "ray_actor_options": {"num_cpus": 0.1, "resources": {res: 0.1}}}
cfg = PoolConfig.model_validate({"name": "two-node", "models": [model("m_a", "node_a"),
    model("m_b", "node_b")], "serving": {"port": 8766, "embed": False,
    "records_dir": sys.argv[1]}})
s = start(cfg, address=cluster.address)
where = {m: serve.get_deployment_handle(f"model:{m}", f"model:{m}").where.remote().result()
         for m in ("m_a", "m_b")}
state = ray.get(s.orchestrator.state.remote())["models"]
print("RESULT " + json.dumps({"where": where, "node_a": a.node_id, "node_b": b.node_id,
                  "state_nodes": {m: v["replica_nodes"] for m, v in state.items()}}))
s.stop(); serve.shutdown(); ray.shutdown(); cluster.shutdown()
"""


def test_two_node_placement_by_custom_resource(tmp_path):
    """Each model's replica runs on the node whose custom resource it asks for."""
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["where"]["m_a"]["node_id"] == out["node_a"]
    assert out["where"]["m_b"]["node_id"] == out["node_b"]
    assert out["node_a"] != out["node_b"]
    assert out["state_nodes"]["m_a"] == [out["node_a"]]
