"""The KV-aware price list (issue 19): the teacher counts a model's queue the way the replica
layer's admission rule does (``core.finish``), so on a realistic pool (vLLM's 1024 slots, the KV
cache binding) it sees congestion that free sequence slots hide, and on the ``constrained`` pool
(slots binding) it prices exactly as before. Unit checks on load snapshots; no simulation."""

from __future__ import annotations

import itertools

import pytest

from inframind_ray.config import load_pool
from inframind_ray.core.finish import concurrency, finish_in_s, queue_per_slot
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import build_graph
from inframind_ray.core.types import LoadSnapshot, QueryInfo, StepContext, SystemState
from inframind_ray.policy.baselines import IO_PLAN, PricedSlots, PricedTopology
from inframind_ray.policy.latency import congestion, free_slots, latency_terms
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.replica import predict

BIG = "llama-3.1-70b"


@pytest.fixture(scope="module")
def default_info():
    return build_pool_info(load_pool("default"))


@pytest.fixture(scope="module")
def constrained_info():
    return build_pool_info(load_pool("constrained"))


def test_the_replica_layer_reads_the_same_rule():
    """``replica.predict`` is the rule in ``core.finish``, not a copy of it."""
    assert predict.finish_in_s is finish_in_s and predict.concurrency is concurrency
    assert finish_in_s(10, 6, 6, 2.0) == pytest.approx((11 / 6 + 1) * 2.0)
    assert queue_per_slot(0, 3, 6) == 0.0


def test_concurrency_with_kv_pressure():
    """Without a queue the KV cache bounds concurrency at the running mix it holds; with one,
    the engine runs what it runs now (the admission rule's view); no KV usage: unchanged."""
    assert concurrency(1024, 100, 0) == 1024
    assert concurrency(1024, 100, 0, kv_usage=0.5) == 200
    assert concurrency(1024, 300, 0, kv_usage=0.1) == 1024  # the slots bind first
    assert concurrency(1024, 300, 40, kv_usage=0.9) == 300
    assert concurrency(1024, 300, 40) == 300
    assert concurrency(1024, 0, 0, kv_usage=0.0) == 1024


def test_kv_bound_queue_priced_where_slots_see_none(default_info):
    """The default pool's 70B with 300 running and 200 waiting (KV cache 90 % full): 724 free
    sequence slots, so the slot view prices no wait; the KV view prices 201 / 300 of a slot
    time, as the admission rule would predict."""
    m = default_info[BIG]
    ld = LoadSnapshot(BIG, 1, waiting=200, running=300, kv_usage=0.9, ttft_s=1.0, tpot_s=0.05,
                      e2e_s=20.0)
    assert free_slots(m, ld) == 524 and congestion(m, ld) == 0.0
    assert latency_terms(m, ld, 500, 300, "service")[1] == 0.0
    assert free_slots(m, ld, kv=True) < 0
    assert congestion(m, ld, kv=True) == pytest.approx(201 / 300)
    assert latency_terms(m, ld, 500, 300, "service", kv=True)[1] > 5.0


def test_kv_view_equals_slot_view_on_the_constrained_pool(constrained_info):
    """Where the slots bind (the 70B's 6), the KV view changes no price: every state the
    constrained pool reaches (running up to the slots, KV usage of their contexts)."""
    for m in constrained_info.models:
        n = m.max_num_seqs
        for running, waiting in itertools.product(range(n + 1), (0, 1, 5, 40)):
            if waiting and running < n:
                continue  # a queue forms only once the slots are full
            kv = running * 4096 / m.kv_capacity  # every running request at the 4k context cap
            ld = LoadSnapshot(m.name, 1, waiting, running, kv, 0.5, 0.03, 8.0)
            assert congestion(m, ld, kv=True) == congestion(m, ld)
            assert free_slots(m, ld, kv=True) == free_slots(m, ld)
            assert latency_terms(m, ld, 300, 200, "service", kv=True) == latency_terms(
                m, ld, 300, 200, "service")


def _loads(info, big: LoadSnapshot) -> SystemState:
    return SystemState(0.0, {m: big if m == BIG else LoadSnapshot(m, 1, 0, 0, 0.0, 0.3, 0.02, 3.0)
                             for m in info.names})


def test_teacher_sheds_a_kv_bound_queue_that_the_slot_teacher_ignores(default_info):
    """On the default pool the KV-aware teacher moves a law question off a 70B with a deep KV-bound
    queue; the slot-counting teacher keeps it there (free slots: no toll)."""
    big = LoadSnapshot(BIG, 1, waiting=400, running=420, kv_usage=0.95, ttft_s=2.0,
                       tpot_s=0.09, e2e_s=30.0)
    state = _loads(default_info, big)
    q = QueryInfo("q", "text", 90.0, 0.0, category="law", prompt_tokens=300, fewshot_tokens=600)
    node = build_graph(IO_PLAN).nodes[0]
    ctx = StepContext(q, IO_PLAN, node, 1, 0.0, state)
    old = PricedSlots(default_info).decide(ctx)
    new = PricedTopology(default_info).decide(ctx)
    assert (old.model, old.strategy) == (BIG, Strategy.DEEPTHINK)
    assert (new.model, new.strategy) != (BIG, Strategy.DEEPTHINK)


def test_teacher_votes_only_while_the_strongest_batch_is_small(default_info):
    """1024 free slots always allow a vote; the KV-aware teacher votes on an idle 70B but not
    on one already decoding a batch of 150 (a vote would slow every call in it)."""
    q = QueryInfo("q", "text", 90.0, 0.0, category="math", prompt_tokens=300)
    idle = LoadSnapshot(BIG, 1, 0, 2, 0.01, 0.3, 0.03, 5.0)
    busy = LoadSnapshot(BIG, 1, 0, 150, 0.3, 0.5, 0.05, 9.0)
    new, old = PricedTopology(default_info), PricedSlots(default_info)
    assert new.plan(q, _loads(default_info, idle)) == new.VOTE
    assert new.plan(q, _loads(default_info, busy)) == IO_PLAN
    assert old.plan(q, _loads(default_info, busy)) == old.VOTE
