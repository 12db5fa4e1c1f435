"""Build the engine a pool model's config names (imports each backend lazily)."""

from __future__ import annotations

import os

from inframind_ray.config import ModelConfig, PoolConfig
from inframind_ray.serving.engines.base import Engine


def make_engine(model: ModelConfig, pool: PoolConfig) -> Engine:
    """Build the engine a pool model's config names."""
    spec = model.engine
    if spec.kind == "twin":
        from inframind_ray.serving.engines.twin import WallClockTwinEngine

        return WallClockTwinEngine(model, spec, pool.engine.scheduling,
                                   pool.engine.max_batched_tokens)
    if spec.kind == "echo":
        from inframind_ray.serving.engines.twin import EchoEngine

        return EchoEngine()
    if spec.kind == "openai":
        from inframind_ray.serving.engines.openai_remote import OpenAIEngine

        return OpenAIEngine(spec)
    if spec.kind == "vllm":
        for k, v in spec.env.items():
            os.environ.setdefault(k, v)
        from inframind_ray.serving.engines.vllm_engine import VLLMEngine

        return VLLMEngine.from_spec(model, spec, pool.engine.scheduling)
    raise ValueError(f"unknown engine kind {spec.kind!r}")

