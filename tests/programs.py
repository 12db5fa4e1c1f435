"""A hand-built set of agent programs for the scheduler tests, and its run in the twin: one
1-slot replica, a long blocker holding the slot while calls of five programs arrive with attained
service that puts them on different priority levels under PLAS and ATLAS, and one call whose
deadline passes while it waits (the shared deadline admission sheds it under every order)."""

from __future__ import annotations

import asyncio

from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.core.request import EngineRequest, ProgramService
from inframind_ray.twin.pool import build_engines
from inframind_ray.twin.simloop import run_simulated

POOL = """
name: scheduling-test
engine: {scheduling: edf, on_deadline: abort}
models:
  - name: big
    recorded: Meta-Llama-3_1-70B-Instruct
    profile: llama3-70b@h100x4
    gpu: H200-141GB
    gpus_per_replica: 2
    max_num_seqs: 1
    max_queue: 8
    engine: {kind: twin, time_scale: 2.0}
serving:
  port: 8767
  metrics_period_s: 0.25
  embed: false
"""
BLOCKER = ("blocker", 0.0, "deepthink", 60, 600.0, 0.0, 0.0)
# (name, arrival offset s, strategy, output tokens, deadline in s, attained s, critical path s).
# Levels (1 s, x2): attained 0 -> 0, 5 -> 3, 10 -> 4, 20 -> 5, 40 -> 6; path 0.5 -> 0, 4 -> 3.
CALLS = [
    ("b", 0.3, "flash", 4, 600.0, 20.0, 4.0),   # PLAS 5, ATLAS 3 (before d: FCFS in a level)
    ("c", 0.4, "flash", 4, 600.0, 10.0, 10.0),  # PLAS 4, ATLAS 4
    ("e", 0.5, "flash", 4, 600.0, 40.0, 0.5),   # PLAS 6, ATLAS 0: parallel, short critical path
    ("d", 0.6, "flash", 4, 600.0, 5.0, 5.0),    # PLAS 3, ATLAS 3
    ("a", 0.7, "flash", 4, 600.0, 0.0, 0.0),    # PLAS 0, ATLAS 0
    ("f", 0.8, "flash", 4, 1.0, 0.0, 0.0),      # due while the blocker runs: shed
]
EXPECTED = {  # (name, status) in the order the calls end
    "plas": ["f:deadline", "blocker:ok", "a:ok", "d:ok", "c:ok", "b:ok", "e:ok"],
    "atlas": ["f:deadline", "blocker:ok", "e:ok", "a:ok", "b:ok", "d:ok", "c:ok"],
    "fcfs": ["f:deadline", "blocker:ok", "b:ok", "c:ok", "e:ok", "d:ok", "a:ok"],
}


def pool_config(tmp_path) -> PoolConfig:  # noqa: ANN001 - a pytest tmp path
    """The test pool, read from YAML like any pool."""
    path = tmp_path / "scheduling_test.yaml"
    path.write_text(POOL)
    return load_pool(path)


def run_in_twin(cfg: PoolConfig, scheduling: str) -> list[str]:
    """The set on the twin's virtual clock: 'name:status' in the order the calls end."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        replica = build_engines(cfg, scheduling)["big"].replicas[0]
        ended: list[str] = []

        async def one(name, at, _strategy, tokens, deadline_in, attained, path) -> None:  # noqa: ANN001
            await asyncio.sleep(at)
            req = EngineRequest(name, 50, tokens, deadline=loop.time() + deadline_in,
                                program=ProgramService(name, attained, path))
            res = await replica.generate(req)
            ended.append(f"{name}:{res.status.api}")

        await asyncio.gather(*(one(*c) for c in (BLOCKER, *CALLS)))
        return ended

    return run_simulated(main())[0]
