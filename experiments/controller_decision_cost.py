"""Milliseconds of one execution-controller decision (features + every member's forward pass)
in-process, the shipped ensemble against its first member alone, on a three-voter GSM8K vote
with two answers in (agreeing and split in turn), voters on the constrained pool's strongest
model, 3 s into a 60 s budget on an idle pool; 2,000 measured after 200 warm-up
(docs/controller.md, "Added cost per finished node").

    PYTHONPATH=$PWD .venv/bin/python experiments/controller_decision_cost.py
"""

from __future__ import annotations

import time

from inframind_ray.config import load_pool
from inframind_ray.core.topology import Plan, Topology, build_graph
from inframind_ray.core.types import LoadSnapshot, SystemState
from inframind_ray.orchestration.controller import (
    ControllerInput,
    ControllerModel,
    ExecutionController,
    make_input,
)
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.registry import family


def vote_input(answers: tuple[str, ...]) -> ControllerInput:
    """The three-voter input described above."""
    plan = Plan.make(Topology.DEBATE, 3, rounds=1)
    fam = family("gsm8k")
    q = fam.query(int(fam.split_ids("test")[0]), "u", 60.0, 0.0)
    info = build_pool_info(load_pool("constrained"))
    idle = SystemState(3.0, {m: LoadSnapshot(m, timestamp=3.0) for m in info.names})
    return make_input(q, plan, build_graph(plan), list(enumerate(answers)), 3.0, idle,
                      dict.fromkeys(range(3), info.strongest), info)


def main() -> None:
    """Print p50 and p99 per variant."""
    ctl = ExecutionController.load()
    one = ExecutionController(ControllerModel(ctl.model.weights, ctl.model.mean, ctl.model.std))
    inputs = [vote_input(("18", "18")), vote_input(("18", "20"))]
    for name, c in ((f"ensemble of {len(ctl.model.members)}", ctl), ("its first member", one)):
        ts = []
        for i in range(2200):
            t = time.perf_counter()
            c.decide(1, inputs[i % 2])
            ts.append((time.perf_counter() - t) * 1e3)
        ts = sorted(ts[200:])
        print(f"{name}: p50 {ts[len(ts) // 2]:.3f} ms, p99 {ts[int(len(ts) * 0.99)]:.3f} ms")


if __name__ == "__main__":
    main()
