"""The drift scenarios' window results in one picture (issue 20, docs/continual.md): for each
run folder, continual minus frozen window goodput and SLO attainment with their 95 % intervals,
read from its results.json.

    python experiments/continual/forest.py docs/continual/forest.png \\
        docs/continual/slowed-480-sequential docs/continual/slowed-480-seed2 ...
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# the gate's design by a word of the run folder's name, newest first
DESIGNS = (("live3000", "+ confirmation on 2,000, level spent, harm guard, λ held, lr 1e-3, "
             "live 3,000 s"),
           ("lr1e-3", "+ confirmation on 2,000, level spent, harm guard, λ held, lr 1e-3"),
           ("held", "+ confirmation on 2,000, level spent, harm guard, λ held"),
           ("guard", "+ confirmation on 2,000, level spent, harm guard"),
           ("spent", "+ confirmation on 2,000, level spent"),
           ("confirm", "+ confirmation"))


def label(run: Path, r: dict) -> str:
    """Scenario, rate, the run's --seed (from its command) and the gate's design (by name)."""
    argv = r["command"].split()
    seed = argv[argv.index("--seed") + 1] if "--seed" in argv else "0"
    design = next((d for key, d in DESIGNS if key in run.name), "resolved gain")
    return f"{r['scenario']} @ {r['rate']:g}/min, seed {seed}, {design}"


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: forest.py OUT.png RUN_DIR [RUN_DIR ...]")
    out, runs = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    rows = []
    for run in runs:
        r = json.loads((run / "results.json").read_text())
        w = r.get("window") or {}
        rows.append((label(run, r), w.get("goodput"), w.get("slo_attainment")))
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * len(rows) + 1.6), sharey=True)
    for ax, k, title in ((axes[0], 1, "window goodput"), (axes[1], 2, "window SLO attainment")):
        for y, row in enumerate(rows):
            m = row[k]
            if m is None:
                ax.text(0, y, "no promotion: no window", va="center", ha="center", fontsize=8)
                continue
            lo, hi = (100 * v for v in m["diff_95ci"])
            ok = lo > 0
            ax.errorbar(100 * m["diff"], y, xerr=[[100 * m["diff"] - lo], [hi - 100 * m["diff"]]],
                        fmt="o", color="tab:green" if ok else "tab:red", capsize=3)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_title(f"{title} (points, 95 % CI)", fontsize=9)
        ax.set_xlabel("points")
    axes[0].set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    axes[0].set_ylim(len(rows) - 0.5, -0.5)  # first run on top
    fig.suptitle("continual minus frozen, per run (green: the interval excludes 0)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
