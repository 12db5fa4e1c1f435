"""The execution controller over several seeds of one `bench --controller on,off` command:
per (policy, rate), the paired difference on - off of goodput and accuracy (each seed: the
same items and arrivals both ways), its mean and 95 % t-interval over seeds; a markdown table
and a plot (docs/controller.md, "High load over five seeds").

    .venv/bin/python experiments/controller_seeds.py OUT.png docs/controller/seeds/s*/results.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402


def interval(d: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % t-interval of paired differences."""
    a = np.asarray(d, float)
    if len(a) < 2:
        return float(a.mean()), float("nan"), float("nan")
    h = stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a))
    return float(a.mean()), float(a.mean() - h), float(a.mean() + h)


def main() -> None:
    """Entry point: the plot's path, then one results.json per seed."""
    if len(sys.argv) < 3:
        sys.exit("usage: controller_seeds.py OUT.png RESULTS.json [RESULTS.json ...]")
    out, paths = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    diffs: dict[tuple[str, float], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for p in paths:
        rows = json.loads(p.read_text())["rows"]
        on = {(r["policy"], r["rate_per_min"]): r for r in rows if r["controller"] == "on"}
        for r in rows:
            k = (r["policy"], r["rate_per_min"])
            if r["controller"] != "off" or k not in on:
                continue
            for m in ("goodput", "accuracy"):
                diffs[k][m].append(on[k][m] - r[m])
                diffs[k][m + "_off"].append(r[m])
            diffs[k]["queries"].append(r["n_queries"])
            if r.get("multi_agent_queries") and on[k].get("multi_agent_queries"):
                off_l, on_l = r["multi_agent_latency_mean_s"], on[k]["multi_agent_latency_mean_s"]
                diffs[k]["saved"].append(1 - on_l / off_l)
                diffs[k]["ma_accuracy"].append(on[k]["multi_agent_accuracy"]
                                               - r["multi_agent_accuracy"])
                diffs[k]["ma_queries"].append(r["multi_agent_queries"])
    print(f"On - off over {len(paths)} seeds (paired by seed), pp: mean [95 % t-interval]; "
          "per seed\n")
    print("| policy | req/min | queries per cell | goodput off (mean) | goodput on - off | "
          "per seed | accuracy on - off |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for (pol, rate), d in diffs.items():
        g, a = interval(d["goodput"]), interval(d["accuracy"])
        print(f"| {pol} | {rate:g} | {int(np.mean(d['queries']))} | "
              f"{np.mean(d['goodput_off']):.3f} | {100 * g[0]:+.2f} [{100 * g[1]:+.2f}, "
              f"{100 * g[2]:+.2f}] | {', '.join(f'{100 * x:+.1f}' for x in d['goodput'])} | "
              f"{100 * a[0]:+.2f} [{100 * a[1]:+.2f}, {100 * a[2]:+.2f}] |")
    print("\nMulti-agent queries (those the policy planned with more than one agent): mean "
          "latency saved, 1 - on / off, and accuracy on - off (pp), mean [95 % t-interval]; "
          "per seed\n")
    print("| policy | req/min | multi-agent queries per cell (off) | latency saved | per seed | "
          "accuracy on - off | per seed |")
    print("|---|---:|---:|---:|---|---:|---|")
    for (pol, rate), d in diffs.items():
        if not d["saved"]:
            continue
        sv, ma = interval(d["saved"]), interval(d["ma_accuracy"])
        print(f"| {pol} | {rate:g} | {np.mean(d['ma_queries']):.0f} | {100 * sv[0]:.1f} % "
              f"[{100 * sv[1]:.1f}, {100 * sv[2]:.1f}] | "
              f"{', '.join(f'{100 * x:.1f}' for x in d['saved'])} | {100 * ma[0]:+.2f} "
              f"[{100 * ma[1]:+.2f}, {100 * ma[2]:+.2f}] | "
              f"{', '.join(f'{100 * x:+.1f}' for x in d['ma_accuracy'])} |")
    rates = sorted({k[1] for k in diffs})
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 3.6), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        keys = [k for k in diffs if k[1] == rate]
        for i, k in enumerate(keys):
            g = diffs[k]["goodput"]
            m, lo, hi = interval(g)
            ax.scatter([i] * len(g), 100 * np.asarray(g), s=12, color="0.6")
            ax.errorbar(i, 100 * m, yerr=[[100 * (m - lo)], [100 * (hi - m)]], fmt="o",
                        capsize=4, color="C0")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(keys)), [k[0] for k in keys])
        ax.set_title(f"{rate:g} req/min: goodput on - off (pp)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
