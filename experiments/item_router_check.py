"""Does a per-item accuracy predictor help the warm-start teacher? (docs/learning.md)

Fits, per pool model, a logistic regression of "the recorded answer is correct" on the item's
MiniLM embedding plus its category (train split only; scikit-learn, installed with
sentence-transformers), reports its held-out AUC on the validation split beside the category
accuracy's, then runs ``priced-topology`` and a copy of it whose executor uses
``category accuracy + shrink x (predicted - category accuracy)`` per item, side by side on the
same validation items and arrivals.

    .venv/bin/python experiments/item_router_check.py                       # ~25 s
    .venv/bin/python experiments/item_router_check.py --shrink 0.5
    .venv/bin/python experiments/item_router_check.py --only llama-3.1-70b
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import load_pool, resolve_pool_path
from inframind_ray.core.types import ModelInfo, StepContext
from inframind_ray.policy import baselines as B
from inframind_ray.tasks.workload import WorkloadSpec


def fit_predictions(pool, c: float) -> tuple[dict[str, np.ndarray], list[str]]:
    """Per pool model: predicted P(correct) of every non-train item (NaN on train items)."""
    q, emb, rec = data.questions(), data.item_embeddings(), data.outcomes()
    cat, split = q["category"], q["split"]
    cats = np.unique(cat)
    x = np.hstack([emb, (cat[:, None] == cats[None, :]).astype(np.float32)])
    tr, va = split == "train", split == "val"
    preds, lines = {}, []
    for m in pool.models:
        y = rec[m.recorded]["correct"].astype(int)
        by_cat = {c_: y[tr & (cat == c_)].mean() for c_ in cats}
        p = LogisticRegression(C=c, max_iter=3000).fit(x[tr], y[tr]).predict_proba(x)[:, 1]
        base = np.array([by_cat[c_] for c_ in cat])
        lines.append(f"| {m.name} | {roc_auc_score(y[va], base[va]):.3f} | "
                     f"{roc_auc_score(y[va], p[va]):.3f} |")
        p[tr] = np.nan
        preds[m.name] = p
    return preds, lines


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default="constrained")  # the figures' pool (issue 19)
    ap.add_argument("--C", type=float, default=0.3, help="inverse L2 strength")
    ap.add_argument("--shrink", type=float, default=1.0, help="weight of the item prediction")
    ap.add_argument("--only", default=None, help="use item predictions for this model only")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--rates", default="100,200,300")
    ap.add_argument("--queries", type=int, default=1000)
    a = ap.parse_args()
    pool = load_pool(resolve_pool_path(a.pool))
    preds, lines = fit_predictions(pool, a.C)
    row = {int(v): i for i, v in enumerate(data.questions()["question_id"])}
    print("| model | val AUC, category accuracy | val AUC, embedding + category |")
    print("|---|---:|---:|")
    print("\n".join(lines))

    class ItemPriced(B.PricedTopology):
        name = "item-priced"

        def expected_accuracy(self, m: ModelInfo, ctx: StepContext) -> float:
            acc = super().expected_accuracy(m, ctx)
            if ctx.node.kind is B.NodeKind.SOLVER and ctx.node.slot > 0:
                return acc  # extra voters: infra-topology's rule, category accuracy
            if a.only is None or m.name == a.only:
                acc += a.shrink * (preds[m.name][row[ctx.query.item_id]] - acc)
            return acc

    B.register_policy(ItemPriced)
    rates = [float(r) for r in a.rates.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    good: dict[tuple[str, float], list[float]] = {}
    for seed in seeds:
        for r in rates:
            for pol in ("priced-topology", "item-priced"):
                w = WorkloadSpec(r, a.queries, "poisson", "val", A.BUDGET_RANGE_S, seed)
                good.setdefault((pol, r), []).append(run_cell(CellSpec(pool, pol, w))
                                                     .summary["goodput"])
    print(f"\nvalidation goodput, seeds {a.seeds} (mean [per seed])")
    print("| policy | " + " | ".join(f"{r:g}/min" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    for pol in ("priced-topology", "item-priced"):
        cells = [f"{np.mean(good[pol, r]):.4f} {np.round(good[pol, r], 3).tolist()}"
                 for r in rates]
        print(f"| {pol} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
