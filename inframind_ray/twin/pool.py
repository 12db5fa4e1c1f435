"""Build a pool from its config: scaled profiles, KV capacities, engines and the PoolInfo policies
see."""

from __future__ import annotations

import asyncio

import numpy as np

from inframind_ray.config import PoolConfig
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import ModelLoad, PoolInfo, SystemState
from inframind_ray.pools.hardware import derive_hardware
from inframind_ray.twin.engine import TwinEngine


class ModelReplicas:
    """The replicas of one pool model; new requests join the shortest queue."""

    def __init__(self, name: str, engines: list[TwinEngine]) -> None:
        self.name = name
        self.engines = engines

    def pick(self) -> TwinEngine:
        """Join-shortest-queue among replicas."""
        return min(self.engines, key=lambda e: len(e.waiting) + len(e.running))

    def load(self) -> ModelLoad:
        """Aggregate snapshot of all replicas."""
        snaps = [e.snapshot() for e in self.engines]
        return ModelLoad.from_replicas(self.name, snaps, min(s.timestamp for s in snaps))


def pool_state(engines: dict[str, ModelReplicas]) -> SystemState:
    """Every model's live load, timestamped by the running loop's clock."""
    return SystemState(asyncio.get_running_loop().time(),
                       {m: r.load() for m, r in engines.items()})


def pool_history(engines: dict[str, ModelReplicas], info: PoolInfo, seed: int,
                 share: float = 1.0) -> None:
    """Give each model (with probability ``share``) the latency EWMAs of a past load, as a
    served pool has: a random batch size, strategy and prefill-queueing factor on its own
    profile. Without it a model no request has reached reports zero latency."""
    rng = np.random.default_rng(seed)
    for m in info.models:
        if rng.random() >= share:
            continue
        p, b = m.profile, int(rng.integers(1, m.max_num_seqs + 1))
        tpot = p.iteration_time(0, b, 0.0)
        ttft = p.iteration_time(512, b - 1, 0.0) * float(rng.uniform(1.0, 10.0))
        out = m.expected_tokens[tuple(Strategy)[int(rng.integers(len(Strategy)))]]
        for e in engines[m.name].engines:
            e.seed_history(ttft, tpot, ttft + tpot * max(0.0, out - 1))


class MetricsView:
    """The pool's load as policies read it: fresh at every read (``period_s`` 0, the default,
    assumption ``METRICS_FRESH_IN_TWIN``), or a snapshot refreshed every ``period_s`` simulated
    seconds, as the serving plane's metrics push delivers it (ages grow between refreshes)."""

    def __init__(self, engines: dict[str, ModelReplicas], period_s: float = 0.0) -> None:
        self.engines, self.period_s = engines, period_s
        self._snap: SystemState | None = None

    def __call__(self) -> SystemState:
        now = asyncio.get_running_loop().time()
        if self._snap is None or now - self._snap.now >= self.period_s:
            self._snap = pool_state(self.engines)
        return SystemState(now, self._snap.models)


def build_engines(cfg: PoolConfig, scheduling: str | None = None) -> dict[str, ModelReplicas]:
    """One TwinEngine per replica (``scheduling`` overrides the pool's)."""
    policy = scheduling or cfg.engine.scheduling
    out = {}
    for m in cfg.models:
        hw = derive_hardware(m)
        out[m.name] = ModelReplicas(
            m.name,
            [
                TwinEngine(
                    f"{m.name}/{r}",
                    hw.profile,
                    max_num_seqs=m.max_num_seqs,
                    kv_capacity_tokens=hw.kv_capacity,
                    max_batched_tokens=cfg.engine.max_batched_tokens,
                    scheduling=policy,
                )
                for r in range(m.replicas)
            ],
        )
    return out
