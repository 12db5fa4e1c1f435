"""A served model pool: its engine settings, serving settings and models, checked together."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inframind_ray.config.engine import EngineConfig
from inframind_ray.config.model import ModelConfig
from inframind_ray.config.serving import ServingConfig


class PoolConfig(BaseModel):
    """A served model pool."""

    model_config = ConfigDict(extra="forbid")
    name: str = "pool"
    description: str = ""
    engine: EngineConfig = EngineConfig()
    serving: ServingConfig = ServingConfig()
    models: list[ModelConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> PoolConfig:
        names = [m.name for m in self.models]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate model names: {', '.join(sorted(dup))}")
        return self

    @model_validator(mode="after")
    def _shared_gpus_fit(self) -> PoolConfig:
        """Models sharing a GPU (``gpu_ids``) have the same GPU type and memory shares that sum
        to at most 1.0 on it."""
        on: dict[int, list[ModelConfig]] = {}
        for m in self.models:
            for g in m.gpu_ids or ():
                on.setdefault(g, []).append(m)
        for g, ms in sorted(on.items()):
            if len({m.gpu for m in ms}) > 1:
                raise ValueError(f"GPU {g} is named by models of different GPU types: "
                                 + ", ".join(f"{m.name} ({m.gpu})" for m in ms))
            total = sum(m.memory_share for m in ms)
            if total > 1.0 + 1e-9:
                raise ValueError(f"GPU {g} is shared by {', '.join(m.name for m in ms)} whose "
                                 f"gpu_memory_utilization sums to {total:.2f} > 1.0")
        return self
