"""How the DeepThink token budget was chosen (docs/learning.md, "The DeepThink token budget").

First, per pool model on the TRAIN split: how often its longest recorded step-by-step answers
are right and how much of its output they hold. Then, on the VALIDATION split, the teacher
``priced-topology`` without a token budget, with one at each quantile, and always-strongest
without and with the shipped budget, side by side on the same items and arrivals.

    .venv/bin/python experiments/token_budget_check.py                 # ~2 min on 2 cores
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from inframind_ray import assumptions as A
from inframind_ray import data
from inframind_ray.bench.runner import CellSpec, run_cell
from inframind_ray.config import PoolConfig, load_pool, resolve_pool_path
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import PoolInfo
from inframind_ray.policy import baselines as B
from inframind_ray.policy.base import Policy
from inframind_ray.pools.recorded import recorded_model
from inframind_ray.tasks.workload import WorkloadSpec


def length_table(pool, quantiles: list[float]) -> None:
    """Accuracy and token share of each model's answers above each length quantile (train)."""
    q, rec = data.questions(), data.outcomes()
    train = q["split"] == "train"
    print("| model | quantile | tokens above | accuracy above (all) | share of tokens "
          "| share of correct answers |")
    print("|---|---:|---:|---:|---:|---:|")
    for m in pool.models:
        r = rec[m.recorded]
        full = np.maximum(8, np.ceil(r["gen_words"] * A.TOKENS_PER_WORD))[train]
        ok = r["correct"][train].astype(bool)
        capped = np.minimum(full, np.quantile(full, A.MAX_TOKENS_QUANTILE))
        for qu in quantiles:
            t = np.quantile(full, qu)
            above = full > t
            print(f"| {m.name} | {qu:g} | {t:.0f} | {ok[above].mean():.3f} ({ok.mean():.3f}) | "
                  f"{(capped - np.minimum(capped, t)).sum() / capped.sum():.3f} | "
                  f"{ok[above].sum() / ok.sum():.3f} |")


class NoBudgetPriced(B.PricedTopology):
    """The teacher as it was before the token budget."""

    name = "priced-topology/no-budget"
    token_budget = False


class BudgetStrongest(B.AlwaysStrongest):
    """always-strongest with the token budget (not a bench baseline: the papers' baseline has
    a fixed cap)."""

    name = "always-strongest/budget"
    token_budget = True


def at_quantile(base: type[Policy], pool: PoolConfig, quantile: float) -> type[Policy]:
    """``base``, registered as ``NAME@qQUANTILE``, with each model's DeepThink token budget at
    this quantile of its train-split answer lengths instead of ``A.TOKEN_BUDGET_QUANTILE`` (the
    model cards are built as ``pools.cards.build_pool_info`` builds them, budget aside)."""
    recorded = {m.name: recorded_model(m.recorded) for m in pool.models}

    def budgeted(info: PoolInfo) -> PoolInfo:
        models = []
        for m in info.models:
            cap, expected = recorded[m.name].length_budget(quantile)
            models.append(replace(m, budget_tokens=min(cap, m.max_tokens[Strategy.DEEPTHINK]),
                                  budget_expected_tokens=expected))
        return PoolInfo(tuple(models))

    class AtQuantile(base):
        name = f"{base.name}@q{quantile:g}"

        def __init__(self, info: PoolInfo, seed: int = 0) -> None:
            super().__init__(budgeted(info), seed)

    return B.register_policy(AtQuantile)


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default="constrained")  # the figures' pool (issue 19)
    ap.add_argument("--quantiles", default="0.95,0.97,0.98,0.99")
    ap.add_argument("--seeds", default="1,2,3,4,5,6")
    ap.add_argument("--rates", default="10,100,200,300")
    ap.add_argument("--queries", type=int, default=1000)
    a = ap.parse_args()
    pool = load_pool(resolve_pool_path(a.pool))
    quantiles = [float(x) for x in a.quantiles.split(",")]
    rates = [float(r) for r in a.rates.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    length_table(pool, quantiles)
    for cls in (NoBudgetPriced, BudgetStrongest):
        B.register_policy(cls)

    # (label, registered policy); the shipped budget is at A.TOKEN_BUDGET_QUANTILE
    runs = [("priced-topology/no-budget", NoBudgetPriced.name)]
    runs += [(f"priced-topology, budget at q{qu:g}", at_quantile(B.PricedTopology, pool, qu).name)
             for qu in quantiles]
    runs += [("always-strongest", "always-strongest"),
             (f"always-strongest/budget, budget at q{A.TOKEN_BUDGET_QUANTILE:g}",
              BudgetStrongest.name)]
    rows = []
    for label, pol in runs:
        cells = []
        for r in rates:
            good, slo = [], []
            for seed in seeds:
                w = WorkloadSpec(r, a.queries, "poisson", "val", A.BUDGET_RANGE_S, seed)
                s = run_cell(CellSpec(pool, pol, w)).summary
                good.append(s["goodput"])
                slo.append(s["slo_attainment"])
            cells.append(f"{np.mean(good):.4f} ({np.mean(slo):.3f})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    print(f"\nvalidation goodput (SLO), mean of seeds {a.seeds}, {a.queries} queries per cell")
    print("| policy | " + " | ".join(f"{r:g}/min" for r in rates) + " |")
    print("|---|" + "---:|" * len(rates))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
