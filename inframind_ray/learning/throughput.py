"""``inframind train-speed``: environment decisions per second of training, phase by phase.

For each variant (sampler and sub-simulations per env) of one training config, three phases on
the same config, seed and machine, one after the other:

- ``raw``: the env alone, every pending decision answered by a uniform choice among its valid
  actions (no network);
- ``sampling``: the env runner with the config's real modules (``env_runner.sample``);
- ``ppo``: whole ``algo.train()`` iterations (sampling and learning), decisions counted as in
  ``metrics.jsonl``'s ``decisions_per_s``.

Every row has wall time and this process's CPU time (user + system; RLlib runs sampling and
learning in the driver with ``num_env_runners: 0``), so a number measured on a shared machine
can be read against its load (the 1-minute load average, sampled before and after each row).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from inframind_ray.errors import ConfigError
from inframind_ray.learning.train import TrainConfig, build_algo

PHASES = ("raw", "sampling", "ppo")


@dataclass(frozen=True)
class Variant:
    """How decisions are sampled: RLlib's runner or ``DecisionEnvRunner``; sub-simulations."""

    sampler: str
    num_sims: int

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``SAMPLER:SIMS``, e.g. ``decisions:16``."""
        sampler, _, sims = text.partition(":")
        if sampler not in ("rllib", "decisions") or not sims.isdigit() or int(sims) < 1:
            raise ConfigError("variants", f"{text!r} is not SAMPLER:SIMS (sampler rllib or "
                              "decisions, sims >= 1)")
        return cls(sampler, int(sims))


@dataclass(frozen=True)
class SpeedRow:
    """One measured phase of one variant."""

    sampler: str
    num_sims: int
    phase: str
    decisions: int
    wall_s: float
    cpu_s: float
    load_before: float
    load_after: float

    @property
    def per_s(self) -> float:
        """Decisions per wall-clock second."""
        return self.decisions / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_cpu_s(self) -> float:
        """Decisions per CPU second of this process."""
        return self.decisions / self.cpu_s if self.cpu_s > 0 else 0.0

    def as_dict(self) -> dict:
        """The row with its rates (JSON)."""
        return asdict(self) | {"decisions_per_s": round(self.per_s, 1),
                               "decisions_per_cpu_s": round(self.per_cpu_s, 1)}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(v: Variant, phase: str, run: Callable[[], int]) -> SpeedRow:
    load0, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), _cpu()
    n = run()
    return SpeedRow(v.sampler, v.num_sims, phase, n, round(time.perf_counter() - wall0, 2),
                    round(_cpu() - cpu0, 2), load0, os.getloadavg()[0])


def raw_decisions(env, decisions: int, seed: int) -> int:
    """Answer at least ``decisions`` decisions of ``env`` uniformly at random (then close it)."""
    rng = np.random.default_rng(seed)
    n = 0
    try:
        obs, _ = env.reset(seed=seed)
        while n < decisions:
            acts = {a: int(rng.choice(np.flatnonzero(obs[a]["mask"] > 0))) for a in env.pending}
            obs, _, term, _, _ = env.step(acts)
            n += len(acts)
            if term["__all__"]:
                obs, _ = env.reset()
    finally:
        env.close()
    return n


def measure(cfg: TrainConfig, variants: list[Variant], decisions: int, iterations: int,
            on_row: Callable[[SpeedRow], None] | None = None) -> list[SpeedRow]:
    """Every phase of every variant (see the module docstring). Decisions are those the envs
    answered (``TwinOrchestrationEnv.decisions``), the same count for both samplers."""
    from inframind_ray.learning.env import TwinOrchestrationEnv

    rows = []

    def keep(row: SpeedRow) -> None:
        rows.append(row)
        if on_row:
            on_row(row)

    for v in variants:
        c = cfg.model_copy(deep=True)
        c.env.num_sims, c.ppo.sampler = v.num_sims, v.sampler
        env = TwinOrchestrationEnv(c.env.model_dump())  # built untimed, as RLlib's are
        keep(_timed(v, "raw", lambda env=env, c=c: raw_decisions(env, decisions, c.seed)))
        algo = build_algo(c)
        try:
            runner = algo.env_runner_group.local_env_runner
            keep(_timed(v, "sampling", lambda r=runner: _answered(
                r, lambda: r.sample(num_timesteps=decisions, explore=True))))
            for _ in range(iterations):
                keep(_timed(v, "ppo", lambda r=runner, a=algo: _answered(r, a.train)))
        finally:
            algo.stop()
    return rows


def _answered(runner, run: Callable[[], object]) -> int:
    """Decisions the runner's envs answered during ``run()``."""
    def count() -> int:
        return sum(e.unwrapped.decisions for e in runner.env.envs)

    before = count()
    run()
    return count() - before
