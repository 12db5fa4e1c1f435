"""Cells as windows of time (--duration), the capacity bisection, and load factors -> rates."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from inframind_ray.bench.capacity import (
    CapacitySpec,
    Probe,
    bisect_capacity,
    measure_capacity,
)
from inframind_ray.bench.sweep import SweepSpec, queries_for, rates_for
from inframind_ray.errors import ConfigError
from inframind_ray.tasks.workload import WorkloadSpec, arrival_times, sample_items


def _step(threshold: float):
    calls = []

    def f(rate: float) -> Probe:
        calls.append(rate)
        return Probe(rate, 1, {"always-strongest": 0.9 if rate < threshold else 0.3})

    return f, calls


@pytest.mark.parametrize(("threshold", "start"), [(137.0, 60.0), (137.0, 1000.0), (4321.0, 60.0)])
def test_bisection_finds_a_known_threshold(threshold, start):
    """From below or above, the bracket closes on the step to within 5 %."""
    f, calls = _step(threshold)
    res = bisect_capacity(f, start=start)
    assert res.lo < threshold <= res.hi and res.hi / res.lo <= 1.05
    assert abs(res.capacity_rpm / threshold - 1) < 0.05
    assert [p.rate_per_min for p in res.probes] == calls and len(calls) < 20


def test_bisection_reports_a_crossing_out_of_range():
    with pytest.raises(ConfigError, match="keeps >= 50 %"):
        bisect_capacity(_step(1e9)[0])
    with pytest.raises(ConfigError, match="below 50 %"):
        bisect_capacity(_step(0.1)[0])


def test_duration_gives_rate_times_duration_queries(pool):
    """A cell of D seconds at R req/min holds R x D / 60 queries whose arrivals span about D
    seconds; a fixed --queries count still applies as before."""
    spec = SweepSpec(pool, "constrained", ("random",), (30.0, 600.0, 3000.0), None,
                     duration_s=120.0)
    cells = spec.cells()
    assert sorted(c.workload.n_queries for c in cells) == [60, 1200, 6000]
    assert queries_for(0.1, 60) == 1
    for c in cells:
        t = arrival_times(c.workload)
        assert abs(t[-1] - 120.0) < 0.25 * 120.0
    fixed = SweepSpec(pool, "constrained", ("random",), (30.0, 600.0), 50)
    assert {c.workload.n_queries for c in fixed.cells()} == {50}
    # more MMLU-Pro queries than the test split holds (2,474): every item, then again
    ids = sample_items(WorkloadSpec(3000, 6000))
    assert len(ids) == 6000 and len(set(ids[:2474])) == 2474


def test_load_factors_map_to_rates(pool):
    """Load factors are rates over the capacity; cells and their rows carry both."""
    from inframind_ray.bench.runner import run_cell

    assert rates_for((0.1, 0.5, 1, 2, 3), 400.0) == (40.0, 200.0, 400.0, 800.0, 1200.0)
    spec = SweepSpec(pool, "constrained", ("always-strongest",), rates_for((0.5, 2), 60.0),
                     None, duration_s=10.0, capacity_rpm=60.0)
    cells = sorted(spec.cells(), key=lambda c: c.workload.rate_per_min)
    assert [(c.workload.rate_per_min, c.load_factor, c.workload.n_queries) for c in cells] == [
        (30.0, 0.5, 5), (120.0, 2.0, 20)]
    row = run_cell(cells[0]).summary
    assert (row["rate_per_min"], row["load_factor"], row["n_queries"]) == (30.0, 0.5, 5)


def test_capacity_of_a_small_real_pool(pool):
    """The constrained pool (its 70B holds 6 sequences) with always-strongest alone in 40 s
    cells: the best attainment is >= 50 % at the bracket's low end and below at its high end."""
    spec = CapacitySpec(pool, duration_s=40.0, baselines=("always-strongest",), rel_tol=0.1)
    res = measure_capacity(spec)
    at = {p.rate_per_min: p.best for p in res.probes}
    assert at[res.lo] >= 0.5 > at[res.hi] and res.hi / res.lo <= 1.1
    assert 60 < res.capacity_rpm < 1000  # 6 slots of a 70B: well above idle, far below 1000


def test_bench_load_factors_cli(tmp_path):
    """`bench --load-factors F --capacity C` runs rates F x C for --duration seconds each and
    writes both numbers in every row; contradictory options fail in one line."""
    cmd = [sys.executable, "-m", "inframind_ray.cli", "bench", "-c", "constrained",
           "--policies", "always-strongest", "--no-progress", "--jobs", "1"]
    r = subprocess.run([*cmd, "--load-factors", "0.5,1", "--capacity", "60", "--duration", "20",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "30 req/min x 20 s = 10 queries" in r.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    rows = sorted(doc["rows"], key=lambda x: x["rate_per_min"])
    assert [(x["rate_per_min"], x["load_factor"], x["n_queries"]) for x in rows] == [
        (30.0, 0.5, 10), (60.0, 1.0, 20)]
    assert doc["meta"]["capacity"]["capacity_rpm"] == 60 and doc["meta"]["duration_s"] == 20
    r = subprocess.run([*cmd, "--rates", "10", "--load-factors", "1"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert np.isclose(queries_for(45, 20), 15)
