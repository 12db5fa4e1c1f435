"""The model catalog (``pools/catalog.yaml``): every recorded model a pool may be drawn from,
with the stand-ins that cover all task families and its nearest measured profile. Validated at
load: each entry is a valid pool model and replays records of every task family."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from inframind_ray.config import POOLS_DIR, ModelConfig, read_yaml, validated
from inframind_ray.data import TASK_FAMILIES
from inframind_ray.errors import ConfigError

CATALOG_PATH = POOLS_DIR / "catalog.yaml"


@dataclass(frozen=True)
class CatalogModel:
    """One catalog model: the fields a pool entry takes from it (hardware is the pool's)."""

    name: str
    recorded: str
    profile: str
    stand_ins: tuple[tuple[str, str], ...]

    def fields(self) -> dict:
        """The pool-entry fields (name, recorded, profile, stand_ins)."""
        return {"name": self.name, "recorded": self.recorded, "profile": self.profile,
                "stand_ins": dict(self.stand_ins)}


@lru_cache(maxsize=1)
def catalog() -> dict[str, CatalogModel]:
    """The catalog by model name, in file order; ConfigError naming a bad entry."""
    raw = read_yaml(CATALOG_PATH, "catalog")
    out = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"catalog.{name}", "expected a mapping")
        m = validated(ModelConfig, {"name": name, **entry}, f"catalog.{name}", str(CATALOG_PATH))
        missing = [f for f in TASK_FAMILIES if m.recorded_for(f) is None]
        if missing:
            raise ConfigError(f"catalog.{name}", f"no records or stand-in for {', '.join(missing)}")
        out[name] = CatalogModel(name, m.recorded, m.profile, tuple(sorted(m.stand_ins.items())))
    return out
