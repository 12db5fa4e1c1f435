"""What the fidelity commands show and write: the console, the fitted-profile table, and a
validation run's files and table (``twin validate`` and ``twin rescore`` alike)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from inframind_ray.fidelity.cases import Case
    from inframind_ray.fidelity.profile import FittedProfile
    from inframind_ray.fidelity.real import EngineInfo

console = Console(width=None if sys.stdout.isatty() else 160)


def print_profile(key: str, fp: FittedProfile) -> None:
    """The fitted coefficients, in-sample errors and decode factors as a table."""
    t = Table(title=f"fitted profile {key}")
    for col in ("c0 (ms)", "c_prefill (µs/tok)", "c_decode (µs/seq)", "c_kv (ns/tok)",
                "front-end d (ms)", "TTFT err med/p90", "TPOT err med/p90", "E2E err med/p90"):
        t.add_column(col, justify="right")
    f = fp.fit
    t.add_row(f"{fp.profile.c0 * 1e3:.3f}", f"{fp.profile.c_prefill * 1e6:.2f}",
              f"{fp.profile.c_decode * 1e6:.1f}", f"{fp.profile.c_kv * 1e9:.2f}",
              f"{fp.request_overhead_s * 1e3:.3f}",
              f"{f['ttft_median_rel_err']:.1%} / {f['ttft_p90_rel_err']:.1%}",
              f"{f['tpot_median_rel_err']:.1%} / {f['tpot_p90_rel_err']:.1%}",
              f"{f['e2e_median_rel_err']:.1%} / {f['e2e_p90_rel_err']:.1%}")
    console.print(t)
    e = fp.entry
    if not e.trivial:
        ms = [f"{x * 1e3:g}" for x in e.idle_edges_s]
        bins = ([f"< {ms[0]} ms"] + [f"{a}-{b} ms" for a, b in zip(ms[:-1], ms[1:], strict=True)]
                + [f">= {ms[-1]} ms"]) if ms else ["any"]
        console.print(f"entry delay: busy engine d - {e.busy_cut_s * 1e3:.2f} ms; idle engine "
                      + ", ".join(f"{b}: d {w * 1e3:+.2f} ms"
                                  for b, w in zip(bins, e.idle_wake_s, strict=True)))
    if fp.profile.decode_factors:
        console.print("decode factors per batch size: " + ", ".join(
            f"{b}: {x:.3f}" for b, x in fp.profile.decode_factors))


def write_run(out: Path, cases: list[Case], rows: list[dict], key: str,
              infos: dict[str, EngineInfo]) -> None:
    """Write a validation run's files (validate.json, meta.json, requests.parquet,
    samples.parquet, the plots) to ``out`` and print its table."""
    import pandas as pd

    from inframind_ray.fidelity.plots import plot

    (out / "validate.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "meta.json").write_text(json.dumps(
        {"profile_key": key, "engines": {k: v.as_dict() for k, v in infos.items()}}, indent=1))
    reqs, samples = [], []
    for c in cases:
        for side, rs in (("real", c.real), ("twin", c.twin), ("twin_fixed", c.twin_fixed)):
            reqs += [{"case": c.name, "side": side, **r} for r in rs]
        for side, ss in (("real", c.real_samples), ("twin", c.twin_samples)):
            samples += [{"case": c.name, "side": side, **s} for s in ss]
    pd.DataFrame(reqs).to_parquet(out / "requests.parquet", index=False)
    pd.DataFrame(samples).to_parquet(out / "samples.parquet", index=False)
    plot(cases, str(out / "latency_cdf.png"), str(out / "queue_depth.png"))
    t = Table(title="twin vs real engine (relative error |twin - real| / real, per request)")
    cols = ("case", "rate/min", "TTFT med", "TTFT p90", "E2E med", "E2E p90", "thr real",
            "thr twin", "depth real/twin", "order tau", "preempt real/twin", "speed",
            "fixed TTFT/E2E med")
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["case"], f"{r['rate_per_min']:g}", f"{r['ttft_median_rel_err']:.1%}",
                  f"{r['ttft_p90_rel_err']:.1%}", f"{r['e2e_median_rel_err']:.1%}",
                  f"{r['e2e_p90_rel_err']:.1%}", f"{r['throughput_real']:.1f}",
                  f"{r['throughput_twin']:.1f}",
                  f"{r['queue_depth_mean_real']:.2f}/{r['queue_depth_mean_twin']:.2f}",
                  f"{r['finish_order_kendall_tau']:.2f}",
                  f"{r['preemptions_real']}/{r['preemptions_twin']}", f"{r['speed_scale']:.3f}",
                  f"{r['fixed_ttft_median_rel_err']:.1%}/{r['fixed_e2e_median_rel_err']:.1%}"
                  if "fixed_ttft_median_rel_err" in r else "-")
    console.print(t)
    console.print(f"wrote {out}/validate.json, requests.parquet, samples.parquet, "
                  "latency_cdf.png, queue_depth.png")
