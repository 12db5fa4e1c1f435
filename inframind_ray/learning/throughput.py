"""``inframind train-speed``: environment decisions per second of training, phase by phase.

For each variant (sampler and sub-simulations per env) of one training config, three phases on
the same config, seed and machine, one after the other:

- ``raw``: the env alone, every pending decision answered by a uniform choice among its valid
  actions (no network);
- ``sampling``: the env runner with the config's real modules (``env_runner.sample``);
- ``ppo``: whole ``algo.train()`` iterations (sampling and learning): decisions answered, and
  decisions trained (the learner's batch, counted as ``metrics.jsonl``'s ``decisions_per_s``).

Every row has wall time and CPU time (user + system of this process, where RLlib samples and
learns with ``num_env_runners: 0``, plus the remote env runners' processes otherwise; with
remote runners the sampling phase is skipped), so a number measured on a shared machine can be
read against its load (the 1-minute load average, sampled before and after each row). With
``overlap`` (learning/overlap.py) a ppo row counts the batch that iteration learned from (sampled
while the previous one learned) and its CPU time is this process's only: asking the runner
would wait for the sample in flight.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from inframind_ray.errors import ConfigError
from inframind_ray.learning.train import build_algo
from inframind_ray.learning.train_config import TrainConfig

PHASES = ("raw", "sampling", "ppo")


@dataclass(frozen=True)
class Variant:
    """How decisions are sampled: RLlib's runner or ``DecisionEnvRunner``; sub-simulations per
    env; remote env runners (0: sampling in this process); sampling overlapped with learning
    (learning/overlap.py); the learner's torch threads (None: the config's)."""

    sampler: str
    num_sims: int
    runners: int = 0
    overlap: bool = False
    threads: int | None = None

    @classmethod
    def parse(cls, text: str) -> Variant:
        """``SAMPLER:SIMS[:RUNNERS[:overlap]][@THREADS]``, e.g. ``decisions:16``,
        ``decisions:16:2``, ``decisions:16@2`` or ``decisions:16:1:overlap@1``."""
        body, _, threads = text.partition("@")
        parts = body.split(":")
        overlap = len(parts) == 4 and parts[3] == "overlap"
        if (len(parts) not in (2, 3, 4) or (len(parts) == 4 and not overlap)
                or parts[0] not in ("rllib", "decisions")
                or not all(p.isdigit() for p in parts[1:3]) or int(parts[1]) < 1
                or (overlap and (parts[0] != "decisions" or int(parts[2]) != 1))
                or ("@" in text and (not threads.isdigit() or int(threads) < 1))):
            raise ConfigError("variants", f"{text!r} is not SAMPLER:SIMS[:RUNNERS[:overlap]]"
                              "[@THREADS] (sampler rllib or decisions, sims >= 1, runners "
                              ">= 0; overlap needs decisions and 1 runner; threads >= 1)")
        return cls(parts[0], int(parts[1]), int(parts[2]) if len(parts) >= 3 else 0, overlap,
                   int(threads) if threads else None)


@dataclass(frozen=True)
class SpeedRow:
    """One measured phase of one variant."""

    sampler: str
    num_sims: int
    runners: int
    phase: str
    decisions: int
    wall_s: float
    cpu_s: float
    load_before: float
    load_after: float
    trained: int | None = None
    overlap: bool = False
    threads: int | None = None
    """The learner's torch threads."""

    @property
    def per_s(self) -> float:
        """Decisions per wall-clock second."""
        return self.decisions / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def trained_per_s(self) -> float | None:
        """Trained decisions (the learner's batch) per wall-clock second (ppo rows)."""
        if self.trained is None:
            return None
        return self.trained / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_cpu_s(self) -> float:
        """Decisions per CPU second of this process."""
        return self.decisions / self.cpu_s if self.cpu_s > 0 else 0.0

    def as_dict(self) -> dict:
        """The row with its rates (JSON)."""
        t = self.trained_per_s
        return asdict(self) | {"decisions_per_s": round(self.per_s, 1),
                               "decisions_per_cpu_s": round(self.per_cpu_s, 1),
                               "trained_per_s": None if t is None else round(t, 1)}


def _cpu(group=None) -> float:
    """CPU seconds of this process, plus those of ``group``'s remote env runners if given."""
    def own(*_) -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    remote = sum(group.foreach_env_runner(own, local_env_runner=False)) if group else 0.0
    return own() + remote


def _timed(v: Variant, phase: str, run: Callable[[], int | tuple[int, int | None]],
           group=None, threads: int | None = None) -> SpeedRow:
    """``run`` returns the decisions answered, or (answered, trained)."""
    load0, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), _cpu(group)
    n = run()
    n, trained = n if isinstance(n, tuple) else (n, None)  # trained: None if not counted
    return SpeedRow(v.sampler, v.num_sims, v.runners, phase, n,
                    round(time.perf_counter() - wall0, 2), round(_cpu(group) - cpu0, 2), load0,
                    os.getloadavg()[0], trained, v.overlap, threads)


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
        c.env.num_sims, c.ppo.sampler, c.ppo.num_env_runners = (v.num_sims, v.sampler,
                                                                  v.runners)
        c.ppo.overlap = v.overlap
        if v.threads is not None:
            c.ppo.torch_threads = v.threads
        t = c.ppo.torch_threads
        env = TwinOrchestrationEnv(c.env.model_dump())  # built untimed, as RLlib's are
        keep(_timed(v, "raw", lambda env=env, c=c: raw_decisions(env, decisions, c.seed),
                    threads=t))
        algo = build_algo(c)
        try:
            group = algo.env_runner_group
            if c.ppo.num_env_runners == 0:  # RLlib's own sample call, in this process
                runner = group.local_env_runner
                keep(_timed(v, "sampling", lambda g=group, r=runner: _answered(
                    g, lambda: r.sample(num_timesteps=decisions, explore=True)), threads=t))
            elif v.overlap:  # the remote runner's own call, so both variants start their
                # ppo rows with queries in flight
                keep(_timed(v, "sampling", lambda g=group: _answered(
                    g, lambda: g.foreach_env_runner(_sample_rows(decisions),
                                                    local_env_runner=False)),
                    group, threads=t))
            last = [0, 0]  # lifetime (answered, trained) after the previous iteration
            for _ in range(iterations):
                if v.overlap:  # counted from the results: a call to the runner would wait
                    keep(_timed(v, "ppo", lambda a=algo, p=last: _overlapped(a, p), threads=t))
                else:
                    keep(_timed(v, "ppo", lambda g=group, a=algo: _iteration(g, a),
                                group if v.runners else None, threads=t))
        finally:
            algo.stop()
    return rows


def _iteration(group, algo) -> tuple[int, int | None]:
    """One ``algo.train()``: (decisions answered, decisions handed to the learner:
    ``DecisionEnvRunner.returned``, None with RLlib's runner). Decisions of queries still in
    flight are trained in a later iteration, so early iterations answer more than they train;
    over a run the two counts meet."""
    def returned() -> int | None:
        counts = group.foreach_env_runner(lambda r: getattr(r, "returned", None))
        return None if any(c is None for c in counts) else sum(counts)

    before = returned()
    answered = _answered(group, algo.train)
    after = returned()
    return answered, None if before is None or after is None else after - before


def _sample_rows(n: int) -> Callable:
    """A remote ``sample_rows`` call whose metrics are reduced and dropped, so that the first
    ppo row's lifetime counts (``_overlapped``) start from zero."""
    def run(runner) -> int:
        rows = runner.sample_rows(num_timesteps=n)
        runner.get_metrics()
        return len(rows)
    return run


def _overlapped(algo, last: list[int]) -> tuple[int, int]:
    """One ``algo.train()`` of ``ppo.overlap``: the decisions answered and trained in the batch
    it learned from, from the runner's lifetime metrics in the result (asking the runner
    directly would wait for the sample in flight)."""
    from inframind_ray.learning.env_runner import ANSWERED, DECISIONS

    runners = algo.train().get("env_runners", {})
    now = [int(runners.get(ANSWERED, 0)), int(runners.get(DECISIONS, 0))]
    answered, trained = now[0] - last[0], now[1] - last[1]
    last[:] = now
    return answered, trained


def _answered(group, run: Callable[[], object]) -> int:
    """Decisions the envs of every env runner answered during ``run()``."""
    def count() -> int:
        return sum(group.foreach_env_runner(
            lambda r: sum(e.unwrapped.decisions for e in r.env.envs) if r.env else 0))

    before = count()
    run()
    return count() - before
