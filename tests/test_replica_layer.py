"""The replica layer on the twin's clock: a twin replica's admission outcomes, the replica choice,
and the load view dropping replicas that are gone."""

from __future__ import annotations

import asyncio

import pytest
from fakes import DEADLINE, OK, OVERLOADED, Clock

from inframind_ray.core.profile import IterationProfile
from inframind_ray.core.request import EngineRequest
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.replica.choice import earliest_finish, shortest_queue
from inframind_ray.replica.load_view import LoadView
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.pool import ModelReplicas, TwinReplica
from inframind_ray.twin.simloop import run_simulated

PROFILE = IterationProfile(c0=0.01, c_prefill=0.0, c_decode=0.001, c_kv=0.0)




def _replica(name: str = "m/0", max_queue: int = 1, margin: float | None = None) -> TwinReplica:
    engine = TwinEngine(name, PROFILE, max_num_seqs=1, kv_capacity_tokens=100_000)
    return TwinReplica("m", engine, max_queue, margin)


def test_twin_replica_admits_sheds_and_overloads():
    """One slot, one queue place: the first request runs, the second waits and is admitted when
    the first ends, a third is answered ``overloaded`` at once, one already due is shed at once,
    and one whose deadline passes while it waits is shed then, never reaching the engine."""
    rep = _replica()

    async def main():
        loop = asyncio.get_running_loop()
        # 100 tokens at 11 ms per decode iteration: about 1.1 s in the engine
        a = loop.create_task(rep.generate(EngineRequest("a", 10, 100, deadline=60.0)))
        await asyncio.sleep(0)
        b = loop.create_task(rep.generate(EngineRequest("b", 10, 100, deadline=60.0)))
        await asyncio.sleep(0)
        snap = rep.snapshot()
        c = await rep.generate(EngineRequest("c", 10, 100, deadline=60.0))
        due = await rep.generate(EngineRequest("due", 10, 100, deadline=loop.time()))
        ra, rb = await a, await b
        d = loop.create_task(rep.generate(EngineRequest("d", 10, 100, deadline=60.0)))
        await asyncio.sleep(0)
        e = await rep.generate(EngineRequest("e", 10, 100, deadline=loop.time() + 0.5))
        rd = await d
        return snap, ra, rb, c, due, rd, e, rep.snapshot(), rep.engine.snapshot()

    (snap, a, b, c, due, d, e, after, engine_after), _ = run_simulated(main())
    assert (snap.waiting, snap.running, snap.waiting_slack_s) == (1, 1, (60.0,))
    assert [r.status for r in (a, b, c, due, d, e)] == [OK, OK, OVERLOADED, DEADLINE, OK,
                                                        DEADLINE]
    assert b.arrival == 0.0 and b.first_token > a.finished_at  # b's times count its queue wait
    assert c.finished_at == c.arrival and c.output_tokens == 0
    assert e.finished_at - e.arrival == pytest.approx(0.5) and e.output_tokens == 0
    assert rep.queue.counts == {OK: 3, OVERLOADED: 1, DEADLINE: 2}
    assert rep.engine.trace is None and rep.queue.in_engine == 0
    # the replica's EWMAs count from its arrival: b's wait in the queue is in its TTFT
    assert after.ttft_s > engine_after.ttft_s and after.e2e_s > engine_after.e2e_s


def test_replica_choice_joins_the_shortest_queue():
    """The shared choice picks the fewest requests (waiting + running), the first on ties; the
    twin's model replicas use it on their snapshots."""
    snaps = [LoadSnapshot("m", waiting=w, running=r) for w, r in ((2, 1), (0, 2), (1, 1))]
    assert shortest_queue(snaps) == 1 and shortest_queue(snaps[:1]) == 0
    with pytest.raises(ValueError, match="no replica"):
        shortest_queue([])
    reps = ModelReplicas("m", [_replica("m/0"), _replica("m/1")])

    async def main():
        first = reps.pick()
        task = asyncio.ensure_future(first.generate(EngineRequest("a", 10, 100)))
        await asyncio.sleep(0)
        second = reps.pick()
        await task
        return first, second

    (first, second), _ = run_simulated(main())
    assert first is reps.replicas[0] and second is reps.replicas[1]


def _predicted_refusal_run(margin: float | None) -> tuple:
    """One slot, margin ``margin``: ``a`` answered (the service-time EWMA is its engine time
    ``s``), then ``b`` runs while ``c`` (due in ``3 s``) waits, and ``d`` is due in ``0.9 s``."""
    rep = _replica(max_queue=4, margin=margin)

    async def main():
        loop = asyncio.get_running_loop()
        a = await rep.generate(EngineRequest("a", 10, 100, deadline=60.0))
        s = rep.queue.service_ewma
        b = loop.create_task(rep.generate(EngineRequest("b", 10, 100, deadline=60.0)))
        await asyncio.sleep(0)
        t = loop.time()
        c = loop.create_task(rep.generate(EngineRequest("c", 10, 100, deadline=t + 3 * s)))
        await asyncio.sleep(0)
        d = await rep.generate(EngineRequest("d", 10, 100, deadline=t + 0.9 * s))
        return s, t, a, await b, await c, d

    out, _ = run_simulated(main())
    return (*out, rep.queue.predicted_refusals)


def test_replica_refuses_a_predicted_deadline_miss_at_once():
    """``d`` (due before ``c``, so first in EDF order) would start once ``b`` ends, in about
    ``s``, and end about ``2 s`` from now: more than 1.5 x its ``0.9 s`` left, so the rule
    (margin 0.5) refuses it at once with ``deadline``; without the rule it waits in the queue
    until its deadline passes and is refused then. ``c`` (predicted ``2 s``, ``3 s`` left) is
    admitted and answered either way."""
    s, t, a, b, c, d, refused = _predicted_refusal_run(0.5)
    assert s == pytest.approx(a.finished_at - a.arrival) and s > 1.0
    assert [r.status for r in (a, b, c, d)] == [OK, OK, OK, DEADLINE]
    assert d.finished_at == pytest.approx(t) and refused == 1  # at once
    *_, d_off, refused_off = _predicted_refusal_run(None)
    assert d_off.status == DEADLINE and refused_off == 0
    assert d_off.finished_at == pytest.approx(t + 0.9 * s)  # queued to die


def test_replica_choice_is_the_earliest_predicted_finish_under_edf():
    """A request due in 5 s finishes first where fewer requests are due before it (EDF), not
    where the queue is shortest; due in 20 s, every waiting request is ahead everywhere and the
    shorter queue wins; with no service time known the choice is the shortest queue."""
    busy_late = LoadSnapshot("m", waiting=3, running=1, waiting_slack_s=(10.0, 11.0, 12.0),
                             capacity=1, service_s=1.0, timestamp=100.0)
    short_urgent = LoadSnapshot("m", waiting=1, running=1, waiting_slack_s=(0.5,),
                                capacity=1, service_s=1.0, timestamp=100.0)
    snaps = [short_urgent, busy_late]
    assert earliest_finish(snaps, 105.0, 100.0) == 1
    assert earliest_finish(snaps, 120.0, 100.0) == 0
    assert earliest_finish(snaps, float("inf"), 100.0) == 0
    unknown = [LoadSnapshot("m", waiting=3, running=1), LoadSnapshot("m", waiting=1, running=1)]
    assert earliest_finish(unknown, 105.0, 100.0) == shortest_queue(unknown) == 1
    # a replica that has not answered yet serves as fast as its siblings, not instantly
    new_busy = LoadSnapshot("m", waiting=2, running=1, capacity=1)
    idle = LoadSnapshot("m", waiting=0, running=0, capacity=1, service_s=0.5)
    assert earliest_finish([new_busy, idle], 105.0, 100.0) == 1
    with pytest.raises(ValueError, match="no replica"):
        earliest_finish([], 1.0, 0.0)


def _snap(rid: str, waiting: int, t: float) -> LoadSnapshot:
    return LoadSnapshot("m", 1, waiting, 1, 0.5, 0.1, 0.02, 1.0, t, replica_id=rid)


def test_load_view_evicts_a_killed_replica_and_sees_its_replacement():
    """A replica silent for longer than the eviction age (2 x stale_after_s) while another
    replica of its model reports is gone: its waiting requests and its age no longer count, and
    the model's replica count is its live replicas; the replacement counts once it reports."""
    clock = Clock(100.0)
    view = LoadView(["m"], clock=clock, stale_after_s=1.0, unavailable_after_s=10.0)
    assert view.evict_after_s == 2.0
    view.push(_snap("r1", 2, clock.t))
    view.push(_snap("r2", 33, clock.t))  # killed right after this snapshot
    for _ in range(8):  # r1 keeps reporting every 0.25 s
        clock.t += 0.25
        view.push(_snap("r1", 2, clock.t))
    ld = view.load("m")
    assert (ld.replicas, ld.waiting) == (2, 35) and ld.age(clock.t) == pytest.approx(2.0)
    clock.t += 0.25
    view.push(_snap("r1", 2, clock.t))
    ld = view.load("m")
    assert (ld.replicas, ld.waiting, ld.age(clock.t), ld.available) == (1, 2, 0.0, True)
    assert not view.describe()["m"]["stale"]
    clock.t += 0.25
    view.push(_snap("r3", 0, clock.t))  # the replacement's first snapshot
    ld = view.load("m")
    assert (ld.replicas, ld.waiting, ld.available) == (2, 2, True)
    assert ld.age(clock.t) == 0.0 and view.describe()["m"]["replicas"] == 2


def test_load_view_keeps_a_silent_model_until_its_new_replica_reports():
    """When no replica of a model reports, nothing is evicted: the age grows, the model goes
    unavailable after ``unavailable_after_s``; the restarted replica's first snapshot drops the
    dead one and the model is fresh and available at once."""
    clock = Clock(0.0)
    view = LoadView(["m"], clock=clock, stale_after_s=1.0, unavailable_after_s=10.0)
    view.push(_snap("old", 5, clock.t))
    clock.t += 30.0
    ld = view.load("m")
    assert (ld.replicas, ld.waiting, ld.available) == (1, 5, False)
    assert view.describe()["m"]["age_s"] == 30.0
    view.push(_snap("new", 0, clock.t))
    ld = view.load("m")
    assert (ld.replicas, ld.waiting, ld.available, ld.age(clock.t)) == (1, 0, True, 0.0)


def test_load_view_counts_sent_calls_no_snapshot_shows_yet():
    """A call sent between two pushes counts at once (in a free slot while the model's capacity
    has room, then waiting with its deadline among the EDF slacks), until every fresh replica has
    reported after it or it ends; the predicted finish of the next call grows with it."""
    from inframind_ray.replica.predict import snapshot_finish_in_s

    clock = Clock(100.0)
    view = LoadView(["m"], clock=clock, stale_after_s=1.0, unavailable_after_s=10.0)
    idle = LoadSnapshot("m", 1, 0, 0, 0.0, 0.1, 0.02, 1.0, clock.t, replica_id="r1",
                        service_s=2.0, capacity=2)
    view.push(idle)
    clock.t += 0.1
    with view.track("m", clock.t + 30.0), view.track("m", clock.t + 20.0):
        with view.track("m", clock.t + 10.0):
            ld = view.load("m")
            # the two due first take the two free slots; the third waits, 30 s from the push
            assert (ld.running, ld.waiting) == (2, 1)
            assert ld.waiting_slack_s == pytest.approx((30.1,))
            assert snapshot_finish_in_s(ld, 60.0, clock.t) > snapshot_finish_in_s(idle, 60.0,
                                                                                  clock.t)
        assert (view.load("m").running, view.load("m").waiting) == (2, 0)  # one ended
        clock.t += 0.15
        view.push(LoadSnapshot("m", 1, 0, 2, 0.0, 0.1, 0.02, 1.0, clock.t, replica_id="r1",
                               service_s=2.0, capacity=2))  # the replica now shows both
        assert (view.load("m").running, view.load("m").waiting) == (2, 0)
    assert view._sent["m"] == {}  # nothing left behind
    with view.track("unknown-model", 1.0):  # a model the view does not hold: ignored
        assert "unknown-model" not in view.system_state().models
