"""Live rollouts without a served pool: queries decided by the shipped learned policy through
the recording wrapper and written by the serving plane's RolloutRecorder (tests of the reader
and the continual learner)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import yaml

from inframind_ray.config import RolloutConfig, load_pool
from inframind_ray.core.request import RequestStatus
from inframind_ray.core.topology import build_graph
from inframind_ray.core.types import LoadSnapshot, StepContext, SystemState
from inframind_ray.orchestration.runner import AgentResult, QueryResult
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
from inframind_ray.policy.recording import RecordingPolicy
from inframind_ray.policy.registry import PolicyRegistry
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.serving.rollouts import RolloutRecorder
from inframind_ray.tasks.registry import family

POOL = Path(__file__).parent / "pools" / "serve_test.yaml"


def shipped_policy() -> tuple:
    """(pool info, the shipped learned policy) of the serving tests' pool."""
    pool = build_pool_info(load_pool(POOL))
    return pool, LearnedPolicy.load(DEFAULT_CHECKPOINT, pool)


def live_deployment(tmp: Path, served: tuple) -> tuple[RolloutRecorder, PolicyRegistry, Path]:
    """A recorder and a registry (seeded with the shipped policy as v0001) under ``tmp``, and
    ``tmp/dep.yaml``: the serving tests' pool with its records and registry folders there."""
    reg = PolicyRegistry(tmp / "reg")
    reg.seed(DEFAULT_CHECKPOINT, served[0])
    rec = RolloutRecorder(tmp / "rec", RolloutConfig(flush_rows=10_000))
    dep = yaml.safe_load(POOL.read_text())
    dep["serving"] |= {"records_dir": str(rec.root), "registry_dir": str(reg.root)}
    (tmp / "dep.yaml").write_text(yaml.safe_dump(dep))
    return rec, reg, tmp / "dep.yaml"


def serve_queries(rec: RolloutRecorder, served: tuple, first: int, n: int,
                  version: str = "v0001", explore_every: int = 0) -> list[str]:
    """``n`` MMLU-Pro queries decided by the learned policy through a RecordingPolicy (its real
    observations, actions, log-probabilities), every call answered in 0.5 s; every
    ``explore_every``-th query explores (epsilon 0.3, as ``serving.rollouts.explore_share``
    does); the recorder's episodes are finished and flushed. Returns their rollout ids."""
    pool, policy = served
    fam = family("mmlu_pro")
    items = fam.split_ids("test")
    ids = []
    for i in range(first, first + n):
        now = time.time()
        q = fam.query(int(items[i % len(items)]), f"q{i}", 30.0, now)
        ep = rec.start(q, version, (0, 0, 0))
        drawn = explore_every and i % explore_every == 0
        rp = RecordingPolicy(policy, rec.sink(ep), explore=np.random.default_rng(i) if drawn
                             else None, epsilon=0.3)
        state = SystemState(now, {m: LoadSnapshot(m, timestamp=now) for m in pool.names})
        plan = rp.plan(q, state)
        graph = build_graph(plan)
        steps = []
        for node in graph.nodes:
            d = rp.decide(StepContext(q, plan, node, graph.remaining_depth(node.id), now, state))
            steps.append(AgentResult(node.id, node.role, node.kind.value, d.model, d.strategy,
                                     RequestStatus.FINISHED, "The answer is (A)", now, now + 0.5,
                                     first_token=now + 0.1, prompt_tokens=50, output_tokens=9))
        rec.finish(ep, QueryResult(q, plan, steps, answer="A", end=now + 0.5), correct=True)
        ids.append(ep.rollout_id)
    rec.flush()
    return ids
