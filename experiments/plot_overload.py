"""Plot of an overload run's requests (``serving_load.py overload --out X.json`` writes
``X.records.json``): each request's client latency against its send time, by status.

    PYTHONPATH=$PWD .venv/bin/python experiments/plot_overload.py RUN.records.json OUT.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {200: ("admitted, answered", "tab:green"), 429: ("refused 429", "tab:orange"),
         503: ("refused 503", "tab:red"), 0: ("lost", "black")}


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    rows = json.loads(src.read_text())
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for code, (label, color) in STYLE.items():
        pts = [(r["sent_s"], r["client_s"]) for r in rows
               if r["status"] == code and r.get("client_s") is not None]
        if pts:
            ax.scatter(*zip(*pts, strict=True), s=6, color=color, label=f"{label} ({len(pts)})")
    ax.axhline(0.05, color="gray", ls=":", lw=1)
    ax.text(0.3, 0.055, "50 ms", color="gray", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("sent at (s into the 10x load)")
    ax.set_ylabel("client latency (s)")
    ax.set_title(src.name.removesuffix(".records.json"))
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
