"""Pool configuration (YAML) validated at load with pydantic; errors name the field."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.errors import ConfigError

POOLS_DIR = Path(str(resources.files("inframind_ray") / "pools"))


class EngineConfig(BaseModel):
    """How every replica of the pool schedules."""

    model_config = ConfigDict(extra="forbid")
    scheduling: Literal["edf", "fcfs"] = Field("edf", description="waiting-queue order")
    on_deadline: Literal["abort", "continue"] = Field(
        "abort", description="abort an agent call when its query's deadline passes, or let it run"
    )
    max_batched_tokens: int = Field(8192, gt=0, description="prefill token budget per iteration")


class ModelConfig(BaseModel):
    """One pool model: which recorded answers it replays and which measured profile it runs on."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="pool model name used by policies and results")
    recorded: str = Field(description="recorded MMLU-Pro model whose answers it replays")
    profile: str = Field(description="measured iteration-time profile key (profiles.json)")
    gpu: str = Field("H100-80GB", description="GPU type of each replica")
    gpus_per_replica: int = Field(1, ge=1, le=16)
    replicas: int = Field(1, ge=1, le=64)
    max_num_seqs: int = Field(32, ge=1, le=1024)
    kv_capacity_tokens: int | None = Field(None, gt=0, description="override the derived KV size")

    @field_validator("recorded")
    @classmethod
    def _known_recorded(cls, v: str) -> str:
        known = data.outcomes().keys()
        if v not in known:
            raise ValueError(f"unknown recorded model {v!r}; known: {', '.join(sorted(known))}")
        return v

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        known = data.profiles()["profiles"]
        if v not in known:
            raise ValueError(f"unknown profile {v!r}; known: {', '.join(sorted(known))}")
        return v

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        if v not in A.GPU_MEMORY_GB:
            raise ValueError(f"unknown gpu {v!r}; known: {', '.join(A.GPU_MEMORY_GB)}")
        return v


class PoolConfig(BaseModel):
    """A served model pool."""

    model_config = ConfigDict(extra="forbid")
    name: str = "pool"
    description: str = ""
    engine: EngineConfig = EngineConfig()
    models: list[ModelConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> PoolConfig:
        names = [m.name for m in self.models]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate model names: {', '.join(sorted(dup))}")
        return self


def resolve_pool_path(pool: str | Path) -> Path:
    """A path, or the name of a shipped pool (``default`` -> inframind_ray/pools/default.yaml)."""
    p = Path(pool)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    return POOLS_DIR / f"{pool}.yaml"


def _loc(err: dict) -> str:
    return ".".join(str(x) for x in err["loc"])


def load_pool(pool: str | Path) -> PoolConfig:
    """Load and validate a pool file; raise ConfigError naming the first bad field."""
    path = resolve_pool_path(pool)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in POOLS_DIR.glob("*.yaml")))
        raise ConfigError("pool", f"no pool file {str(pool)!r} (shipped pools: {shipped})")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError("pool", f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError("pool", f"{path}: expected a mapping at the top level")
    try:
        return PoolConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"pool.{_loc(err)}" if err["loc"] else "pool", msg) from None
