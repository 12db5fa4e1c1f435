"""Pool configuration (YAML) validated at load with pydantic; errors name the field. One module
per part: ``engine`` (scheduling, engine kinds), ``model`` (a pool model), ``serving`` (the Ray
Serve side), ``pool`` (the whole pool's checks), ``files`` (finding, reading, extending and
validating pool and deployment files)."""

from inframind_ray.config.engine import (
    EchoEngineSpec,
    EngineConfig,
    EngineSpec,
    OpenAIEngineSpec,
    TwinEngineSpec,
    VLLMEngineSpec,
)
from inframind_ray.config.files import (
    POOLS_DIR,
    load_pool,
    read_yaml,
    read_yaml_extending,
    resolve_pool_path,
    shipped_pools,
    validated,
)
from inframind_ray.config.model import ModelConfig
from inframind_ray.config.pool import PoolConfig
from inframind_ray.config.serving import (
    AdaptiveInflightConfig,
    CanaryConfig,
    RolloutConfig,
    ServingConfig,
)

__all__ = ["POOLS_DIR", "AdaptiveInflightConfig", "CanaryConfig", "EchoEngineSpec", "EngineConfig",
           "EngineSpec", "ModelConfig", "OpenAIEngineSpec", "PoolConfig", "RolloutConfig",
           "ServingConfig", "TwinEngineSpec", "VLLMEngineSpec", "load_pool", "read_yaml",
           "read_yaml_extending", "resolve_pool_path", "shipped_pools", "validated"]
