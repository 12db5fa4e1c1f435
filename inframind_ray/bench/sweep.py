"""A sweep: every (scheduling, policy, rate) cell, in parallel processes, with a progress bar."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from inframind_ray import assumptions as A
from inframind_ray.config import PoolConfig
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec, sample_task_items

if TYPE_CHECKING:  # the runner (policies, torch) loads only when a sweep runs
    from inframind_ray.bench.runner import CellResult, CellSpec

DEFAULT_RATES = (10.0, 30.0, 50.0, 100.0, 150.0, 200.0, 300.0)
"""Arrival rates (req/min) of the default sweep: near idle to far past saturation."""
DEFAULT_POLICIES = ("inframind", "always-strongest", "static-task", "moa", "random",
                    "round-robin", "least-loaded", "infra-heuristic", "oracle")
"""Policies of the default sweep (the topology heuristics are opt-in)."""
DEFAULT_DURATION_S = 120.0
"""Simulated seconds of arrivals per (policy, rate) cell of ``inframind bench`` and per probe of
``inframind capacity`` (the query count is rate x duration): longer than the 20-90 s budgets, so
a queue past saturation outgrows them within the cell, and short enough that a sweep to 3x the
capacity of a realistic pool (thousands of req/min) takes minutes on 2 cores."""


def rates_for(load_factors: Sequence[float], capacity_rpm: float) -> tuple[float, ...]:
    """Arrival rates (req/min) of load factors over a capacity (rounded to 1e-3 req/min)."""
    return tuple(round(f * capacity_rpm, 3) for f in load_factors)


def queries_for(rate_per_min: float, duration_s: float) -> int:
    """Queries of a cell whose arrivals span ``duration_s`` at ``rate_per_min`` (at least 1)."""
    return max(1, round(rate_per_min * duration_s / 60.0))


@dataclass(frozen=True)
class SweepSpec:
    """A whole benchmark."""

    pool: PoolConfig
    pool_source: str
    policies: tuple[str, ...]
    rates: tuple[float, ...]
    n_queries: int | None  # a fixed count per cell; None: rate x duration_s
    arrivals: str = "poisson"
    split: str = "test"
    budget_range_s: tuple[float, float] = A.BUDGET_RANGE_S
    seed: int = 0
    scheduling: tuple[str, ...] = ()  # queue orders to compare (empty: the pool's)
    checkpoint: str | None = None
    metrics_period_s: float = 0.0
    pool_history: bool = False
    tasks: tuple[tuple[str, float], ...] = MMLU_ONLY  # (task family, share of the queries)
    deadlines: bool = True  # False: budget-free (calls carry no deadline; latency only)
    duration_s: float | None = None  # arrivals span this many simulated seconds per cell
    capacity_rpm: float | None = None  # rates are load factors x this (bench --load-factors)
    controllers: tuple[str, ...] = ("off",)  # execution controller variants (off, on, record)
    controller_checkpoint: str | None = None  # of 'on' (default: the shipped controller)

    def queries_at(self, rate: float) -> int:
        """Queries of the cell at ``rate``: the fixed count, else rate x duration."""
        if self.n_queries is not None:
            return self.n_queries
        if self.duration_s is None:
            raise ValueError("a sweep needs n_queries or duration_s")
        return queries_for(rate, self.duration_s)

    def load_factor(self, rate: float) -> float | None:
        """``rate`` over the pool's capacity, when the sweep was given one."""
        return None if self.capacity_rpm is None else round(rate / self.capacity_rpm, 6)

    @property
    def schedulings(self) -> tuple[str, ...]:
        """The queue orders of the sweep's cells (the pool's when none is listed)."""
        return self.scheduling or (self.pool.engine.scheduling,)

    def cells(self) -> list[CellSpec]:
        """One cell per (scheduling, policy, rate, controller), rates outermost so slow cells
        start early."""
        from inframind_ray.bench.runner import CellSpec

        return [
            CellSpec(
                self.pool,
                p,
                WorkloadSpec(r, self.queries_at(r), self.arrivals, self.split,
                             self.budget_range_s, self.seed, self.tasks),
                s,
                self.checkpoint,
                self.metrics_period_s,
                self.pool_history,
                self.load_factor(r),
                deadlines=self.deadlines,
                controller=c,
                controller_checkpoint=self.controller_checkpoint,
            )
            for r in sorted(self.rates, reverse=True)
            for p in self.policies
            for s in self.schedulings
            for c in self.controllers
        ]


def run_sweep(spec: SweepSpec, jobs: int | None = None, progress: bool = True
              ) -> tuple[list[CellResult], float]:
    """Run every cell; return results in (policy, rate) order and the wall time."""
    from inframind_ray.bench.runner import run_cell

    cells = spec.cells()
    cells[0].workload.validate()
    sample_task_items(cells[0].workload)  # fail here, in one line, not inside a worker
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cells)))
    t0 = time.perf_counter()
    results: list[CellResult] = []
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), disable=not progress) as bar:
        task = bar.add_task("simulating", total=len(cells))
        if jobs == 1:
            for c in cells:
                results.append(run_cell(c))
                bar.advance(task)
        else:
            # not fork: a forked child of a process whose torch thread pool is up can deadlock
            ctx = mp.get_context("forkserver")
            with ProcessPoolExecutor(jobs, mp_context=ctx) as ex:
                futs = [ex.submit(run_cell, c) for c in cells]
                for f in as_completed(futs):
                    results.append(f.result())
                    bar.advance(task)
    order = {p: i for i, p in enumerate(spec.policies)}
    sched = {s: i for i, s in enumerate(spec.schedulings)}
    ctl = {c: i for i, c in enumerate(spec.controllers)}
    results.sort(key=lambda r: (sched[r.spec.scheduling], order[r.spec.policy],
                                ctl[r.spec.controller], r.spec.workload.rate_per_min))
    return results, time.perf_counter() - t0


def sequence_arg(text: str, cast=float) -> Sequence:
    """'10,30,50' -> (10.0, 30.0, 50.0)."""
    return tuple(cast(x) for x in text.split(",") if x.strip())
