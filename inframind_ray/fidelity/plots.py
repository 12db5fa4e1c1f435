"""The validation plots: twin vs real latency CDFs and queue depth over time, per case."""

from __future__ import annotations

import math

import numpy as np

from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.compare import queue_depth


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
        ax.plot(grid, queue_depth(c.real, grid), "-", label="real vLLM")
        ax.plot(grid, queue_depth(c.twin, grid), "--", label="twin")
        ax.set_title(f"{c.name}: requests in the engine", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path_depth, dpi=110)
    plt.close(fig)
