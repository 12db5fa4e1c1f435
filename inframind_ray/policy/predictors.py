"""Latency and output-length predictors fitted on recorded call telemetry (Parquet).

The executor's price list (``policy/latency.py``) predicts a call's latency analytically from the
model's profile, the live metrics and the outcome model's expected output length. These
predictors calibrate it on recorded calls (``calls.parquet`` of ``inframind bench``, which keeps
the chosen model's metrics at dispatch):

- length: per (model, strategy), the median recorded output length;
- latency: per model, ``c0 + a * service + b * wait`` where ``service`` and ``wait`` are the
  analytic terms (``latency_terms``) at the recorded dispatch metrics and the predicted length;
  ``c0, a, b >= 0`` by non-negative least squares on relative residuals.

Saved as JSON (no pickles). ``inframind predictors`` fits on one telemetry file and reports both
the analytic and the fitted predictor's error on another, recorded on other items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.optimize import nnls

from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import LoadSnapshot, ModelInfo, PoolInfo
from inframind_ray.errors import ConfigError
from inframind_ray.policy.latency import latency_terms, predict_latency

LOAD_COLUMNS = ("load_waiting", "load_running", "load_kv_usage", "load_e2e_ewma_s",
                "load_replicas")
FORMAT = "inframind-predictors/1"


@dataclass
class Predictors:
    """Fitted per-model latency coefficients and per-(model, strategy) output lengths."""

    lengths: dict[str, dict[str, float]] = field(default_factory=dict)
    latency: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    n_rows: int = 0

    def length(self, info: ModelInfo, strategy: Strategy) -> float:
        """Predicted output tokens (the outcome model's expectation if never recorded)."""
        return self.lengths.get(info.name, {}).get(strategy.value,
                                                   info.expected_tokens[strategy])

    def latency_s(self, info: ModelInfo, load: LoadSnapshot, prompt_tokens: int,
                  strategy: Strategy) -> float:
        """Predicted seconds of one new call (the analytic terms, recalibrated)."""
        service, wait = latency_terms(info, load, prompt_tokens, self.length(info, strategy))
        c0, a, b = self.latency.get(info.name, (0.0, 1.0, 1.0))
        return c0 + a * service + b * wait

    def save(self, path: str | Path) -> None:
        """Write JSON."""
        Path(path).write_text(json.dumps({"format": FORMAT, "n_rows": self.n_rows,
                                          "lengths": self.lengths,
                                          "latency": {m: list(c) for m, c in self.latency.items()}},
                                         indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Predictors:
        """Read JSON written by ``save``; ConfigError in one line if it is not one."""
        try:
            d = json.loads(Path(path).read_text())
            if d.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            lat = {m: (float(c[0]), float(c[1]), float(c[2])) for m, c in d["latency"].items()}
            lengths = {m: {s: float(v) for s, v in per.items()} for m, per in d["lengths"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise ConfigError("predictors", f"{path}: not a predictors file ({e})") from None
        return cls(lengths, lat, int(d.get("n_rows", 0)))


def read_calls(path: str | Path, pool: PoolInfo) -> pd.DataFrame:
    """Completed calls of pool models that carry dispatch metrics; ConfigError if none."""
    try:
        t = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise ConfigError("calls", f"{path}: not a readable Parquet file ({e})") from None
    missing = [c for c in ("model", "strategy", "status", "latency_s", "prompt_tokens",
                           "output_tokens", *LOAD_COLUMNS) if c not in t.column_names]
    if missing:
        raise ConfigError("calls", f"{path}: no column(s) {', '.join(missing)}; record the "
                          "telemetry with `inframind bench` (its calls.parquet)")
    rows = t.to_pandas()
    keep = ((rows["status"] == "ok") & rows["load_waiting"].notna() & (rows["latency_s"] > 0)
            & rows["model"].isin([m.name for m in pool.models]))
    rows = rows[keep].reset_index(drop=True)
    if rows.empty:
        raise ConfigError("calls", f"{path}: no completed call of this pool's models")
    return rows


def _loads(df: pd.DataFrame) -> list[LoadSnapshot]:
    return [LoadSnapshot(str(r.model), int(r.load_replicas), int(r.load_waiting),
                      int(r.load_running), float(r.load_kv_usage), 0.0, 0.0,
                      float(r.load_e2e_ewma_s), 0.0)
            for r in df.itertuples(index=False)]


def fit(df: pd.DataFrame, pool: PoolInfo) -> Predictors:
    """Fit lengths, then latency coefficients with the fitted lengths (see the module doc)."""
    lengths: dict[str, dict[str, float]] = {}
    for (m, s), g in df.groupby(["model", "strategy"]):
        lengths.setdefault(str(m), {})[str(s)] = float(np.median(g["output_tokens"]))
    pred = Predictors(lengths, {}, len(df))
    loads = _loads(df)
    for m in pool.models:
        idx = np.flatnonzero(df["model"].to_numpy() == m.name)
        if len(idx) < 3:
            continue
        terms = np.array([latency_terms(m, loads[i], int(df["prompt_tokens"].iat[i]),
                                        pred.length(m, Strategy(df["strategy"].iat[i])))
                          for i in idx])
        y = df["latency_s"].to_numpy()[idx]
        a = np.column_stack([np.ones(len(idx)), terms]) / y[:, None]
        coef, _ = nnls(a, np.ones(len(idx)))
        pred.latency[m.name] = (float(coef[0]), float(coef[1]), float(coef[2]))
    return pred


def _rel(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    e = np.abs(pred - true) / true
    return {"median": round(float(np.median(e)), 4), "p90": round(float(np.quantile(e, 0.9)), 4)}


def evaluate(pred: Predictors, df: pd.DataFrame, pool: PoolInfo) -> dict:
    """Relative errors (median, p90) of the analytic and the fitted predictors, per model, on
    ``df`` (latency of every completed call; output length per (model, strategy))."""
    loads = _loads(df)
    out: dict = {"n_rows": len(df), "latency": {}, "length": {}}
    for m in pool.models:
        idx = np.flatnonzero(df["model"].to_numpy() == m.name)
        if not len(idx):
            continue
        strat = [Strategy(df["strategy"].iat[i]) for i in idx]
        prompt = df["prompt_tokens"].to_numpy()[idx]
        y = df["latency_s"].to_numpy()[idx]
        analytic = np.array([predict_latency(m, loads[i], int(p), m.expected_tokens[s])
                             for i, p, s in zip(idx, prompt, strat, strict=True)])
        fitted = np.array([pred.latency_s(m, loads[i], int(p), s)
                           for i, p, s in zip(idx, prompt, strat, strict=True)])
        out["latency"][m.name] = {"n": len(idx), "analytic": _rel(analytic, y),
                                  "fitted": _rel(fitted, y)}
        for s in sorted(set(strat), key=lambda x: x.value):
            sel = np.array([x is s for x in strat])
            tokens = df["output_tokens"].to_numpy()[idx][sel].astype(float)
            out["length"][f"{m.name}/{s.value}"] = {
                "n": int(sel.sum()),
                "analytic": _rel(np.full(len(tokens), m.expected_tokens[s]), tokens),
                "fitted": _rel(np.full(len(tokens), pred.length(m, s)), tokens)}
    return out
