"""Fit the twin's iteration-time model to the rows of a profiling grid (``fidelity.grid``).

Relative residuals; an ``nnls`` start refined by a robust soft-L1 ``least_squares``, of
``t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K`` plus a per-request front-end delay ``d``
(tokenization, IPC, output streaming; the engine model has no such term, the replay adds it to
each arrival):

- lone requests (b = 1): ``TTFT = d + c0 + (c_prefill + c_kv) * P`` (the prefill iteration);
- every request: ``TPOT = c0 + c_decode*b + c_kv*b*(P + O/2)`` (mean decode iteration, the
  batch holding b*(P+j) KV tokens at decode step j).
"""

from __future__ import annotations

import math

import numpy as np

from inframind_ray.core.profile import IterationProfile
from inframind_ray.errors import ConfigError
from inframind_ray.fidelity.profile import FittedProfile, predict_lone

C0_FLOOR_S = 1e-6
"""The least ``c0`` a fit returns: the twin needs a positive iteration time (a profile with
``c0_s`` 0 is refused at load), and on a loaded machine's noisy TPOTs of batches 1 and 2 the
fit can put all of the constant into ``c_decode``."""


def _design(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equations (rows of [d, c0, c_prefill, c_decode, c_kv]), targets and a kind tag."""
    a, y, kind = [], [], []
    for r in rows:
        if r["status"] != "ok":
            continue
        b, p, o = r["batch"], r["prompt_tokens"], r["output_tokens"]
        if b == 1 and math.isfinite(r["ttft_s"]):
            a.append([1.0, 1.0, p, 0.0, p])
            y.append(r["ttft_s"])
            kind.append(0)
        if o > 1 and math.isfinite(r["tpot_s"]):
            a.append([0.0, 1.0, 0.0, b, b * (p + o / 2)])
            y.append(r["tpot_s"])
            kind.append(1)
    return np.asarray(a, float), np.asarray(y, float), np.asarray(kind)


def fit(rows: list[dict], per_batch: bool = True) -> FittedProfile:
    """Non-negative least squares on relative residuals; reports in-sample errors. With
    ``per_batch``, each measured batch size also gets a decode factor: the median ratio of its
    measured TPOTs to the linear model's (``IterationProfile.decode_factors``)."""
    from scipy.optimize import least_squares, nnls

    a, y, kind = _design(rows)
    if len(y) < 5 or not (kind == 0).any() or not (kind == 1).any():
        raise ConfigError("profile", "too few successful measurements to fit (need lone requests"
                          " and multi-token outputs)")
    w = 1.0 / y
    x0, _ = nnls(a * w[:, None], y * w)
    lower = np.array([0.0, C0_FLOOR_S, 0.0, 0.0, 0.0])
    # robust refinement: CPU timings carry outliers (other processes, OS scheduling)
    sol = least_squares(lambda x: (a @ x - y) * w, np.maximum(x0, lower) + 1e-9,
                        bounds=(lower, np.inf), loss="soft_l1", f_scale=0.05)
    x = sol.x
    d, c0, cp, cd, ck = (float(v) for v in x)
    pred = a @ x
    factors: tuple[tuple[int, float], ...] = ()
    if per_batch:
        tpot = kind == 1
        sizes = np.unique(a[tpot, 3]).astype(int)
        factors = tuple((int(b), round(float(np.median(y[tpot & (a[:, 3] == b)]
                                                      / pred[tpot & (a[:, 3] == b)])), 5))
                        for b in sizes)
        for b, f in factors:
            pred[(kind == 1) & (a[:, 3] == b)] *= f
    prof = IterationProfile(c0=c0, c_prefill=cp, c_decode=cd, c_kv=ck, decode_factors=factors)
    rel = np.abs(pred - y) / y
    e2e_err = []
    fp = FittedProfile(prof, d, {})
    for r in rows:
        if r["status"] == "ok" and r["output_tokens"] > 0:
            _, e2e = predict_lone(fp, r["prompt_tokens"], r["output_tokens"], r["batch"])
            e2e_err.append(abs(e2e - r["e2e_s"]) / r["e2e_s"])
    e2e_err = np.asarray(e2e_err)

    def q(v: np.ndarray, p: float) -> float:
        return round(float(np.quantile(v, p)), 5) if len(v) else float("nan")

    info = dict(
        source="inframind twin profile (per-request TTFT of lone requests, TPOT of every request)",
        method="relative residuals, scipy nnls start then least_squares soft_l1 (f_scale 0.05),"
               f" bounds >= 0 (c0 >= {C0_FLOOR_S:g} s); unknowns d, c0, c_prefill, c_decode, c_kv"
               + ("; then per batch size the median measured/linear TPOT ratio (decode_factors)"
                  if per_batch else ""),
        n_requests=int(sum(r["status"] == "ok" for r in rows)),
        n_failed=int(sum(r["status"] != "ok" for r in rows)),
        n_ttft_eqs=int((kind == 0).sum()), n_tpot_eqs=int((kind == 1).sum()),
        ttft_median_rel_err=q(rel[kind == 0], 0.5), ttft_p90_rel_err=q(rel[kind == 0], 0.9),
        tpot_median_rel_err=q(rel[kind == 1], 0.5), tpot_p90_rel_err=q(rel[kind == 1], 0.9),
        e2e_median_rel_err=q(e2e_err, 0.5), e2e_p90_rel_err=q(e2e_err, 0.9),
        e2e_max_rel_err=q(e2e_err, 1.0),
    )
    return FittedProfile(prof, d, info)
