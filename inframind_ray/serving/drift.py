"""The drift scenario kit: scripted changes of a twin-engine serving pool and of its traffic,
for tests, scenarios and users (docs/continual.md, "Drift kit").

A drift is a typed value; ``apply_to_config`` gives the pool after it (pure: the twin replay
gate and the twin benchmark read that), ``apply_to_session`` applies it to a running Ray Serve
pool (``serving/app.py`` Session). Drifts:

- ``ReplicaLost(model)``: one replica of a model is gone (the model's application redeployed
  with one replica fewer; its last replica lost takes the model out of the pool);
- ``ModelSlowed(model, factor)``: every engine time of a twin-engine model multiplied by
  ``factor`` (its ``time_scale``, which multiplies engine times, times it; redeployed);
- ``ModelAdded(model)``: a model joins the pool;
- ``MixShifted(tasks)``: the traffic's task mix changes (no pool change: a load generator
  takes ``tasks`` from the drift).

A script of drifts is a YAML list, e.g. ``[{at_s: 60, kind: model_slowed, model: llama-3.1-8b,
factor: 2}]``; ``load_script`` validates it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from inframind_ray.config import ModelConfig, PoolConfig, TwinEngineSpec
from inframind_ray.errors import ConfigError


class _Drift(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at_s: float = Field(0.0, ge=0, description="seconds into the scenario")


class ReplicaLost(_Drift):
    """One replica of ``model`` is gone."""

    kind: Literal["replica_lost"] = "replica_lost"
    model: str


class ModelSlowed(_Drift):
    """A twin-engine model's engine times multiplied by ``factor``."""

    kind: Literal["model_slowed"] = "model_slowed"
    model: str
    factor: float = Field(gt=0)


class ModelAdded(_Drift):
    """A model joins the pool."""

    kind: Literal["model_added"] = "model_added"
    added: ModelConfig


class MixShifted(_Drift):
    """The traffic's task mix becomes ``tasks`` ((family, share) pairs)."""

    kind: Literal["mix_shifted"] = "mix_shifted"
    tasks: list[tuple[str, float]] = Field(min_length=1)


Drift = Annotated[ReplicaLost | ModelSlowed | ModelAdded | MixShifted,
                  Field(discriminator="kind")]
_SCRIPT = TypeAdapter(list[Drift])


def load_script(path: str | Path) -> list[Drift]:
    """A YAML list of drifts, validated, in time order; ConfigError (one line) otherwise."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
        drifts = _SCRIPT.validate_python(raw or [])
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError("drift", f"{path}: {str(e).splitlines()[0]}") from None
    except ValueError as e:
        err = e.errors()[0] if hasattr(e, "errors") else {"loc": (), "msg": str(e)}
        loc = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"drift.{loc}" if loc else "drift", err["msg"]) from None
    return sorted(drifts, key=lambda d: d.at_s)


def _model(cfg: PoolConfig, name: str) -> ModelConfig:
    for m in cfg.models:
        if m.name == name:
            return m
    raise ConfigError("drift.model", f"{name!r} is not in the pool "
                      f"({', '.join(m.name for m in cfg.models)})")


def _with_model(cfg: PoolConfig, model: ModelConfig) -> PoolConfig:
    return cfg.model_copy(update={"models": [model if m.name == model.name else m
                                             for m in cfg.models]})


def apply_to_config(cfg: PoolConfig, drift: Drift) -> PoolConfig:
    """The pool after ``drift`` (a mix shift leaves it as it is); ConfigError if it does not
    apply (unknown model, a model already there, a non-twin engine slowed, the last model
    lost)."""
    if isinstance(drift, MixShifted):
        return cfg
    if isinstance(drift, ModelAdded):
        if drift.added.name in {m.name for m in cfg.models}:
            raise ConfigError("drift.model", f"{drift.added.name!r} is already in the pool")
        return cfg.model_copy(update={"models": [*cfg.models, drift.added]})
    m = _model(cfg, drift.model)
    if isinstance(drift, ReplicaLost):
        if m.replicas > 1:
            return _with_model(cfg, m.model_copy(update={"replicas": m.replicas - 1}))
        if len(cfg.models) == 1:
            raise ConfigError("drift.model", f"{m.name!r} is the pool's last model")
        return cfg.model_copy(update={"models": [x for x in cfg.models if x.name != m.name]})
    if not isinstance(m.engine, TwinEngineSpec):
        raise ConfigError("drift.model", f"{m.name!r} is not a twin engine: it cannot be slowed")
    engine = m.engine.model_copy(update={"time_scale": m.engine.time_scale * drift.factor})
    return _with_model(cfg, m.model_copy(update={"engine": engine}))


def apply_to_session(session, drift: Drift) -> PoolConfig:  # noqa: ANN001 - app.Session
    """Apply ``drift`` to a running pool (models added, removed or redeployed; the
    orchestrator's pool updated); returns the new pool config."""
    new = apply_to_config(session.cfg, drift)
    if isinstance(drift, MixShifted):
        return new
    if isinstance(drift, ModelAdded):
        session.add_model(drift.added)
    elif drift.model not in {m.name for m in new.models}:
        session.remove_model(drift.model)
    else:
        session.replace_model(_model(new, drift.model))
    return session.cfg
