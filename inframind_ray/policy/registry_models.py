"""The policy registry's contracts (``policy/registry.py`` keeps the operations): a version's
state and metadata (``meta.json``), the registry's state (``registry.json``) and a listing row."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class VersionState(StrEnum):
    """candidate: registered, never served; active: serving; retired: served before;
    rejected: a gate or the canary stopped it (it can still be promoted by hand)."""

    CANDIDATE = "candidate"
    ACTIVE = "active"
    RETIRED = "retired"
    REJECTED = "rejected"


class DataWindow(BaseModel):
    """The rollouts a version was trained on (epoch seconds, count)."""

    model_config = ConfigDict(extra="forbid")
    start: float | None = None
    end: float | None = None
    rollouts: int = Field(0, ge=0)


class VersionMeta(BaseModel):
    """What the registry keeps about a version beside its checkpoint (``meta.json``)."""

    model_config = ConfigDict(extra="forbid")
    version: str
    parent: str | None = None
    created: str  # ISO 8601, UTC
    source: str  # where the checkpoint was registered from
    sha256: str  # of policy.safetensors + spec.json, at registration
    data_window: DataWindow | None = None
    gates: dict[str, object] = {}
    note: str = ""


class RegistryState(BaseModel):
    """``registry.json``."""

    model_config = ConfigDict(extra="forbid")
    active: str | None = None
    previous: list[str] = []  # earlier actives, most recent last (rollback pops)
    pinned: str | None = None
    states: dict[str, VersionState] = {}
    canary: str | None = None  # the candidate a serving pool is to canary (serving/canary.py)
    next_canary: str | None = None  # the best candidate queued behind it (start_canary queue)
    canary_supersedes: int = 0  # running canaries superseded since a canary last ended
    log: list[dict] = []


class VersionInfo(BaseModel):
    """One row of ``list``: the version's metadata, its state and whether it is pinned."""

    meta: VersionMeta
    state: VersionState
    pinned: bool
