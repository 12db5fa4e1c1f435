"""Replay a case's real side on the twin engine (simulated clock) with a fitted profile.

The twin gets the real engine's ``max_num_seqs``, its KV capacity in tokens (vLLM's blocks x
block size, less half a block per slot for block rounding), its ``max_num_batched_tokens``, the
prompt token counts the real engine reported, the real submit times, and each request enters it
after its arrival by the profile's entry delay (the front-end delay ``d``, by default).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from inframind_ray.core.request import EngineRequest
from inframind_ray.fidelity.anchor import anchored
from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.profile import FittedProfile
from inframind_ray.fidelity.real import EngineInfo
from inframind_ray.fidelity.real_replay import SAMPLE_DT_S
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.simloop import run_simulated


def twin_kv_tokens(info: EngineInfo) -> int | None:
    """The twin's KV capacity: vLLM's token capacity less half a block per sequence slot."""
    if info.kv_capacity_tokens is None:
        return None
    waste = (info.block_size or 0) // 2 * info.max_num_seqs
    return max(1, info.kv_capacity_tokens - waste)


def replay_twin(case: Case, fp: FittedProfile, info: EngineInfo, kv_tokens: int,
                entry_delay: Callable[[float | None], float] | None = None) -> None:
    """Replay the real run's submit times and token counts on the twin (simulated clock), with
    ``fp`` scaled by ``case.speed``; fills ``case.twin`` and ``case.twin_samples``. Each request
    enters the engine ``fp.entry.delay(fp.request_overhead_s, idle_for)`` after its arrival,
    or ``entry_delay(idle_for)`` when given; ``idle_for`` is how long the twin engine had had
    nothing running or waiting at the arrival (None: busy; inf: nothing had run yet). Each twin
    row records it as ``idle_for_s``."""
    real = sorted(case.real, key=lambda r: r["i"])
    fp = anchored(fp, case.speed)
    case.twin_samples = []

    async def main() -> None:
        eng = TwinEngine("twin", fp.profile, max_num_seqs=info.max_num_seqs,
                         kv_capacity_tokens=kv_tokens,
                         max_batched_tokens=info.max_batched_tokens or 8192, scheduling="edf")
        loop = asyncio.get_running_loop()
        left = len(real)
        rows: list[dict] = []
        last_finish = -math.inf

        async def one(r: dict) -> None:
            nonlocal left, last_finish
            await asyncio.sleep(r["arrival_s"])
            s = eng.snapshot()
            idle_for = None if s.running + s.waiting else loop.time() - last_finish
            await asyncio.sleep(entry_delay(idle_for) if entry_delay is not None
                                else fp.entry.delay(fp.request_overhead_s, idle_for))
            out = max(1, r["output_tokens"] if r["status"] == "ok" else
                      int(case.output_tokens[r["i"]]))
            req = EngineRequest(str(r["i"]), int(r["prompt_tokens"]), out,
                                deadline=r["deadline_s"])
            res = await eng.generate(req)
            last_finish = max(last_finish, res.finished_at)
            rows.append(dict(i=r["i"], arrival_s=r["arrival_s"], idle_for_s=idle_for,
                             free_slot=s.waiting == 0 and s.running < info.max_num_seqs,
                             first_token_s=res.first_token if res.first_token is not None
                             else float("nan"),
                             finish_s=res.finished_at, status=res.status.name.lower(),
                             preemptions=res.num_preemptions, finish_rank=len(rows)))
            left -= 1

        async def sampler() -> None:
            while left:
                s = eng.snapshot()
                case.twin_samples.append(dict(t_s=loop.time(), waiting=s.waiting,
                                              running=s.running, kv_usage=s.kv_usage,
                                              preemptions=s.num_preemptions))
                await asyncio.sleep(SAMPLE_DT_S)

        samp = asyncio.create_task(sampler())
        await asyncio.gather(*[one(r) for r in real])
        await samp
        case.twin = sorted(rows, key=lambda r: r["i"])

    run_simulated(main())
