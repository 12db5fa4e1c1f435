"""Latency prediction from live load and a model's profile (the executor's "price list").

Two views of how many requests a model runs at once: its sequence slots (``kv=False``: every
earlier figure, right where ``max_num_seqs`` binds, as in the ``constrained`` pool), or the
replica layer's rule (``kv=True``, ``core.finish.concurrency`` with the KV usage): as many of
the running mix as its KV cache holds, at most its slots. On a realistic pool (vLLM's 1024
slots) only the second sees congestion: the KV cache, not the slots, bounds the batch.
"""

from __future__ import annotations

import math

from inframind_ray.core.finish import concurrency, queue_per_slot
from inframind_ray.core.types import LoadSnapshot, ModelInfo, PoolInfo, StepContext, StepDecision


def slots(info: ModelInfo, load: LoadSnapshot) -> int:
    """Sequence slots of a model over its replicas (at least one replica's worth)."""
    return info.max_num_seqs * max(1, load.replicas)


def engine_slots(info: ModelInfo, load: LoadSnapshot, kv: bool = False) -> int:
    """Requests the model runs at once: its sequence slots, or (``kv``) the replica layer's
    KV-aware concurrency (``core.finish.concurrency``)."""
    n = slots(info, load)
    return concurrency(n, load.running, load.waiting, load.kv_usage) if kv else n


def free_slots(info: ModelInfo, load: LoadSnapshot, kv: bool = False) -> int:
    """Sequence slots (``kv``: KV-bound concurrency) not running a request or promised to a
    waiting one."""
    return engine_slots(info, load, kv) - load.running - load.waiting


def congestion(info: ModelInfo, load: LoadSnapshot, kv: bool = False) -> float:
    """Requests per slot that a new request finds beyond the free slots (0 while one is free):
    the queue a new arrival deepens, in units of one request's slot time
    (``core.finish.queue_per_slot``, the admission rule's queue term)."""
    return queue_per_slot(load.waiting, load.running, engine_slots(info, load, kv))


def latency_terms(
    info: ModelInfo, load: LoadSnapshot, prompt_tokens: int, out_tokens: float,
    occupancy: str = "e2e", kv: bool = False,
) -> tuple[float, float]:
    """(service, queue wait) seconds of one new request; ``predict_latency`` is their sum.

    Queue wait: requests beyond the free sequence slots wait, on average, their share of the
    in-flight work per slot. ``occupancy`` is how long one request holds a slot: ``"e2e"`` its
    whole latency EWMA (queue wait included, so the estimate grows fast with the queue: the
    infra-aware heuristic's cautious view), ``"service"`` the EWMA from first to last token plus
    one prefill (the slot time alone). Service: one prefill iteration and ``out_tokens - 1``
    decode iterations at the batch size the request will join. ``kv``: count the queue
    against the KV-bound concurrency (``engine_slots``) instead of the sequence slots.
    """
    per_replica = math.ceil((load.running + 1) / max(1, load.replicas))
    batch = max(1, min(info.max_num_seqs, per_replica))
    kv_tokens = load.kv_usage * info.kv_capacity
    p = info.profile
    service = p.iteration_time(prompt_tokens, batch - 1, kv_tokens) + max(
        0.0, out_tokens - 1) * p.iteration_time(0, batch, kv_tokens)
    queued = congestion(info, load, kv)
    if queued <= 0:
        return service, 0.0
    if load.e2e_s <= 0:
        per_request = service
    elif occupancy == "service":
        per_request = (max(load.e2e_s - load.ttft_s, 0.0)
                       + p.iteration_time(prompt_tokens, 0, kv_tokens))
    else:
        per_request = load.e2e_s
    return service, queued * per_request


def predict_latency(
    info: ModelInfo, load: LoadSnapshot, prompt_tokens: int, out_tokens: float,
    occupancy: str = "e2e", kv: bool = False,
) -> float:
    """Predicted seconds from submission to last token of one new request (the analytic price
    list: ``latency_terms`` summed)."""
    service, wait = latency_terms(info, load, prompt_tokens, out_tokens, occupancy, kv)
    return service + wait


def fastest_call(pool: PoolInfo, ctx: StepContext) -> tuple[StepDecision, float]:
    """The (model, strategy) this node's call is predicted to finish soonest with, and those
    seconds: the fallback of a call that runs too late (``on_deadline: degrade``). Among the
    available models (all when none is) and the node's allowed strategies, by the price list at
    the live load (slot-time occupancy, KV-bound queue: the replica layer's view)."""
    up = [m for m in pool.models if ctx.state.models[m.name].available] or list(pool.models)
    best, best_t = None, math.inf
    for m in up:
        load = ctx.state.models[m.name]
        for s in ctx.allowed:
            t = predict_latency(m, load, ctx.prompt_tokens(s),
                                m.call_tokens(s, task=ctx.query.task), "service", kv=True)
            if t < best_t:
                best, best_t = StepDecision(m.name, s), t
    assert best is not None  # a pool has a model, a node an allowed strategy
    return best, best_t
