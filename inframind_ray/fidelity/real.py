"""The real engine side of the fidelity checks: open the engine a deployment file names, in this
process, probe it, read its scheduler limits, and make prompts of a given token length.

vLLM is imported only when a vllm-kind engine starts.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inframind_ray.config import ModelConfig, PoolConfig, load_pool
from inframind_ray.errors import ConfigError, InframindError
from inframind_ray.serving.engines.base import Engine, GenerateRequest

FAR_FUTURE_S = 1e6  # deadline offset of requests without a deadline (keeps FCFS order in vLLM)


class EngineUnreachable(InframindError):
    """The engine could not be started or did not answer a probe request."""


@dataclass(frozen=True)
class EngineInfo:
    """Scheduler limits of a started engine, as the twin needs them."""

    kind: str
    model: str
    max_num_seqs: int
    kv_capacity_tokens: int | None
    max_batched_tokens: int | None
    block_size: int | None
    chunked_prefill: bool | None

    def as_dict(self) -> dict:
        return asdict(self)


def pick_model(pool: PoolConfig, name: str) -> ModelConfig:
    """The pool model called ``name`` (ConfigError naming the known ones otherwise)."""
    for m in pool.models:
        if m.name == name:
            return m
    raise ConfigError("model", f"no model {name!r} in pool {pool.name!r} "
                      f"(models: {', '.join(m.name for m in pool.models)})")


def model_with(model: ModelConfig, *, max_num_seqs: int | None = None,
               kv_cache_memory_bytes: int | None = None,
               engine_kwargs: dict | None = None) -> ModelConfig:
    """A copy of ``model`` with engine overrides (profiling batch size, KV-pressure cache)."""
    spec = model.engine
    upd: dict[str, Any] = {}
    if kv_cache_memory_bytes is not None:
        if spec.kind != "vllm":
            raise ConfigError("kv_cache_memory_bytes", f"needs a vllm engine, not {spec.kind}")
        upd["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
    if engine_kwargs:
        if spec.kind != "vllm":
            raise ConfigError("engine_kwargs", f"needs a vllm engine, not {spec.kind}")
        upd["engine_kwargs"] = {**spec.engine_kwargs, **engine_kwargs}
    new_spec = spec.model_copy(update=upd) if upd else spec
    mupd: dict[str, Any] = {"engine": new_spec}
    if max_num_seqs is not None:
        mupd["max_num_seqs"] = int(max_num_seqs)
    return model.model_copy(update=mupd)


def describe(model: ModelConfig) -> str:
    """One-line description of the engine behind ``model`` (for messages)."""
    s = model.engine
    where = getattr(s, "base_url", None) or getattr(s, "model", "")
    return f"{model.name!r} ({s.kind}{' ' + where if where else ''})"


def _check_local_model(model: ModelConfig) -> None:
    spec = model.engine
    if spec.kind != "vllm":
        return
    m = spec.model
    if m.startswith(("/", "~", ".")) and not os.path.exists(os.path.expanduser(m)):
        raise EngineUnreachable(f"engine {describe(model)} unreachable: model path {m} does not "
                                "exist (build the tiny model: python scripts/build_tiny_model.py)")


def engine_info(engine: Engine, model: ModelConfig) -> EngineInfo:
    """Scheduler limits of a started engine (read from vLLM where it is one)."""
    llm = getattr(engine, "_llm", None)
    kv = mbt = bs = chunked = None
    if llm is not None and hasattr(llm, "vllm_config"):
        cfg = llm.vllm_config
        bs = int(cfg.cache_config.block_size)
        blocks = cfg.cache_config.num_gpu_blocks
        kv = int(blocks) * bs if blocks else None
        mbt = int(cfg.scheduler_config.max_num_batched_tokens)
        chunked = bool(cfg.scheduler_config.enable_chunked_prefill)
    if kv is None:
        kv = model.kv_capacity_tokens
    return EngineInfo(kind=model.engine.kind, model=getattr(model.engine, "model", model.name),
                      max_num_seqs=int(getattr(engine, "capacity", model.max_num_seqs)),
                      kv_capacity_tokens=kv, max_batched_tokens=mbt, block_size=bs,
                      chunked_prefill=chunked)


@contextlib.asynccontextmanager
async def open_engine(model: ModelConfig, pool: PoolConfig,
                      probe_timeout_s: float = 30.0) -> AsyncIterator[tuple[Engine, EngineInfo]]:
    """Build, start and probe the engine of ``model``; always shut it down afterwards.

    Raises :class:`EngineUnreachable` (one line) when it fails to start or to answer a 2-token
    probe request.
    """
    from inframind_ray.serving.engines.factory import make_engine

    _check_local_model(model)
    engine = make_engine(model, pool)
    try:
        try:
            await engine.start()
        except Exception as e:  # noqa: BLE001 - any start failure is "unreachable" to the user
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise EngineUnreachable(f"engine {describe(model)} failed to start: {msg}") from None
        res = await engine.generate(GenerateRequest("probe", "hello", 2,
                                                    deadline=time.time() + probe_timeout_s))
        if not res.status.ok:
            detail = (res.detail or res.status.api).strip().splitlines()[0]
            raise EngineUnreachable(f"engine {describe(model)} unreachable: {detail}")
        yield engine, engine_info(engine, model)
    finally:
        with contextlib.suppress(Exception):
            await engine.shutdown()


def load_model(pool_path: str, name: str) -> tuple[PoolConfig, ModelConfig]:
    """Load the deployment file and pick one model."""
    pool = load_pool(pool_path)
    return pool, pick_model(pool, name)


_TEXT = ("the answer is a question about time and space where every model waits for its turn in "
         "the queue while the scheduler decides which request runs first under load memory cache "
         "token batch prefill decode latency deadline budget agent route")
_WORDS = tuple(w for w in _TEXT.split())


class PromptMaker:
    """Unique prompts of about ``n`` tokens (exact where a tokenizer loads; the engine reports the
    true count anyway). Unique random words keep vLLM's prefix cache from helping."""

    def __init__(self, model: ModelConfig, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.tok = None
        spec = model.engine
        if spec.kind == "vllm":
            try:
                from transformers import AutoTokenizer

                self.tok = AutoTokenizer.from_pretrained(os.path.expanduser(spec.model))
            except Exception:  # noqa: BLE001 - fall back to one token per word
                self.tok = None

    def count(self, text: str) -> int:
        if self.tok is None:
            return len(text.split())
        return len(self.tok(text)["input_ids"])

    def make(self, n: int) -> str:
        """A fresh prompt of at most ``n`` tokens (close to ``n``)."""
        n = max(1, int(n))
        words = [str(x) for x in self.rng.choice(_WORDS, size=2 * n + 8)]
        words[0] = f"{self.rng.integers(1 << 30):x}"  # unique head: no prefix-cache hits
        lo, hi = 1, len(words)
        while lo < hi:  # most words whose prompt has <= n tokens
            mid = (lo + hi + 1) // 2
            if self.count(" ".join(words[:mid])) <= n:
                lo = mid
            else:
                hi = mid - 1
        return " ".join(words[:lo])


def _cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def pin_driver(model: ModelConfig) -> set[int] | None:
    """Keep this process (the driver and vLLM's front end) and the engine-core process it spawns
    off the cores the vLLM CPU worker is bound to (``VLLM_CPU_OMP_THREADS_BIND``): on a small
    machine they otherwise steal the worker's core and add noise to every step. Returns the
    cores used, or None when nothing was changed."""
    spec = model.engine
    bind = getattr(spec, "env", {}).get("VLLM_CPU_OMP_THREADS_BIND")
    if spec.kind != "vllm" or not bind or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        rest = os.sched_getaffinity(0) - _cpu_list(bind)
    except ValueError:
        return None
    if not rest:
        return None
    os.sched_setaffinity(0, rest)
    return rest
