"""One pool model: recorded answers, profile, hardware, engine (validated against the data)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.config.engine import EngineSpec, TwinEngineSpec
from inframind_ray.model_card import CARD_KEY, card_accuracy


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
