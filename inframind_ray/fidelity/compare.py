"""Score a case: the twin's per-request TTFT and E2E errors against the real engine, queue
depth, completion order and throughput (one ``validate.json`` row)."""

from __future__ import annotations

import numpy as np

from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.profile import FittedProfile
from inframind_ray.fidelity.real import EngineInfo
from inframind_ray.fidelity.twin_replay import replay_twin


def queue_depth(rows: list[dict], grid: np.ndarray) -> np.ndarray:
    """Requests arrived and not yet finished at each instant of ``grid``."""
    a = np.array([r["arrival_s"] for r in rows])
    f = np.array([r["finish_s"] for r in rows])
    return (a[None, :] <= grid[:, None]).sum(1) - (f[None, :] <= grid[:, None]).sum(1)


def _rel_errors(real: list[dict], twin: list[dict]) -> tuple[list[int], np.ndarray, np.ndarray,
                                                            np.ndarray, np.ndarray]:
    """Requests finished on both sides; per-request TTFT and E2E of each side."""
    ok = [k for k, (r, t) in enumerate(zip(real, twin, strict=True))
          if r["status"] == "ok" and t["status"] == "finished"]
    rt = np.array([real[k]["first_token_s"] - real[k]["arrival_s"] for k in ok])
    tt = np.array([twin[k]["first_token_s"] - twin[k]["arrival_s"] for k in ok])
    re = np.array([real[k]["finish_s"] - real[k]["arrival_s"] for k in ok])
    te = np.array([twin[k]["finish_s"] - twin[k]["arrival_s"] for k in ok])
    return ok, rt, tt, re, te


def _throughput(rows: list[dict]) -> float:
    """Completed requests per minute over the span from first arrival to last finish."""
    fin = [r["finish_s"] for r in rows if r["status"] in ("ok", "finished")]
    span = max(fin) - min(r["arrival_s"] for r in rows)
    return 60.0 * len(fin) / span


def _r5(x: float) -> float:
    return round(float(x), 5)


def _error_fields(rt: np.ndarray, tt: np.ndarray, re: np.ndarray, te: np.ndarray,
                  prefix: str = "") -> dict:
    """Median and p90 of the per-request TTFT and E2E errors |twin - real| / real."""
    out = {}
    for name, real, twin in (("ttft", rt, tt), ("e2e", re, te)):
        err = np.abs(twin - real) / real
        out[f"{prefix}{name}_median_rel_err"] = _r5(np.median(err))
        out[f"{prefix}{name}_p90_rel_err"] = _r5(np.quantile(err, 0.9))
    return out


def compare(case: Case) -> dict:
    """One validate.json row: the anchored twin's errors, and the fixed profile's beside them
    when the case was anchored."""
    from scipy.stats import kendalltau

    real, twin = case.real, case.twin
    ok, rt, tt, re, te = _rel_errors(real, twin)
    end = max(max(r["finish_s"] for r in real), max(t["finish_s"] for t in twin))
    grid = np.arange(0.0, end, 0.01)
    dr, dt = queue_depth(real, grid), queue_depth(twin, grid)
    tau = kendalltau([real[k]["finish_s"] for k in ok], [twin[k]["finish_s"] for k in ok])[0]
    fixed = {}
    if case.twin_fixed:
        fixed = _error_fields(*_rel_errors(real, case.twin_fixed)[1:], prefix="fixed_")
        fixed["fixed_throughput_twin"] = _r5(_throughput(case.twin_fixed))
    return dict(
        case=case.name, rate_per_min=case.rate_per_min,
        **_error_fields(rt, tt, re, te),
        throughput_real=_r5(_throughput(real)), throughput_twin=_r5(_throughput(twin)),
        n_requests=len(real), n_compared=len(ok),
        ttft_median_real_s=_r5(np.median(rt)), ttft_median_twin_s=_r5(np.median(tt)),
        e2e_median_real_s=_r5(np.median(re)), e2e_median_twin_s=_r5(np.median(te)),
        queue_depth_mean_real=_r5(dr.mean()), queue_depth_mean_twin=_r5(dt.mean()),
        queue_depth_mae=_r5(np.abs(dr - dt).mean()),
        finish_order_kendall_tau=_r5(tau),
        preemptions_real=int(sum(r["preemptions"] for r in real)),
        preemptions_twin=int(sum(t["preemptions"] for t in twin)),
        engine=case.engine,
        speed_scale=_r5(case.speed),
        probe_speed_before=None if case.speed_before is None else _r5(case.speed_before),
        probe_speed_after=None if case.speed_after is None else _r5(case.speed_after),
        **fixed,
    )


def score_case(case: Case, fp: FittedProfile, info: EngineInfo, kv_tokens: int) -> dict:
    """Replay one case's real side on the twin and compare: its validate.json row."""
    replay_twin(case, fp, info, kv_tokens)
    return {**compare(case), "twin_kv_capacity_tokens": kv_tokens}
