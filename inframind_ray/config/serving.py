"""The Ray Serve side of a pool: HTTP, orchestrator, rollouts, canary, metrics settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inframind_ray.core import constants as C


class RolloutConfig(BaseModel):
    """Live rollouts of the learned policy, written beside the records (docs/continual.md)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="record every decision of the learned policy")
    flush_rows: int = Field(256, gt=0, le=100_000,
                            description="write a Parquet batch when this many rows are buffered")
    flush_s: float = Field(30.0, gt=0, description="... or when the oldest is this old (s)")
    feedback_window: int = Field(
        100_000, gt=0, le=10_000_000,
        description="the most recent queries that accept POST /v1/feedback")
    explore_share: float = Field(
        0.0, ge=0, le=0.5, description="share of the learned policy's queries (by a seeded hash "
        "of the query id) that explore: their decisions are drawn instead of taken greedily, so "
        "that live rollouts hold alternatives to learn from (docs/continual.md); 0: greedy")
    explore_epsilon: float = Field(
        0.2, ge=0, le=1, description="in an exploring query, each decision is uniform over the "
        "valid actions with this probability, else drawn from the policy's softmax (the shipped "
        "policy's softmax alone is near one-hot)")
    explore_seed: int = 0


class AdaptiveInflightConfig(BaseModel):
    """The ingress's bound on queries in flight, steered at run time from the control plane's
    measured delay (``serving/gate.py``); Serve's ``max_inflight_queries`` stays its ceiling."""

    model_config = ConfigDict(extra="forbid")
    target_delay_s: float = Field(
        2.0, gt=0, description="the control plane's delay (a query's predicted wait outside its "
        "agent calls) the bound steers to: below it the bound grows, above it shrinks")
    min_inflight: int = Field(8, gt=0, description="the bound's floor, and where it starts")
    update_s: float = Field(1.0, gt=0, le=60, description="seconds between two steps of the "
                            "bound")


class CanaryConfig(BaseModel):
    """``serving.canary``: the live canary of a candidate policy version (serving/canary.py;
    docs/continual.md says why these defaults)."""

    model_config = ConfigDict(extra="forbid")
    share: float = Field(0.1, gt=0, lt=1, description="share of live queries to the candidate")
    max_queries: int = Field(200, ge=1, description="the most queries the candidate serves")
    min_queries: int = Field(20, ge=1, description="canary queries before the first look")
    tolerance: float = Field(0.05, ge=0, lt=1, description="allowed drop of goodput and SLO "
                             "attainment, candidate vs incumbent")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="error of each decision")
    seed: int = 0
    harm_guard: bool = Field(
        True, description="cap the candidate's share of the canary's queries at tolerance / "
        "(the always-valid upper bound of its shortfall against the incumbent, at most 1), "
        "so that live goodput and SLO attainment during the canary stay within the tolerance "
        "of the incumbent's: the share starts at the tolerance and rises to share as the "
        "candidate shows it is not worse")

    @model_validator(mode="after")
    def _guard_needs_a_tolerance(self) -> CanaryConfig:
        if self.harm_guard and self.tolerance == 0:
            raise ValueError("harm_guard needs tolerance > 0 (with 0 no query may go to the "
                             "candidate): set a tolerance or harm_guard: false")
        return self


class ServingConfig(BaseModel):
    """Ray Serve side of a pool: HTTP, orchestrator and metrics settings."""

    model_config = ConfigDict(extra="forbid")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    proxy_location: Literal["HeadOnly", "EveryNode", "Disabled"] = "HeadOnly"
    api_key_env: str | None = Field(None, description="env var holding the API key (optional)")
    default_policy: str = "inframind"
    policy_checkpoint: str | None = Field(
        None, description="learned-policy checkpoint folder (default: the shipped policy)")
    fallback_policy: str = "infra-heuristic"
    metrics_period_s: float = Field(C.METRICS_PERIOD_S, gt=0, le=10)
    stale_after_s: float = Field(C.STALE_AFTER_S, gt=0)
    unavailable_after_s: float = Field(C.UNAVAILABLE_AFTER_S, gt=0)
    records_dir: str = "runs/records"
    registry_dir: str = Field(
        "runs/policies", description="the learned policy's version registry (docs/continual.md); "
        "an empty one is seeded with policy_checkpoint (or the shipped policy)")
    rollouts: RolloutConfig = RolloutConfig()
    canary: CanaryConfig = CanaryConfig()
    max_body_bytes: int = Field(65_536, gt=0)
    max_inflight_queries: int = Field(
        1024, gt=0, description="queries in the ingress at once: Serve's max_ongoing_requests "
        "of the ingress deployment, and the ingress gate's 429 bound")
    ingress_max_queued: int = Field(
        16, gt=0, description="requests the HTTP proxy holds for a full ingress (Serve's "
        "max_queued_requests, which also counts requests being routed); past it Serve answers "
        "429 with Retry-After at once")
    adaptive_inflight: AdaptiveInflightConfig | None = Field(
        None, description="steer the ingress's bound on queries in flight at run time, at most "
        "max_inflight_queries (docs/operations.md); None: the static max_inflight_queries")
    standby_orchestrator: bool = Field(
        True, description="run a warm standby orchestrator that the ingress switches to when "
        "the active one dies")
    max_budget_s: float = Field(3600.0, gt=0)
    request_start_header: bool = Field(
        False, description="count a query's budget from its `X-Request-Start` header (`t=` and "
        "epoch seconds, as a load balancer or client stamps it) instead of from its arrival at "
        "the ingress, so time queued in front of the service (the HTTP proxy's queue) is spent "
        "from it; only where the stamping clock is this cluster's (NTP)")
    min_budget_s: float = Field(
        0.1, gt=0, description="the shortest budget a query may ask for (422 below it, stated "
        "in the OpenAPI document): the serving plane's own path takes milliseconds and no model "
        "answers within less")
    orchestrator_num_cpus: float = Field(0.5, ge=0)
    metrics_export_port: int | None = Field(
        None, ge=1024, le=65535, description="port of Ray's Prometheus endpoint when this package "
        "starts the cluster (None: Ray's choice)")
    orchestrator_max_restarts: int = Field(
        -1, ge=-1, description="times Ray restarts a dead orchestrator (-1: always)")
    embed: bool = Field(True, description="embed queries with MiniLM in the orchestrator")
    controller: Literal["off", "on"] = Field(
        "off", description="LAMaS's run-time execution controller for multi-agent plans "
        "(docs/controller.md); a query's `controller` field overrides it")
    controller_checkpoint: str | None = Field(
        None, description="controller checkpoint folder (default: the shipped controller)")

    @model_validator(mode="after")
    def _adaptive_floor_under_the_ceiling(self) -> ServingConfig:
        a = self.adaptive_inflight
        if a is not None and a.min_inflight > self.max_inflight_queries:
            raise ValueError(f"adaptive_inflight.min_inflight ({a.min_inflight}) exceeds "
                             f"max_inflight_queries ({self.max_inflight_queries})")
        return self

    @field_validator("registry_dir")
    @classmethod
    def _registry_is_a_folder(cls, v: str) -> str:
        p = Path(v).expanduser()
        if not v.strip():
            raise ValueError("must name a folder")
        if p.exists() and not p.is_dir():
            raise ValueError(f"{v} exists and is not a folder")
        if (p / "versions").exists() and not (p / "versions").is_dir():
            raise ValueError(f"{v}/versions is not a folder: not a policy registry")
        return v
