"""Pool and deployment files: finding them (shipped names or paths), reading YAML, extending a
shipped pool, and validating with errors that name the field."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from inframind_ray.config.pool import PoolConfig
from inframind_ray.errors import ConfigError

POOLS_DIR = Path(str(resources.files("inframind_ray") / "pools"))


def resolve_pool_path(pool: str | Path, base: Path | None = None) -> Path:
    """A path, or the name of a shipped pool (``default`` -> inframind_ray/pools/default.yaml,
    ``heldout/gh200-trio`` -> inframind_ray/pools/heldout/gh200-trio.yaml). A relative path is
    taken from ``base`` (the folder of the file naming it) when given."""
    p = Path(pool).expanduser()
    shipped = POOLS_DIR / f"{pool}.yaml"
    if p.suffix in (".yaml", ".yml") or p.exists() or ("/" in str(pool)
                                                        and not shipped.is_file()):
        return p if base is None or p.is_absolute() else base / p
    return shipped


def shipped_pools() -> list[str]:
    """Names of the shipped pools: ``pools/*.yaml`` and the held-out ``pools/heldout/*.yaml``
    (the sampler's model catalog, ``pools/catalog.yaml``, is not a pool)."""
    top = sorted(p.stem for p in POOLS_DIR.glob("*.yaml") if p.stem != "catalog")
    return top + sorted(f"heldout/{p.stem}" for p in (POOLS_DIR / "heldout").glob("*.yaml"))


def read_yaml(path: str | Path, field: str) -> dict:
    """A YAML file holding a mapping (empty = {}); ConfigError(field, one line) otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"no such file: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(field, f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(field, f"{path}: expected a mapping at the top level")
    return raw


M = TypeVar("M", bound=BaseModel)


def validated(cls: type[M], raw: dict, prefix: str = "", source: str = "") -> M:
    """``cls`` validated from ``raw``; ConfigError naming the first bad field (dotted, after
    ``prefix``), with ``source`` (a file) in the message when given."""
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        field = ".".join(x for x in (prefix, loc) if x) or "config"
        raise ConfigError(field, f"{msg} (in {source})" if source else msg) from None


def _merge(base: dict, over: dict) -> dict:
    """``over`` laid on ``base``, mappings merged key by key; a mapping whose ``kind`` differs
    (another engine) replaces the base one."""
    out = dict(base)
    for k, v in over.items():
        b = out.get(k)
        if isinstance(b, dict) and isinstance(v, dict) and v.get("kind", b.get("kind")) == b.get(
                "kind"):
            out[k] = _merge(b, v)
        else:
            out[k] = v
    return out


def read_yaml_extending(path: str | Path, field: str) -> dict:
    """:func:`read_yaml`, where a file holding ``extends: OTHER.yaml`` (a path from its own
    folder) is that file, read the same way, with this file's keys laid on it: mappings merged
    key by key, anything else (lists too) replaced. A recipe that changes one setting of
    another then states that setting only."""
    path = Path(path).resolve()
    return _read_extending(path, field, (path,))


def _read_extending(path: Path, field: str, seen: tuple[Path, ...]) -> dict:
    raw = read_yaml(path, field)
    if "extends" not in raw:
        return raw
    ref = raw.pop("extends")
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"{field}.extends", f"{path}: must name a YAML file")
    base_path = (path.parent / ref).resolve()
    if base_path in seen:
        raise ConfigError(f"{field}.extends", f"{path} extends itself through {ref!r}")
    if not base_path.is_file():
        raise ConfigError(f"{field}.extends", f"{path}: no such file: {ref}")
    return _merge(_read_extending(base_path, field, (*seen, base_path)), raw)


def _extend(raw: dict, path: Path, seen: tuple[Path, ...]) -> dict:
    """A deployment file that names a pool (``pool: default`` or a path from its folder) is that
    pool with the file's own keys laid on it; its ``models`` is then a mapping of overrides by
    model name (Serve-side engine, Ray options, slots)."""
    ref = raw.pop("pool")
    if not isinstance(ref, str) or not ref:
        raise ConfigError("pool.pool", "must name a shipped pool or a pool file")
    base_path = resolve_pool_path(ref, path.parent)
    if base_path.resolve() in seen:
        raise ConfigError("pool.pool", f"{path} extends itself through {ref!r}")
    base = _read_pool(base_path, (*seen, base_path.resolve()))
    overrides = raw.pop("models", {}) or {}
    if not isinstance(overrides, dict):
        raise ConfigError("pool.models", f"a file extending pool {ref!r} lists model overrides "
                          "as a mapping by model name")
    models = base.get("models") or []
    names = [m.get("name") for m in models if isinstance(m, dict)]
    unknown = [n for n in overrides if n not in names]
    if unknown:
        raise ConfigError(f"pool.models.{unknown[0]}",
                          f"not a model of pool {ref!r} (models: {', '.join(map(str, names))})")
    for name, over in overrides.items():
        if not isinstance(over, dict):
            raise ConfigError(f"pool.models.{name}", "expected a mapping of overrides")
    merged = _merge(base, raw)
    merged["models"] = [_merge(m, overrides.get(m.get("name"), {})) if isinstance(m, dict) else m
                        for m in models]
    return merged


def _cards_from(raw: dict, folder: Path) -> dict:
    """Relative ``card`` paths of a pool file's models, taken from the file's folder."""
    models = raw.get("models")
    entries = models if isinstance(models, list) else list((models or {}).values()) \
        if isinstance(models, dict) else []
    for m in entries:
        if isinstance(m, dict) and isinstance(m.get("card"), str) and \
                not Path(m["card"]).is_absolute():
            m["card"] = str((folder / m["card"]).resolve())
    return raw


def _read_pool(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    raw = _cards_from(read_yaml(path, "pool"), path.parent)
    return _extend(raw, path, seen or (path.resolve(),)) if "pool" in raw else raw


def load_pool(pool: str | Path) -> PoolConfig:
    """Load and validate a pool or deployment file; raise ConfigError naming the first bad
    field."""
    path = resolve_pool_path(pool)
    if not path.is_file():
        shipped = ", ".join(shipped_pools())
        raise ConfigError("pool", f"no pool file {str(pool)!r} (shipped pools: {shipped})")
    return validated(PoolConfig, _read_pool(path), "pool")
