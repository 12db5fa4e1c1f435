"""Accuracy floor runs side by side (docs/learning.md, "Accuracy floor"): per seed, the floor-on
and floor-off runs' training-batch accuracy and goodput per PPO iteration, mu, and the
validation accuracy of the evaluations; a table on stdout and a plot.

    python experiments/accuracy_floor_report.py runs docs/learning/accuracy_floor.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def history(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def main(root: Path, out: Path) -> None:
    seeds = sorted({p.name.rsplit("-s", 1)[1] for p in root.glob("floor-o*-s*")
                    if (p / "metrics.jsonl").exists()})
    fig, axes = plt.subplots(1, len(seeds), figsize=(5.5 * len(seeds), 4), squeeze=False)
    print("| seed | floor | val accuracy (eval iterations) | val goodput | train accuracy, last 5 "
          "| mu at end |\n|---|---|---|---|---|---|")
    for ax, seed in zip(axes[0], seeds, strict=True):
        for arm, color in (("off", "tab:blue"), ("on", "tab:red")):
            h = history(root / f"floor-{arm}-s{seed}" / "metrics.jsonl")
            ppo = [r for r in h if r.get("phase") == "ppo"]
            ax.plot([r["iteration"] for r in ppo], [r["train_accuracy"] for r in ppo],
                    color=color, label=f"floor {arm}: train accuracy")
            ax.plot([r["iteration"] for r in ppo], [r["train_goodput"] for r in ppo],
                    color=color, ls=":", label=f"floor {arm}: train goodput")
            ev = [(r["iteration"], sum(e["accuracy"] for e in r["eval"]) / len(r["eval"]),
                   sum(e["goodput"] for e in r["eval"]) / len(r["eval"]))
                  for r in h if "eval" in r]
            ax.plot([e[0] for e in ev], [e[1] for e in ev], "o", color=color,
                    label=f"floor {arm}: validation accuracy")
            last5 = [r["train_accuracy"] for r in ppo[-5:]]
            print(f"| {seed} | {arm} | {' / '.join(f'{e[1]:.3f}' for e in ev)} | "
                  f"{' / '.join(f'{e[2]:.3f}' for e in ev)} | {sum(last5) / len(last5):.3f} | "
                  f"{ppo[-1]['mu']:.1f} |")
        ax.axhline(0.9, color="gray", ls="--", lw=0.8, label="S0 = 0.9")
        ax.set(title=f"seed {seed}", xlabel="PPO iteration", ylabel="share of queries",
               ylim=(0, 1))
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
