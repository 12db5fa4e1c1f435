"""The training run's figure (``OUT/training.png``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_training(history: list[dict], path: Path) -> None:
    """Validation goodput per rate, lambda and mean cost per iteration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    evals = [h for h in history if "eval" in h]
    pools = sorted({e.get("pool", "") for h in evals for e in h["eval"]})
    if len(pools) > 1:  # one line per validation pool: its mean over the rates
        for p in pools:
            pts = [(h["iteration"], float(np.mean([e["goodput"] for e in h["eval"]
                                                  if e.get("pool", "") == p]))) for h in evals]
            a1.plot(*zip(*pts, strict=True), marker="o", label=p)
    for r in sorted({e["rate_per_min"] for h in evals for e in h["eval"]}) if len(pools) < 2 \
            else ():
        pts = [(h["iteration"], e["goodput"]) for h in evals for e in h["eval"]
               if e["rate_per_min"] == r]
        a1.plot(*zip(*pts, strict=True), marker="o", label=f"{r:g} req/min")
    a1.set(xlabel="PPO iteration (0 = warm start)", ylabel="validation goodput",
           title="goodput on the validation split")
    a1.legend()
    ppo = [h for h in history if h["phase"] == "ppo" and h.get("lambda") is not None]
    if ppo:
        a2.plot([h["iteration"] for h in ppo], [h["lambda"] for h in ppo], label="lambda")
        a2b = a2.twinx()
        a2b.plot([h["iteration"] for h in ppo], [h["mean_cost"] or 0 for h in ppo],
                 color="tab:red", label="mean lateness cost")
        a2b.set_ylabel("mean cost per query", color="tab:red")
        if any(h.get("mu") for h in ppo):  # the accuracy floor's multiplier, when one is set
            a2.plot([h["iteration"] for h in ppo], [h.get("mu") or 0 for h in ppo],
                    color="tab:green", label="mu (accuracy floor)")
            a2.legend(loc="upper left")
    a2.set(xlabel="PPO iteration", ylabel="multiplier", title="Lagrange multipliers")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
