"""Latency/length predictors fitted on recorded twin telemetry (real Parquet files): the bench
records dispatch metrics, the fit beats the analytic price list on held-out items, the JSON
round-trips, and bad files give one clear error."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.core.strategy import Strategy
from inframind_ray.errors import ConfigError
from inframind_ray.policy import predictors as P
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.workload import WorkloadSpec


def _telemetry(pool, split: str, seed: int, path) -> None:
    rows = []
    for policy in ("infra-heuristic", "least-loaded"):
        for rate in (30, 200):
            spec = CellSpec(pool, policy, WorkloadSpec(rate, 250, split=split, seed=seed))
            rows += [{"policy": policy, "rate_per_min": float(rate), **c}
                     for c in run_cell(spec).calls]
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope="module")
def setup(pool, tmp_path_factory):
    d = tmp_path_factory.mktemp("telemetry")
    _telemetry(pool, "train", 0, d / "train.parquet")
    _telemetry(pool, "val", 1, d / "val.parquet")
    info = build_pool_info(pool)
    return d, info


def test_bench_records_dispatch_metrics(setup):
    """Every completed call carries the chosen model's metrics at dispatch; under load some
    calls saw a queue."""
    d, info = setup
    t = P.read_calls(d / "train.parquet", info)
    assert t["load_replicas"].min() >= 1 and t["load_kv_usage"].between(0, 1).all()
    assert (t["load_waiting"] > 0).any() and (t["load_age_s"] >= 0).all()


def test_fit_beats_the_analytic_price_list_on_held_out_items(setup, tmp_path):
    """Fitted on train-split telemetry, evaluated on val-split telemetry of another seed: the
    fitted latency predictor's median error is below the analytic one's on the busiest model,
    and the fitted DeepThink length is closer to the recorded lengths; the JSON round-trips."""
    d, info = setup
    pred = P.fit(P.read_calls(d / "train.parquet", info), info)
    assert all(min(c) >= 0 for c in pred.latency.values())
    rep = P.evaluate(pred, P.read_calls(d / "val.parquet", info), info)
    busiest = max(rep["latency"], key=lambda m: rep["latency"][m]["n"])
    lat = rep["latency"][busiest]
    assert lat["fitted"]["median"] < lat["analytic"]["median"], lat
    ln = rep["length"][f"{busiest}/deepthink"]
    assert ln["fitted"]["median"] < ln["analytic"]["median"], ln

    pred.save(tmp_path / "p.json")
    back = P.Predictors.load(tmp_path / "p.json")
    m = info[busiest]
    t = P.read_calls(d / "val.parquet", info)
    load = P._loads(t)[0]
    for s in Strategy:
        assert back.latency_s(m, load, 500, s) == pytest.approx(pred.latency_s(m, load, 500, s))


def test_bad_files(setup, tmp_path):
    """Not Parquet, no dispatch columns, not a predictors file: ConfigError naming the field;
    the CLI says it in one line with exit 2."""
    _, info = setup
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(ConfigError, match="calls"):
        P.read_calls(junk, info)
    old = tmp_path / "old.parquet"
    pq.write_table(pa.table({"model": ["x"], "latency_s": [1.0]}), old)
    with pytest.raises(ConfigError, match="load_waiting"):
        P.read_calls(old, info)
    bad = tmp_path / "p.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ConfigError, match="predictors"):
        P.Predictors.load(bad)
    r = subprocess.run([sys.executable, "-m", "inframind_ray.cli", "predictors", "--calls",
                        str(junk), "--eval", str(junk), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "calls" in lines[0], r.stderr
