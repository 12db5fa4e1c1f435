"""Where the DeepThink token budget cuts right answers (docs/learning/journal.md, issue 19's x0.5
diagnosis): per pool model and task family on the TRAIN split, the budget (the
``A.TOKEN_BUDGET_QUANTILE`` of its answer lengths), how many answers lie above it, how often they
are right, and whether a ``"tail"`` budget (``TaskCard.budget``, the teacher
``priced-topology-tail``) keeps it.

    .venv/bin/python experiments/budget_tail_check.py [--pool default]     # a few seconds
"""

from __future__ import annotations

import argparse

import numpy as np

from inframind_ray import data
from inframind_ray.config import load_pool, resolve_pool_path
from inframind_ray.core.types import PoolInfo
from inframind_ray.data import TASK_FAMILIES
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.pools.recorded import recorded_model, recorded_task_model
from inframind_ray.tasks.mmlu_pro import mmlu_pro


def tail_table(info: PoolInfo, cfg) -> None:  # noqa: ANN001 - a PoolConfig
    """Print the train-split tail beyond each (model, family) budget and whether the card keeps
    the budget under ``token_budget = "tail"`` (``TaskCard.budget``)."""
    print("| model | family | budget (tokens) | answers above | right above | right overall "
          "| kept |")
    print("|---|---|---:|---:|---:|---:|---|")
    for m in cfg.models:
        rec = recorded_model(m.recorded_for("mmlu_pro"))
        tr = mmlu_pro().splits == "train"
        rows = [("mmlu_pro", rec.full_tokens[tr], rec.correct[tr].astype(float))]
        for fam in TASK_FAMILIES:
            name = m.recorded_for(fam)
            if name is not None and fam != "mmlu_pro":
                r = recorded_task_model(fam, name)
                tr = np.isfinite(r.p_correct) & np.asarray(
                    data.task_items(fam)["split"] == "train")
                rows.append((fam, r.full_tokens[tr], r.p_correct[tr]))
        for fam, full, ok in rows:
            card = info[m.name].card(fam)
            above = full > card.budget_tokens
            right = float(np.nanmean(ok[above])) if above.any() else float("nan")
            print(f"| {m.name} | {fam} | {card.budget_tokens} | {int(above.sum())} | {right:.3f} "
                  f"| {np.nanmean(ok):.3f} | {'yes' if card.budget('tail') else 'no'} |")


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default="default")
    a = ap.parse_args()
    cfg = load_pool(resolve_pool_path(a.pool))
    tail_table(build_pool_info(cfg), cfg)


if __name__ == "__main__":
    main()
