"""Build a twin pool from its config: per replica, the shared replica layer (admission queue, load
snapshot) in front of a ``TwinEngine``; per model, the shared replica choice (earliest predicted
finish); for the policies, the shared load view."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from inframind_ray.config import PoolConfig
from inframind_ray.core.clock import LOOP_CLOCK
from inframind_ray.core.request import EngineRequest, EngineResult
from inframind_ray.core.request_queue import SchedulingPolicy
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import LoadSnapshot, PoolInfo, SystemState
from inframind_ray.pools.hardware import derive_hardware
from inframind_ray.replica.admission import DeadlineQueue
from inframind_ray.replica.choice import earliest_finish
from inframind_ray.replica.load_view import LoadView
from inframind_ray.twin.engine import TwinEngine


class TwinReplica:
    """One replica as served: a bounded admission queue (capacity ``max_num_seqs``, at most
    ``max_queue`` waiting, in the engine's order, refusing by predicted finish past ``margin``)
    in front of its engine, on the loop clock."""

    def __init__(self, model: str, engine: TwinEngine, max_queue: int,
                 margin: float | None = None) -> None:
        self.model = model
        self.engine = engine
        self.queue = DeadlineQueue(engine.max_num_seqs, max_queue, clock=LOOP_CLOCK,
                                   order=engine.policy, margin=margin,
                                   engine_load=engine.snapshot)

    async def generate(self, req: EngineRequest) -> EngineResult:
        """Admit ``req`` and let the engine run it; the result's times count from the arrival
        here. A request the queue answers (deadline shed, overloaded) never reaches the
        engine."""
        t0 = LOOP_CLOCK.now()
        adm = await self.queue.submit(req.deadline, lambda: self.engine.generate(req),
                                      req.program)
        if adm.result is None:
            return EngineResult(req.request_id, adm.status, 0, t0, None, t0 + adm.latency_s, 0)
        res = adm.result
        self.queue.answered(res.status, None if res.first_token is None
                            else res.first_token - t0, adm.latency_s, adm.waited_s,
                            None if req.first_scheduled is None
                            else res.finished_at - req.first_scheduled)
        return replace(res, arrival=t0)

    def snapshot(self) -> LoadSnapshot:
        """The replica's load: its queue over its engine."""
        return self.queue.snapshot_over(self.engine.snapshot(slacks=False), model=self.model,
                                        replica_id=self.engine.name)

    def seed_history(self, ttft_s: float, tpot_s: float, e2e_s: float) -> None:
        """Latency EWMAs of a past load (engine and queue alike)."""
        self.engine.seed_history(ttft_s, tpot_s, e2e_s)
        self.queue.ttft_ewma, self.queue.e2e_ewma = ttft_s, e2e_s
        self.queue.service_ewma = e2e_s


class ModelReplicas:
    """The replicas of one pool model; a new request goes where it is predicted to end first."""

    def __init__(self, name: str, replicas: list[TwinReplica]) -> None:
        self.name = name
        self.replicas = replicas

    @property
    def engines(self) -> list[TwinEngine]:
        """The replicas' engines."""
        return [r.engine for r in self.replicas]

    def pick(self, deadline: float = float("inf")) -> TwinReplica:
        """The shared replica choice (``replica.choice.earliest_finish``) for a request due at
        ``deadline``, on the replicas' snapshots."""
        if len(self.replicas) == 1:
            return self.replicas[0]
        return self.replicas[earliest_finish([r.snapshot() for r in self.replicas], deadline,
                                             LOOP_CLOCK.now())]

    def load(self) -> LoadSnapshot:
        """Aggregate snapshot of all replicas."""
        snaps = [r.snapshot() for r in self.replicas]
        return LoadSnapshot.aggregate(self.name, snaps, min(s.timestamp for s in snaps))


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
        for r in engines[m.name].replicas:
            r.seed_history(ttft, tpot, ttft + tpot * max(0.0, out - 1))


class TwinLoadView:
    """The pool's load as policies read it, through the shared ``LoadView``: every replica's
    snapshot pushed fresh at every read (``period_s`` 0, the default, assumption
    ``METRICS_FRESH_IN_TWIN``), or at a read once ``period_s`` simulated seconds have passed
    since the last push, as the serving plane's metrics push delivers them (ages grow in
    between; staleness and availability as served)."""

    def __init__(self, engines: dict[str, ModelReplicas], period_s: float = 0.0) -> None:
        self.engines, self.period_s = engines, period_s
        self.view = LoadView(engines, clock=LOOP_CLOCK)
        self._pushed: float | None = None

    def __call__(self) -> SystemState:
        now = LOOP_CLOCK.now()
        if self._pushed is None or now - self._pushed >= self.period_s:
            for r in self.engines.values():
                for rep in r.replicas:
                    self.view.push(rep.snapshot())
            self._pushed = now
        return self.view.system_state()


def build_engines(cfg: PoolConfig, scheduling: str | None = None) -> dict[str, ModelReplicas]:
    """Per model its replicas: admission queue and ``TwinEngine`` (``scheduling`` overrides the
    pool's engine order, of the queue and the engine alike)."""
    policy = SchedulingPolicy(scheduling or cfg.engine.scheduling)
    out = {}
    for m in cfg.models:
        hw = derive_hardware(m)
        scale = getattr(m.engine, "time_scale", 1.0)  # a served twin engine's, as served
        profile = hw.profile if scale == 1.0 else hw.profile.scaled(1 / scale, 1 / scale)
        out[m.name] = ModelReplicas(m.name, [
            TwinReplica(m.name, TwinEngine(
                f"{m.name}/{r}", profile, max_num_seqs=m.max_num_seqs,
                kv_capacity_tokens=hw.kv_capacity,
                max_batched_tokens=cfg.engine.max_batched_tokens, scheduling=policy),
                m.max_queue, cfg.engine.admission_margin)
            for r in range(m.replicas)])
    return out
