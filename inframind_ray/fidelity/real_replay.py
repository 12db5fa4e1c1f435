"""Drive a started real engine on the wall clock: replay a case's arrivals on it, and time the
lone speed probes of ``--anchor`` (``fidelity.anchor``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.real import FAR_FUTURE_S
from inframind_ray.serving.engines.base import Engine, GenerateRequest

SAMPLE_DT_S = 0.25
"""Period of the engine-state samples (waiting/running/KV, for the plot; queue depth is scored
from the request timelines). 0.05 s before 2026-12-01: polling that often from the driver, which
shares its core with vLLM's engine core, added 0.3-1.1 ms to the median TTFT of requests that
found the engine idle (``experiments/ttft_idle_check.py sampler``), a load the profile grid does
not carry."""
PROBE_SHAPES = ((64, 64), (256, 128), (128, 96))  # (prompt, output) of the lone speed probes


async def replay_real(engine: Engine, case: Case, make_prompt: Callable[[int], str],
                      sample_dt_s: float = SAMPLE_DT_S) -> None:
    """Send each request at its arrival time (wall clock); fill ``case.real``, and
    ``case.real_samples`` with the engine's state every ``sample_dt_s``."""
    prompts = [make_prompt(int(p)) for p in case.prompt_tokens]
    loop = asyncio.get_running_loop()
    start = loop.time()
    epoch0 = time.time()
    done = asyncio.Event()
    order: list[int] = []

    async def one(i: int) -> dict:
        await asyncio.sleep(max(0.0, start + float(case.arrivals[i]) - loop.time()))
        arr = time.time() - epoch0
        req = GenerateRequest(f"{case.name}-{i}", prompts[i], int(case.output_tokens[i]),
                              deadline=epoch0 + arr + float(case.budgets_s[i]))
        r = await engine.generate(req)
        order.append(i)
        first = arr + r.ttft_s if r.ttft_s is not None else float("nan")
        return dict(i=i, arrival_s=arr, first_token_s=first, finish_s=arr + r.latency_s,
                    status=r.status.api,
                    prompt_tokens=r.prompt_tokens or int(case.prompt_tokens[i]),
                    output_tokens=r.output_tokens, preemptions=r.preemptions,
                    deadline_s=arr + float(case.budgets_s[i]))

    async def sampler() -> None:
        while not done.is_set():
            s = engine.stats()
            case.real_samples.append(dict(t_s=time.time() - epoch0, waiting=s.waiting,
                                          running=s.running, kv_usage=s.kv_usage,
                                          preemptions=s.num_preemptions))
            await asyncio.sleep(sample_dt_s)

    samp = asyncio.create_task(sampler())
    rows = await asyncio.gather(*[one(i) for i in range(len(case.arrivals))])
    done.set()
    await samp
    rank = {i: k for k, i in enumerate(order)}
    for r in rows:
        r["finish_rank"] = rank[r["i"]]
    case.real = rows


async def probe_real(engine: Engine, make_prompt: Callable[[int], str], tag: str) -> list[dict]:
    """Lone requests of ``PROBE_SHAPES``, one after another; their measured latency."""
    rows = []
    for k, (p, o) in enumerate(PROBE_SHAPES):
        r = await engine.generate(GenerateRequest(f"probe-{tag}-{k}", make_prompt(p), o,
                                                  deadline=time.time() + FAR_FUTURE_S))
        if r.status.ok:
            rows.append(dict(prompt_tokens=r.prompt_tokens or p, output_tokens=r.output_tokens,
                             e2e_s=r.latency_s))
    return rows
