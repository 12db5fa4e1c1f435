"""Microseconds per planner and executor decision of the learned policy (features alone, and
features + network, greedy), the per-model-row version (v2) beside the positional one (v1,
policy/positional.py), interleaved in one process on a loaded system state; the minimum over
``--repeats`` rounds of ``--n`` calls each (the machine is shared). Usage:
``python scripts/decision_speed.py [--pool default] [--n 500] [--repeats 7]``; one JSON line."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np
import torch

from inframind_ray.config import load_pool
from inframind_ray.core.topology import Plan, Topology, build_graph
from inframind_ray.core.types import LoadSnapshot, StepContext, SystemState
from inframind_ray.policy.learned import LearnedPolicy
from inframind_ray.policy.positional import V1_CHECKPOINT, PositionalPolicy
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.workload import WorkloadSpec, make_queries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default="default")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    info = build_pool_info(load_pool(a.pool))
    pol = LearnedPolicy(info, seed=0)
    old = PositionalPolicy.load(V1_CHECKPOINT, info)
    rng = np.random.default_rng(0)
    mix = (("gsm8k", 0.4), ("mmlu_pro", 0.3), ("math", 0.1), ("humaneval", 0.1), ("mbpp", 0.1))
    qs = make_queries(WorkloadSpec(60, 64, seed=1, tasks=mix))
    qs = [replace(q, embedding=rng.normal(size=384).astype(np.float32)) for q in qs]
    state = SystemState(10.0, {m: LoadSnapshot(m, 1, 6, 12, 0.4, 0.6, 0.03, 5.0, 9.8,
                                               waiting_slack_s=(1.0, 4.0, 9.0, 20.0))
                               for m in info.names})
    plan = Plan.make(Topology.DEBATE, 3)
    node = build_graph(plan).nodes[0]
    ctxs = [StepContext(q, plan, node, 2, 10.0, state, earlier_models=(info.names[-1],))
            for q in qs]
    fns = {
        "v2_planner_features": lambda i: pol.features.planner(qs[i % 64], state),
        "v1_planner_features": lambda i: old.f.planner(qs[i % 64], state),
        "v2_executor_features": lambda i: pol.features.executor(ctxs[i % 64]),
        "v1_executor_features": lambda i: old.f.executor(ctxs[i % 64]),
        "v2_planner_decision": lambda i: pol.plan(qs[i % 64], state),
        "v1_planner_decision": lambda i: old.plan(qs[i % 64], state),
        "v2_executor_decision": lambda i: pol.decide(ctxs[i % 64]),
        "v1_executor_decision": lambda i: old.decide(ctxs[i % 64]),
    }
    best = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        for i in range(50):
            fn(i)
    for _ in range(a.repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            for i in range(a.n):
                fn(i)
            best[name] = min(best[name], (time.perf_counter() - t) / a.n * 1e6)
    out = {"pool": a.pool, "models": len(info.names)} | {f"{k}_us": round(v, 1)
                                                         for k, v in best.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
