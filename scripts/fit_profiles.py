"""Fit per-(model, hardware, GPU count) iteration-time profiles for the vLLM engine twin.

The twin models one engine iteration (one forward pass of the running batch) as::

    t_iter = c0 + c_prefill * P + c_decode * B + c_kv * K        (seconds)

with P the prompt tokens prefilled in the iteration, B the sequences decoding one token and
K the KV-cache tokens held by all sequences of the batch during the iteration.

Data (read only here, never at twin run time):

* Argonne LLM-Inference-Bench ``Plots/All_results.csv``: static-batch offline vLLM runs with
  input length = output length = L and batch size b; end-to-end latency of the batch.
* Argonne ``Plots/Fig_22/all_results_TTFT_ITL.csv`` (and ``Fig_21``): time to first token of
  a 16 x 1024-token batch (single GPU) -- used as prefill equations.
* Argonne ``Plots/Fig_3/A100_H100_quant_all_results.csv``: extra fp16/fp16 Llama-3-8B H100 runs.
* splitwise-sim ``data/perf_model.csv``: measured Llama-2-70B prompt_time / token_time, used
  only as an out-of-sample cross-check.

Convention for a static batch of b prompts of length L producing L output tokens:

* iteration 0 (prefill): P = b*L, B = 0, K = b*L; it emits the first output token;
* iterations i = 1 .. L-1 (decode): P = 0, B = b, K = b*(L+i).

So the batch latency is L*c0 + b*L*c_prefill + b*(L-1)*c_decode + K_sum*c_kv, linear in the
coefficients, and each configuration is fitted by non-negative least squares on relative error.

Usage::

    .venv/bin/python scripts/fit_profiles.py --shared ../shared/data \
        --out inframind_ray/data/profiles.json [--plot docs/img/profile_fit.png]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from inframind_ray import assumptions as A

ARGONNE_COMMIT = "4211f5d4e9bc0145ed541b6d372d5d8223b44235"
SPLITWISE_COMMIT = "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0"


# Public model configs (config.json on the Hugging Face Hub). params_b: total parameters in
# billions; active_params_b: parameters touched per token (differs for MoE); bf16 weights.
ARCHITECTURES: dict[str, dict[str, float]] = {
    # models of the recorded MMLU-Pro outputs
    "Llama-2-7b-hf": {"params_b": 6.74, "layers": 32, "kv_heads": 32, "head_dim": 128},
    "Llama-2-13b-hf": {"params_b": 13.0, "layers": 40, "kv_heads": 40, "head_dim": 128},
    "Llama-2-70b-hf": {"params_b": 69.0, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3-8B": {"params_b": 8.03, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3-70B": {"params_b": 70.6, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3_1-8B": {"params_b": 8.03, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3_1-8B-Instruct": {"params_b": 8.03, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3_1-70B": {"params_b": 70.6, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Meta-Llama-3_1-70B-Instruct": {
        "params_b": 70.6, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Mistral-7B-v0.1": {"params_b": 7.24, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Mistral-7B-v0.2-hf": {"params_b": 7.24, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Mistral-7B-Instruct-v0.1": {"params_b": 7.24, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Mistral-7B-Instruct-v0.2": {"params_b": 7.24, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "mathstral-7B": {"params_b": 7.25, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Mixtral-8x7B-v0.1": {
        "params_b": 46.7, "active_params_b": 12.9, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Mixtral-8x7B-Instruct-v0.1": {
        "params_b": 46.7, "active_params_b": 12.9, "layers": 32, "kv_heads": 8, "head_dim": 128},
    "Phi-3-mini-4k-instruct": {"params_b": 3.82, "layers": 32, "kv_heads": 32, "head_dim": 96},
    "Qwen1.5-7B-Chat": {"params_b": 7.72, "layers": 32, "kv_heads": 32, "head_dim": 128},
    "Qwen1.5-72B-Chat": {"params_b": 72.3, "layers": 80, "kv_heads": 64, "head_dim": 128},
    "Qwen1.5-110B": {"params_b": 111.2, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Yi-6B": {"params_b": 6.06, "layers": 32, "kv_heads": 4, "head_dim": 128},
    "Yi-6b-Chat": {"params_b": 6.06, "layers": 32, "kv_heads": 4, "head_dim": 128},
    "Yi-34B": {"params_b": 34.4, "layers": 60, "kv_heads": 8, "head_dim": 128},
    "c4ai-command-r-v01": {"params_b": 35.0, "layers": 40, "kv_heads": 64, "head_dim": 128},
    "gemma-7b": {"params_b": 8.54, "layers": 28, "kv_heads": 16, "head_dim": 256},
    # further models measured by Argonne
    "Qwen2-7B": {"params_b": 7.62, "layers": 28, "kv_heads": 4, "head_dim": 128},
    "Qwen2-72B": {"params_b": 72.7, "layers": 80, "kv_heads": 8, "head_dim": 128},
    "Qwen1.5-7B": {"params_b": 7.72, "layers": 32, "kv_heads": 32, "head_dim": 128},
    "llama-7b": {"params_b": 6.74, "layers": 32, "kv_heads": 32, "head_dim": 128},
    "Aquila-7B": {"params_b": 7.26, "layers": 32, "kv_heads": 32, "head_dim": 128},
    "gpt-j-6b": {"params_b": 6.05, "layers": 28, "kv_heads": 16, "head_dim": 256},
    "bloom-7b1": {"params_b": 7.07, "layers": 30, "kv_heads": 32, "head_dim": 128},
    "opt-6.7b": {"params_b": 6.66, "layers": 32, "kv_heads": 32, "head_dim": 128},
}

# Argonne model id -> (profile short name, architecture key). DeciLM-7B (variable GQA per
# layer) is left out.
MODELS: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-2-7b-hf": ("llama2-7b", "Llama-2-7b-hf"),
    "meta-llama/Meta-Llama-3-8B": ("llama3-8b", "Meta-Llama-3-8B"),
    "mistralai/Mistral-7B-v0.1": ("mistral-7b", "Mistral-7B-v0.1"),
    "Qwen/Qwen2-7B": ("qwen2-7b", "Qwen2-7B"),
    "meta-llama/Llama-2-70b-hf": ("llama2-70b", "Llama-2-70b-hf"),
    "meta-llama/Meta-Llama-3-70B": ("llama3-70b", "Meta-Llama-3-70B"),
    "Qwen/Qwen2-72B": ("qwen2-72b", "Qwen2-72B"),
    "mistralai/Mixtral-8x7B-v0.1": ("mixtral-8x7b", "Mixtral-8x7B-v0.1"),
    "Qwen/Qwen1.5-7B": ("qwen1.5-7b", "Qwen1.5-7B"),
    "huggyllama/llama-7b": ("llama-7b", "llama-7b"),
    "BAAI/Aquila-7B": ("aquila-7b", "Aquila-7B"),
    "EleutherAI/gpt-j-6b": ("gpt-j-6b", "gpt-j-6b"),
    "bigscience/bloom-7b1": ("bloom-7b1", "bloom-7b1"),
    "facebook/opt-6.7b": ("opt-6.7b", "opt-6.7b"),
}


@dataclass(frozen=True)
class Hardware:
    """Accelerator assumptions (Argonne's systems: Polaris A100-40GB, H100 SXM, GH200-96GB)."""

    key: str
    name: str
    mem_gb: float
    bf16_tflops: float
    hbm_tbps: float


HARDWARE: dict[str, Hardware] = {
    "Nvidia H100 GPU": Hardware("h100", "H100-80GB", 80.0, 989.0, 3.35),
    "Nvidia A100 GPU": Hardware("a100", "A100-40GB", 40.0, 312.0, 1.555),
    "Nvidia GH200 GPU": Hardware("gh200", "GH200-96GB", 96.0, 989.0, 4.0),
}

GPU_MEM_UTIL = A.GPU_MEMORY_UTILIZATION  # vLLM default gpu_memory_utilization
ACT_RESERVE_GB = A.ACTIVATION_RESERVE_GB_PER_GPU  # per GPU, as the pool builder reserves
KV_SAFETY = 0.9  # rows needing more than this fraction of the estimated KV pool are excluded
MIN_POINTS = 8
W_TTFT = 3.0  # weight of a measured-TTFT equation relative to one e2e row (relative error)
W_PRIOR = 3.0  # weight of the roofline prefill prior where no TTFT is measured
MIN_ITER_FRACTION = 0.5  # rows faster than this x L x weight-read time are failed runs
OUTLIER_REL_ERR = 0.15  # first-pass residual above which a point is dropped ...
OUTLIER_MAX_FRACTION = 0.2  # ... unless more than this fraction of points would be dropped


@dataclass
class Point:
    """One measured static-batch run: input = output = L tokens, batch b, latency in s."""

    L: int
    b: int
    latency_s: float
    source: str


@dataclass
class Config:
    """All measurements for one (model, hardware, GPU count)."""

    model_id: str
    hw: Hardware
    n: int
    points: list[Point] = field(default_factory=list)
    ttft: list[tuple[int, int, float]] = field(default_factory=list)  # (L, b, ttft_s)


def kv_bytes_per_token(arch: dict[str, float]) -> float:
    """KV-cache bytes per token (K and V, all layers, bf16)."""
    return 2.0 * arch["layers"] * arch["kv_heads"] * arch["head_dim"] * 2.0


def kv_capacity_tokens(arch: dict[str, float], hw: Hardware, n: int) -> float:
    """Rough vLLM KV pool size in tokens: 0.9 of HBM minus bf16 weights minus a reserve."""
    mem = n * hw.mem_gb * 1e9 * GPU_MEM_UTIL - arch["params_b"] * 2e9 - n * ACT_RESERVE_GB * 1e9
    return max(mem, 0.0) / kv_bytes_per_token(arch)


def e2e_features(L: int, b: int) -> np.ndarray:
    """Coefficient multipliers [c0, c_prefill, c_decode, c_kv] of a static batch's latency."""
    k_sum = b * L + b * sum(L + i for i in range(1, L))
    return np.array([L, b * L, b * (L - 1), k_sum], dtype=float)


def prefill_features(L: int, b: int) -> np.ndarray:
    """Coefficient multipliers of the single prefill iteration (= TTFT)."""
    return np.array([1.0, b * L, 0.0, b * L], dtype=float)


def sig(x: float, digits: int = 5) -> float:
    """Round to ``digits`` significant digits."""
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def read_csv(path: Path) -> list[dict[str, str]]:
    """Read a CSV into dicts with stripped keys and values, skipping blank lines."""
    with path.open(newline="") as fh:
        rows = []
        for row in csv.DictReader(fh):
            clean = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            if any(clean.values()):
                rows.append(clean)
        return rows


def load_argonne(root: Path) -> dict[tuple[str, str, int], Config]:
    """Collect NVIDIA vLLM rows (e2e and TTFT) per (model, hardware, GPU count)."""
    plots = root / "argonne_llm_inference_bench" / "Plots"
    configs: dict[tuple[str, str, int], Config] = {}

    def cfg(model: str, hw: str, n: int) -> Config | None:
        if model not in MODELS or hw not in HARDWARE:
            return None
        key = (model, hw, n)
        if key not in configs:
            configs[key] = Config(model, HARDWARE[hw], n)
        return configs[key]

    for r in read_csv(plots / "All_results.csv"):
        if r["Framework"] != "vLLM":
            continue
        c = cfg(r["Model"], r["Hardware"], int(r["Num of Hardware"]))
        if c is not None:
            L, b = int(r["Input Output Length"]), int(r["Batch Size"])
            c.points.append(Point(L, b, float(r["Latency"]), "All_results.csv"))

    for r in read_csv(plots / "Fig_3" / "A100_H100_quant_all_results.csv"):
        if r["Framework"] != "vLLM" or r["kv_cache_dtype"] != "Weight = fp16, KV Cache = fp16":
            continue
        c = cfg(r["Model"], r["Hardware"], int(r["Num of Hardware"]))
        if c is not None:
            L, b = int(r["Input Output Length"]), int(r["Batch Size"])
            c.points.append(Point(L, b, float(r["latency"]), "Fig_3 fp16"))

    seen: set[tuple[str, str, int, int, int]] = set()
    for rel in ("Fig_22/all_results_TTFT_ITL.csv", "Fig_21/all_results_TTFT.csv"):
        for r in read_csv(plots / rel):
            if r["Framework"] != "vLLM":
                continue
            n = int(r["Num of Hardware"])
            c = cfg(r["Model"], r["Hardware"], n)
            if c is None:
                continue
            L, b = int(r["Input Length"]), int(r["Batch Size"])
            key = (r["Model"], r["Hardware"], n, L, b)
            if key in seen:
                continue
            seen.add(key)
            ttft = float(r.get("TTFT Latency") or r["Latency"])
            c.ttft.append((L, b, ttft))
    return configs


def load_splitwise(root: Path) -> dict[tuple[str, str, int], list[dict[str, float]]]:
    """Splitwise measurements keyed by (model, hardware, TP)."""
    out: dict[tuple[str, str, int], list[dict[str, float]]] = defaultdict(list)
    for r in read_csv(root / "splitwise_sim_perf_model" / "data" / "perf_model.csv"):
        key = (r["model"], r["hardware"], int(r["tensor_parallel"]))
        out[key].append({k: float(r[k]) for k in (
            "prompt_size", "batch_size", "token_size", "prompt_time", "token_time")})
    return out


def calibrate_mfu(configs: dict[tuple[str, str, int], Config]) -> dict[str, float]:
    """Prefill model-FLOPs utilisation per hardware, from measured TTFTs (median)."""
    per_hw: dict[str, list[float]] = defaultdict(list)
    for c in configs.values():
        arch = ARCHITECTURES[MODELS[c.model_id][1]]
        active = arch.get("active_params_b", arch["params_b"]) * 1e9
        for L, b, ttft in c.ttft:
            per_hw[c.hw.key].append(2 * active * b * L / ttft / (c.n * c.hw.bf16_tflops * 1e12))
    return {k: float(np.median(v)) for k, v in sorted(per_hw.items())}


def prior_c_prefill(c: Config, mfu: dict[str, float]) -> tuple[float, float]:
    """Roofline prefill cost per token (s) and the MFU it assumes."""
    arch = ARCHITECTURES[MODELS[c.model_id][1]]
    active = arch.get("active_params_b", arch["params_b"]) * 1e9
    u = mfu.get(c.hw.key, float(np.median(list(mfu.values()))))
    return 2 * active / (c.n * c.hw.bf16_tflops * 1e12 * u), u


def solve(
    pts: list[Point], ttft: list[tuple[int, int, float]], cp_prior: float | None,
) -> np.ndarray:
    """NNLS on relative residuals; prefill anchored by TTFT rows or by a roofline prior."""
    rows, rhs = [], []
    for p in pts:
        rows.append(e2e_features(p.L, p.b) / p.latency_s)
        rhs.append(1.0)
    for L, b, t in ttft:
        rows.append(W_TTFT * prefill_features(L, b) / t)
        rhs.append(W_TTFT)
    if not ttft and cp_prior is not None:
        rows.append(W_PRIOR * np.array([0.0, 1.0, 0.0, 0.0]))
        rhs.append(W_PRIOR)
    a = np.vstack(rows)
    # scale columns so NNLS is well conditioned, then unscale
    scale = np.ones(4)
    if cp_prior is not None:
        scale = np.array([1e-2, cp_prior, 1e-4, 1e-7])
    if not ttft and cp_prior is not None:
        a[-1, 1] = W_PRIOR / cp_prior  # relative prior: c_prefill / cp_prior ~ 1
    x, _ = nnls(a * scale, np.array(rhs), maxiter=10_000)
    return x * scale


def rel_errs(coef: np.ndarray, pts: list[Point]) -> np.ndarray:
    """|predicted - measured| / measured for each point."""
    pred = np.array([e2e_features(p.L, p.b) @ coef for p in pts])
    meas = np.array([p.latency_s for p in pts])
    return np.abs(pred - meas) / meas


def splitwise_check(
    coef: np.ndarray, rows: list[dict[str, float]],
) -> dict[str, float]:
    """Relative error of the profile vs splitwise prompt_time and per-iteration token_time."""
    ep, et = [], []
    for r in rows:
        P, b, T = r["prompt_size"] * r["batch_size"], r["batch_size"], r["token_size"]
        prompt = coef[0] + coef[1] * P + coef[3] * P
        k_avg = b * (r["prompt_size"] + T / 2.0)
        token = coef[0] + coef[2] * b + coef[3] * k_avg
        ep.append(abs(prompt - r["prompt_time"] / 1e3) / (r["prompt_time"] / 1e3))
        et.append(abs(token - r["token_time"] / 1e3) / (r["token_time"] / 1e3))
    bias_p = float(np.median([
        (coef[0] + (coef[1] + coef[3]) * r["prompt_size"] * r["batch_size"])
        / (r["prompt_time"] / 1e3) for r in rows]))
    bias_t = float(np.median([
        (coef[0] + coef[2] * r["batch_size"]
         + coef[3] * r["batch_size"] * (r["prompt_size"] + r["token_size"] / 2))
        / (r["token_time"] / 1e3) for r in rows]))
    return {
        "n_rows": len(rows),
        "prompt_time_median_rel_err": sig(float(np.median(ep)), 4),
        "prompt_time_max_rel_err": sig(float(np.max(ep)), 4),
        "prompt_time_median_ratio_pred_over_meas": sig(bias_p, 4),
        "token_time_median_rel_err": sig(float(np.median(et)), 4),
        "token_time_max_rel_err": sig(float(np.max(et)), 4),
        "token_time_median_ratio_pred_over_meas": sig(bias_t, 4),
    }


def fit_config(
    c: Config, mfu: dict[str, float], splitwise: dict[tuple[str, str, int], list[dict[str, float]]],
) -> tuple[str, dict[str, Any], list[tuple[float, float]]] | None:
    """Fit one configuration; returns (key, profile dict, [(measured, fitted)]) or None."""
    short, arch_key = MODELS[c.model_id]
    arch = ARCHITECTURES[arch_key]
    cap = kv_capacity_tokens(arch, c.hw, c.n)
    weight_read_s = arch["params_b"] * 2e9 / (c.n * c.hw.hbm_tbps * 1e12)
    failed = [p for p in c.points if p.latency_s < MIN_ITER_FRACTION * p.L * weight_read_s]
    valid = [p for p in c.points if p not in failed]
    fit_pts = [p for p in valid if p.b * 2 * p.L <= KV_SAFETY * cap]
    excluded = [p for p in valid if p not in fit_pts]
    if len(fit_pts) < MIN_POINTS:
        return None
    cp_prior, u = prior_c_prefill(c, mfu)
    coef = solve(fit_pts, c.ttft, cp_prior)
    notes: list[str] = []
    first = rel_errs(coef, fit_pts)
    bad = [p for p, e in zip(fit_pts, first, strict=True) if e > OUTLIER_REL_ERR]
    n_out = len(bad) if len(bad) <= OUTLIER_MAX_FRACTION * len(fit_pts) else 0
    if n_out:
        fit_pts = [p for p in fit_pts if p not in bad]
        notes.append("dropped outliers (first-pass rel err > "
                     f"{OUTLIER_REL_ERR}): " + ", ".join(f"L={p.L} b={p.b}" for p in bad))
        coef = solve(fit_pts, c.ttft, cp_prior)
    elif bad:
        notes.append(f"{len(bad)} points with rel err > {OUTLIER_REL_ERR} kept (too many to "
                     "call outliers: the linear model misfits this config)")
    kv_roof = kv_bytes_per_token(arch) / (c.n * c.hw.hbm_tbps * 1e12)
    fixed_kv = coef[3] < 0.25 * kv_roof
    if fixed_kv:
        notes.append(
            f"fitted c_kv {coef[3]:.3g} s below 1/4 of roofline {kv_roof:.3g}; "
            "c_kv fixed to roofline (KV bytes/token / aggregate HBM bandwidth), others refitted")
        coef = refit_fixed_kv(fit_pts, c.ttft, cp_prior, kv_roof)
    errs = rel_errs(coef, fit_pts)
    # leave-one-out and held-out-batch-size validation
    loo = []
    for i in range(len(fit_pts)):
        train = fit_pts[:i] + fit_pts[i + 1:]
        loo.append(
            rel_errs(refit_like(train, c.ttft, cp_prior, kv_roof, fixed_kv), [fit_pts[i]])[0])
    hold = []
    for bsz in sorted({p.b for p in fit_pts}):
        train = [p for p in fit_pts if p.b != bsz]
        test = [p for p in fit_pts if p.b == bsz]
        if len(train) >= 4:
            hold.extend(rel_errs(refit_like(train, c.ttft, cp_prior, kv_roof, fixed_kv), test))
    fit: dict[str, Any] = {
        "source": "argonne vLLM All_results.csv"
        + (" + Fig_3 fp16 rows" if any(p.source != "All_results.csv" for p in fit_pts) else ""),
        "n_points": len(fit_pts),
        "n_excluded_kv_limited": len(excluded),
        "n_excluded_failed_runs": len(failed),
        "n_excluded_outliers": n_out,
        "median_rel_err": sig(float(np.median(errs)), 4),
        "p90_rel_err": sig(float(np.percentile(errs, 90)), 4),
        "max_rel_err": sig(float(np.max(errs)), 4),
        "loo_median_rel_err": sig(float(np.median(loo)), 4),
        "heldout_median_rel_err": sig(float(np.median(hold)), 4) if hold else None,
        "heldout_scheme": "leave-one-batch-size-out",
        "prefill_anchor": (
            f"measured TTFT (Fig_22), {len(c.ttft)} eq." if c.ttft
            else f"roofline prior c_prefill = 2*active_params/(n*peak_bf16*MFU {u:.3f})"),
        "prefill_prior_s": sig(cp_prior, 5),
        "kv_roofline_s": sig(kv_roof, 5),
        "kv_capacity_tokens_est": int(cap),
    }
    if excluded:
        fit["kv_limited_median_rel_err"] = sig(float(np.median(rel_errs(coef, excluded))), 4)
    if c.ttft:
        pred = [prefill_features(L, b) @ coef for L, b, _ in c.ttft]
        fit["ttft_rel_err"] = sig(float(np.median(
            [abs(pv - t) / t for pv, (_, _, t) in zip(pred, c.ttft, strict=True)])), 4)
    if notes:
        fit["notes"] = notes
    sw_key = (short, f"{c.hw.key}-80gb", c.n)
    if sw_key in splitwise:
        fit["splitwise_check"] = splitwise_check(coef, splitwise[sw_key])
        fit["splitwise_check"]["config"] = f"{short} {c.hw.key}-80gb TP{c.n}"
    key = f"{short}@{c.hw.key}x{c.n}"
    prof = {
        "measured_model": c.model_id,
        "architecture": arch_key,
        "hardware": c.hw.name,
        "gpu_mem_gb": c.hw.mem_gb,
        "num_gpus": c.n,
        "c0_s": sig(coef[0]),
        "c_prefill_s": sig(coef[1]),
        "c_decode_s": sig(coef[2]),
        "c_kv_s": sig(coef[3]),
        "fit": fit,
    }
    pairs = [(p.latency_s, float(e2e_features(p.L, p.b) @ coef)) for p in fit_pts]
    return key, prof, pairs


def refit_fixed_kv(
    pts: list[Point], ttft: list[tuple[int, int, float]], cp_prior: float, kv: float,
) -> np.ndarray:
    """NNLS for (c0, c_prefill, c_decode) with c_kv held at ``kv``."""
    rows, rhs = [], []
    for p in pts:
        f = e2e_features(p.L, p.b)
        rows.append(f[:3] / p.latency_s)
        rhs.append(1.0 - f[3] * kv / p.latency_s)
    for L, b, t in ttft:
        f = prefill_features(L, b)
        rows.append(W_TTFT * f[:3] / t)
        rhs.append(W_TTFT * (1.0 - f[3] * kv / t))
    if not ttft:
        rows.append(np.array([0.0, W_PRIOR / cp_prior, 0.0]))
        rhs.append(W_PRIOR)
    scale = np.array([1e-2, cp_prior, 1e-4])
    x, _ = nnls(np.vstack(rows) * scale, np.array(rhs), maxiter=10_000)
    return np.append(x * scale, kv)


def refit_like(
    pts: list[Point], ttft: list[tuple[int, int, float]], cp_prior: float, kv: float,
    fixed_kv: bool,
) -> np.ndarray:
    """Refit with the same procedure (free or roofline-fixed c_kv) as the full fit."""
    if fixed_kv:
        return refit_fixed_kv(pts, ttft, cp_prior, kv)
    return solve(pts, ttft, cp_prior)


def make_plot(pairs: dict[str, list[tuple[float, float]]], path: Path) -> None:
    """Measured vs fitted latency scatter (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6), dpi=110)
    main = [k for k in pairs if "@h100" in k or "mixtral" in k]
    for k in sorted(main):
        m, f = zip(*pairs[k], strict=True)
        ax.scatter(m, f, s=12, label=k)
    others = [pv for k in pairs if k not in main for pv in pairs[k]]
    if others:
        m, f = zip(*others, strict=True)
        ax.scatter(m, f, s=6, c="lightgray", label="other A100/GH200 profiles", zorder=0)
    lim = [0.3, 200]
    ax.plot(lim, lim, "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim,
           xlabel="measured static-batch latency (s), Argonne vLLM",
           ylabel="fitted iteration model latency (s)",
           title="profiles.json: measured vs fitted (in-sample)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, required=True, help="path to shared/data")
    ap.add_argument("--out", type=Path, required=True, help="output profiles.json")
    ap.add_argument("--plot", type=Path, default=None, help="optional PNG of measured vs fitted")
    args = ap.parse_args()

    configs = load_argonne(args.shared)
    splitwise = load_splitwise(args.shared)
    mfu = calibrate_mfu(configs)
    profiles: dict[str, Any] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    skipped: list[str] = []
    for key in sorted(configs, key=lambda k: (MODELS[k[0]][0], k[1], k[2])):
        res = fit_config(configs[key], mfu, splitwise)
        if res is None:
            skipped.append(f"{MODELS[key[0]][0]}@{HARDWARE[key[1]].key}x{key[2]}")
            continue
        pk, prof, pr = res
        profiles[pk] = prof
        pairs[pk] = pr

    out = {
        "attribution": (
            "Derived by scripts/fit_profiles.py from Argonne LLM-Inference-Bench "
            f"(BSD-3-Clause, commit {ARGONNE_COMMIT}) and splitwise-sim "
            f"(MIT, commit {SPLITWISE_COMMIT}; cross-check only)"),
        "model": "t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K (seconds)",
        "convention": (
            "static batch of b prompts of length L, L output tokens: prefill iteration "
            "P=b*L, B=0, K=b*L (emits token 1); decode iterations i=1..L-1: P=0, B=b, "
            "K=b*(L+i)"),
        "assumptions": {
            "hardware": {h.key: {"name": h.name, "mem_gb": h.mem_gb,
                                 "bf16_dense_tflops": h.bf16_tflops, "hbm_tb_s": h.hbm_tbps}
                         for h in HARDWARE.values()},
            "prefill_mfu_from_ttft": {k: sig(v, 4) for k, v in mfu.items()},
            "kv_capacity": (
                f"{GPU_MEM_UTIL} * HBM - bf16 weights - {ACT_RESERVE_GB} GB/GPU; rows with "
                f"b*2L > {KV_SAFETY} * capacity excluded (vLLM preempts / runs in waves)"),
        },
        "skipped_configs_too_few_points": skipped,
        "profiles": profiles,
        "architectures": {k: {**v, "bytes_per_param": 2,
                              "kv_bytes_per_token": int(kv_bytes_per_token(v))}
                          for k, v in ARCHITECTURES.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    if args.plot is not None:
        make_plot(pairs, args.plot)
    for k, p in profiles.items():
        f = p["fit"]
        print(f"{k:24s} c0={p['c0_s'] * 1e3:7.3f}ms cp={p['c_prefill_s'] * 1e6:8.3f}us "
              f"cd={p['c_decode_s'] * 1e6:8.3f}us ckv={p['c_kv_s'] * 1e9:8.3f}ns "
              f"n={f['n_points']:2d} ex={f['n_excluded_kv_limited']}/"
              f"{f['n_excluded_failed_runs']}/{f['n_excluded_outliers']} "
              f"med={f['median_rel_err']:.3f} p90={f['p90_rel_err']:.3f} "
              f"max={f['max_rel_err']:.3f} ho={f['heldout_median_rel_err']}"
              + (" NOTE" if "notes" in f else ""))
    print("MFU", mfu, "skipped", skipped)


if __name__ == "__main__":
    main()
