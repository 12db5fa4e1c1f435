"""Controller checkpoints side by side on the same VALIDATION traces (docs/controller.md's
shipping rule: MSE no higher, gain per query no lower): each checkpoint's regression error and
what its stop rule would have done, overall, at low load (<= 30 req/min) and, at low load, per
policy. Prints a markdown table; ``--json`` also writes every figure.

    .venv/bin/python experiments/controller_compare.py \
        --traces runs/controller/traces,runs/controller-low/traces \
        shipped=inframind_ray/data/controller candidate=runs/c22/candidate
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from inframind_ray.bench.controller_fit import evaluate, load_traces
from inframind_ray.orchestration.controller import ControllerModel


def main() -> None:
    """Entry point: --traces FOLDERS, then LABEL=CHECKPOINT ..."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True,
                    help="trace folders, comma-separated, in the order the fits read them")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("models", nargs="+", help="LABEL=CHECKPOINT_FOLDER")
    a = ap.parse_args()
    _, val = load_traces([Path(t) for t in a.traces.split(",") if t.strip()])
    out: dict[str, dict] = {}
    for item in a.models:
        label, path = item.split("=", 1)
        model = ControllerModel.load(path)
        ev = evaluate(model, val)
        low = [r for r in val if r.get("rate_per_min", 0) <= 30.0]
        ev["low_load_by_policy"] = {
            p: evaluate(model, [r for r in low if r.get("policy") == p])
            for p in sorted({r.get("policy") for r in low})}
        out[label] = ev
    print("| VALIDATION traces | prefixes / queries | MSE (predicting the mean) | R² | sign right "
          "| the rule stops | realised delta of its stops | stops that lose | gain per query "
          "| accuracy lost | low load: stops | low load: accuracy lost | low load: gain per "
          "query |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, e in out.items():
        lo = e.get("low_load", {})
        print(f"| {label} | {e['rows']:,} / {e['queries']:,} | {e['mse']:.4f} "
              f"({e['mse_predict_mean']:.3f}) | {e['r2']:.3f} | {100 * e['sign_agreement']:.1f} % "
              f"| {100 * e['stopped_queries']:.1f} % | {e['realised_delta_of_stops'] or 0:+.3f} "
              f"| {100 * (e['stops_that_lose'] or 0):.1f} % | {e['gain_per_query']:+.4f} "
              f"| {e['accuracy_lost_pp']:+.2f} pp | {100 * lo.get('stopped_queries', 0):.1f} % "
              f"| {lo.get('accuracy_lost_pp', 0):+.2f} pp | {lo.get('gain_per_query', 0):+.4f} |")
    print()
    print("Low load (<= 30 req/min), per policy: the rule stops / accuracy lost / gain per query")
    print()
    pols = sorted({p for e in out.values() for p in e["low_load_by_policy"]})
    print("| checkpoint | " + " | ".join(pols) + " |")
    print("|---|" + "---:|" * len(pols))
    for label, e in out.items():
        cells = []
        for p in pols:
            v = e["low_load_by_policy"].get(p)
            cells.append("n/a" if v is None else
                         f"{100 * v['stopped_queries']:.1f} % / {v['accuracy_lost_pp']:+.2f} pp / "
                         f"{v['gain_per_query']:+.4f}")
        print(f"| {label} | " + " | ".join(cells) + " |")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
