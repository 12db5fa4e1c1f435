"""The execution controller as an ablation (``bench --controller on,off``): per policy and rate,
multi-agent latency, accuracy and goodput with the controller off and on, the share of calls it
cancelled and the latency it saved per task family (``controller.md``, ``controller.png``)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def pairs(doc: dict) -> list[tuple[dict, dict]]:
    """(off row, on row) per (scheduling, policy, rate), in row order."""
    rows = doc["rows"]
    on = {(r["scheduling"], r["policy"], r["rate_per_min"]): r for r in rows
          if r["controller"] == "on"}
    return [(r, on[k]) for r in rows if r["controller"] == "off"
            and (k := (r["scheduling"], r["policy"], r["rate_per_min"])) in on]


def saved(off: float | None, on: float | None) -> float | None:
    """Relative latency saving of on over off (0.2: 20 % lower)."""
    return None if not off or on is None else 1.0 - on / off


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, fmt: str = ".3f") -> str:
    """A figure, or "-" where the cell has none (no multi-agent queries under one arm)."""
    return "-" if x is None else format(x, fmt)


def _bar(x: float | None) -> float:
    """A bar's height in percent; no bar (NaN) where one arm has no figure, as "-" in tables."""
    return np.nan if x is None else 100 * x


def markdown(doc: dict) -> str:
    """Tables: the whole workload, then per family."""
    lines = ["| policy | req/min | multi-agent queries | latency off (s) | latency on (s) | saved "
             "| accuracy off | accuracy on | Δ pp | goodput off | goodput on | stopped early "
             "| calls cancelled |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
             "|---:|---:|"]
    for off, on in pairs(doc):
        lines.append(
            f"| {off['policy']} | {off['rate_per_min']:g} | {off['multi_agent_queries']} | "
            f"{_num(off['multi_agent_latency_mean_s'], 'g')} | "
            f"{_num(on['multi_agent_latency_mean_s'], 'g')} | "
            f"{_pct(saved(off['multi_agent_latency_mean_s'], on['multi_agent_latency_mean_s']))}"
            f" | {off['accuracy']:.3f} | {on['accuracy']:.3f} | "
            f"{100 * (on['accuracy'] - off['accuracy']):+.1f} | {off['goodput']:.3f} | "
            f"{on['goodput']:.3f} | {_pct(on['stopped_early_share'])} | "
            f"{_pct(on['cancelled_call_share'])} |")
    lines += ["", "Per task family (multi-agent queries of each):", "",
              "| policy | req/min | family | latency off (s) | latency on (s) | saved | "
              "accuracy off | accuracy on | calls cancelled |", "|---|---:|---|---:|---:|---:"
              "|---:|---:|---:|"]
    for off, on in pairs(doc):
        for fam, a in off["by_task"].items():
            b = on["by_task"].get(fam)
            if b is None or not a["multi_agent_queries"]:
                continue
            lines.append(
                f"| {off['policy']} | {off['rate_per_min']:g} | {fam} | "
                f"{_num(a['multi_agent_latency_mean_s'], 'g')} | "
                f"{_num(b['multi_agent_latency_mean_s'], 'g')} | "
                f"{_pct(saved(a['multi_agent_latency_mean_s'], b['multi_agent_latency_mean_s']))}"
                f" | {_num(a['multi_agent_accuracy'])} | {_num(b['multi_agent_accuracy'])} | "
                f"{_pct(b['cancelled_call_share'])} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, doc: dict) -> None:
    """controller.png: per rate (rows), per family: multi-agent latency saved, calls cancelled
    and accuracy change of multi-agent queries, a bar per policy."""
    ps = pairs(doc)
    rates = sorted({off["rate_per_min"] for off, _ in ps})
    policies = list(dict.fromkeys(off["policy"] for off, _ in ps))
    fams = list(dict.fromkeys(f for off, _ in ps for f in off["by_task"]))
    panels = (("latency saved (%)", lambda a, b: _bar(saved(
        a["multi_agent_latency_mean_s"], b["multi_agent_latency_mean_s"]))),
        ("calls cancelled (%)", lambda a, b: _bar(b["cancelled_call_share"])),
        ("accuracy change (pp)", lambda a, b: _bar(
            None if None in (a["multi_agent_accuracy"], b["multi_agent_accuracy"])
            else b["multi_agent_accuracy"] - a["multi_agent_accuracy"])))
    fig, axes = plt.subplots(len(rates), 3, figsize=(16, 3.4 * len(rates)), squeeze=False)
    width = 0.8 / max(1, len(policies))
    for i, rate in enumerate(rates):
        for j, (title, f) in enumerate(panels):
            ax = axes[i][j]
            for n, p in enumerate(policies):
                off, on = next((a, b) for a, b in ps if a["policy"] == p
                               and a["rate_per_min"] == rate)
                ys = [f(off["by_task"][m], on["by_task"][m])
                      if off["by_task"].get(m, {}).get("multi_agent_queries")
                      and m in on["by_task"] else np.nan for m in fams]
                ax.bar(np.arange(len(fams)) + n * width, ys, width, label=p)
            ax.set_xticks(np.arange(len(fams)) + width * (len(policies) - 1) / 2, fams,
                          fontsize=8)
            ax.axhline(0, color="k", lw=0.6)
            ax.set_title(f"{title} @ {rate:g} req/min", fontsize=10)
            ax.grid(alpha=0.3, axis="y")
        axes[i][0].legend(fontsize=7)
    fig.suptitle("execution controller on vs off: multi-agent queries per task family")
    fig.tight_layout()
    fig.savefig(out / "controller.png", dpi=100)
    plt.close(fig)
