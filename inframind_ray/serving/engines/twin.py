"""The twin engine adapter: the twin's engine model plus recorded-answer replay on the wall clock,
and the served ``oracle`` policy's hook. The one serving module that imports ``twin``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from inframind_ray.config import ModelConfig, PoolConfig, TwinEngineSpec
from inframind_ray.core.clock import loop_time_at
from inframind_ray.core.request import EngineRequest, RequestStatus
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import NodeKind
from inframind_ray.core.types import LoadSnapshot, QueryInfo
from inframind_ray.pools.hardware import derive_hardware
from inframind_ray.serving.engines.base import Engine, GenerateRequest, GenerateResult
from inframind_ray.tasks.base import tokens_for_words
from inframind_ray.tasks.prompts import format_answer
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.outcome import OutcomeModel


def recorded_oracle(cfg: PoolConfig) -> Callable[[QueryInfo, str, Strategy], bool]:
    """The ``oracle`` policy's hook on a served pool: whether a lone agent (model, strategy)
    answers the query's item right, as the twin engines replay it (False for free text)."""
    outcome = OutcomeModel.for_models(cfg.models)
    return lambda q, model, strategy: outcome.would_be_correct(q.item_id, model, strategy, q.task,
                                                               q.query_id)


class WallClockTwinEngine(Engine):
    """Serves one pool model with the twin's engine model in real asyncio time."""

    def __init__(self, model: ModelConfig, spec: TwinEngineSpec, scheduling: str = "edf",
                 max_batched_tokens: int = 8192, seed: int = 0) -> None:
        hw = derive_hardware(model)
        s = spec.time_scale
        self.name = model.name
        self.capacity = model.max_num_seqs
        self.outcome = OutcomeModel.for_models([model], seed=seed)
        self.engine = TwinEngine(model.name, hw.profile.scaled(1 / s, 1 / s),
                                 max_num_seqs=model.max_num_seqs,
                                 kv_capacity_tokens=hw.kv_capacity,
                                 max_batched_tokens=max_batched_tokens, scheduling=scheduling)

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """Answer from the recorded outcomes; take as long as the engine model says."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        text, tokens = self.outcome.reply(req.item_id, self.name, Strategy(req.strategy),
                                          NodeKind(req.kind), req.upstream_answers, req.max_tokens,
                                          req.sample, req.task, req.query_id)
        prompt = req.prompt_tokens_hint or tokens_for_words(len(req.prompt.split()))
        ereq = EngineRequest(req.request_id, prompt, max(1, tokens),
                             deadline=loop_time_at(req.deadline), program=req.program)
        res = await self.engine.generate(ereq)
        ok = res.status.ok
        return GenerateResult(
            request_id=req.request_id,
            status=res.status,
            text=text if ok else None,
            prompt_tokens=prompt,
            output_tokens=res.output_tokens,
            ttft_s=None if res.first_token is None else res.first_token - t0,
            latency_s=loop.time() - t0,
            preemptions=res.num_preemptions,
            service_s=None if ereq.first_scheduled is None
            else loop.time() - ereq.first_scheduled,
            detail="" if ok else ("request does not fit the KV cache"
                                  if res.status is RequestStatus.REJECTED else res.status.api),
        )

    def stats(self) -> LoadSnapshot:
        """The engine model's own snapshot."""
        return self.engine.snapshot()


class EchoEngine(Engine):
    """Answers at once (measures the serving plane's own overhead)."""

    capacity = 1_000_000

    def __init__(self) -> None:
        self.n = 0

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """Return a fixed graded answer immediately."""
        self.n += 1
        return GenerateResult(req.request_id, RequestStatus.FINISHED, format_answer("A"), 1, 1,
                              ttft_s=0.0)

    def stats(self) -> LoadSnapshot:
        """Always idle."""
        return LoadSnapshot("echo")
