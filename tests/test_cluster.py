"""Multi-node: cluster.yaml validates offline; ``serve deploy`` of the generated Serve config on a
real two-node ray.cluster_utils.Cluster answers, and model deployments land on the nodes their
custom resources name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
import json, os, subprocess, sys, time, urllib.request
from pathlib import Path
import ray, yaml
from ray import serve
from ray.cluster_utils import Cluster
from inframind_ray.config import PoolConfig
from inframind_ray.serving.deploy import serve_config

tmp, dash, port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 2, "include_dashboard": True, "dashboard_port": dash,
    "dashboard_host": "127.0.0.1"})
a = cluster.add_node(num_cpus=2, resources={"node_a": 1})
b = cluster.add_node(num_cpus=2, resources={"node_b": 1})
cluster.wait_for_nodes()
model = lambda name, res: {"name": name, "recorded": "Yi-34B", "profile": "llama2-70b@h100x4",
    "gpus_per_replica": 2, "engine": {"kind": "echo"}, "max_num_seqs": 8,
    "ray_actor_options": {"num_cpus": 0.1, "resources": {res: 0.1}}}
cfg = PoolConfig.model_validate({"name": "two-node", "models": [model("m_a", "node_a"),
    model("m_b", "node_b")], "serving": {"port": port, "embed": False,
    "records_dir": str(tmp / "records"), "registry_dir": str(tmp / "policies"),
    "metrics_export_port": None, "default_policy": "infra-heuristic"}})
(tmp / "serve.yaml").write_text(yaml.safe_dump(serve_config(cfg), sort_keys=False))
t0 = time.monotonic()
r = subprocess.run([str(Path(sys.executable).parent / "serve"), "deploy", str(tmp / "serve.yaml"),
                    "-a", f"http://127.0.0.1:{dash}"], capture_output=True, text=True, timeout=240)
assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
answer, end = None, time.monotonic() + 240
body = json.dumps({"query": "hello from serve deploy", "budget_s": 60}).encode()
while answer is None and time.monotonic() < end:
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/queries", data=body,
                                     method="POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
    except Exception:  # not up yet: refused, 404 or 503
        time.sleep(0.5)
ray.init(address=cluster.address, log_to_driver=False)
where = {m: serve.get_deployment_handle(f"model:{m}", f"model:{m}").where.remote().result()
         for m in ("m_a", "m_b")}
print("RESULT " + json.dumps({"where": where, "node_a": a.node_id, "node_b": b.node_id,
                  "answer": answer, "deploy_to_answer_s": round(time.monotonic() - t0, 1)}))
serve.shutdown(); ray.shutdown(); cluster.shutdown()
"""


def test_serve_deploy_on_two_nodes_places_by_custom_resource(tmp_path):
    """The generated Serve config (``inframind serve-config``'s ``serve_config``), deployed with
    Serve's own CLI (``serve deploy``) on a real two-node cluster with its dashboard, brings the
    pool up and answers a query over HTTP; each model's replica runs on the node whose custom
    resource it asks for."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), "8769", "8766"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line.removeprefix("RESULT "))
    assert out["answer"] is not None, "no answer within 240 s of serve deploy"
    assert out["answer"]["status"] == "ok" and out["answer"]["text"], out["answer"]
    assert out["where"]["m_a"]["node_id"] == out["node_a"]
    assert out["where"]["m_b"]["node_id"] == out["node_b"]
    assert out["node_a"] != out["node_b"]


LEARN_SCRIPT = r"""
import json, subprocess, sys
from pathlib import Path
from ray.cluster_utils import Cluster

tmp = Path(sys.argv[1])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
node = cluster.add_node(num_cpus=1, resources={"learner_node": 1})
cluster.wait_for_nodes()
try:
    r = subprocess.run([str(Path(sys.executable).parent / "inframind"), "learn",
                        "-c", str(tmp / "continual.yaml"), "--out", str(tmp / "out"),
                        "--iterations", "1", "--address", cluster.address],
                       capture_output=True, text=True, timeout=420)
    print("RESULT " + json.dumps({"rc": r.returncode, "tail": (r.stdout + r.stderr)[-3000:],
                                  "head": cluster.head_node.node_id, "node": node.node_id}))
finally:
    cluster.shutdown()
"""


@pytest.mark.slow  # a two-node cluster, the CLI, one RLlib algorithm with a learner actor
def test_learner_joins_a_two_node_cluster_and_updates_on_the_named_node(tmp_path):
    """``inframind learn --address`` joins a running two-node cluster (as on a ``ray up`` head
    node) instead of starting a Ray of its own; with ``ppo.num_learners`` 1 and a custom
    resource only the second node offers, the PPO update runs in a learner actor on that node;
    the driver reads the rollouts from the shared records folder, the candidate is registered
    with trained weights and its rollouts acknowledged."""
    import torch
    from live_data import live_deployment, serve_queries, shipped_policy

    from inframind_ray.learning.rollout_reader import Ledger

    served = shipped_policy()
    rec, reg, dep = live_deployment(tmp_path, served)
    written = serve_queries(rec, served, 0, 30)  # finished and flushed
    (tmp_path / "continual.yaml").write_text(yaml.safe_dump({
        "deployment": str(dep), "min_age_s": 0, "max_age_s": None,
        "wait_s": 0.1, "give_up_after_s": 60,
        "ppo": {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "lr": 1e-3,
                "num_learners": 1, "learner_resources": {"learner_node": 1}}}))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", LEARN_SCRIPT, str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(x for x in r.stdout.splitlines()
                          if x.startswith("RESULT ")).removeprefix("RESULT "))
    assert out["rc"] == 0, out["tail"]
    assert "candidate v0002" in out["tail"]
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["candidate"] for r in rows] == ["v0002"]
    assert rows[0]["learner_nodes"] == [out["node"]] and out["node"] != out["head"]
    trained, seed = reg.check("v0002", served[0]), reg.check("v0001", served[0])
    assert not torch.equal(trained.executor.v[0].weight, seed.executor.v[0].weight)
    acked = Ledger(tmp_path / "out" / "ledger.json").acked
    assert len(acked) == rows[0]["acknowledged"] > 0 and acked <= set(written)
    assert reg.state().active == "v0001"
