"""When a new request would finish at an engine, as a pure rule on counts: the replica layer's
admission, ingress and replica choice (``replica.predict``) and the policies' price list
(``policy.latency``) all read it, so the queue a policy prices is the queue admission sees.

A replica runs up to ``capacity`` requests at once, each for about ``service_s`` seconds; while
requests wait (in the replica queue or the engine's own, as when the KV cache rather than
``max_num_seqs`` bounds the batch), it runs as many as it is running now (:func:`concurrency`).
A new request waits behind the requests running and those ahead of it; slots free at
``concurrency / service_s`` per second, so it starts once ``running + ahead - concurrency + 1``
of them have freed (:func:`queue_per_slot`), then takes ``service_s`` itself.
"""

from __future__ import annotations


def queue_per_slot(ahead: int, in_engine: int, capacity: int) -> float:
    """Requests that must finish before a new one starts, per concurrent slot: its queue wait in
    units of one request's service time (0 while a slot is free)."""
    if capacity < 1:
        raise ValueError("capacity must be >= 1")
    return max(0, in_engine + ahead - capacity + 1) / capacity


def finish_in_s(ahead: int, in_engine: int, capacity: int, service_s: float) -> float:
    """Predicted seconds from now to the end of a new request (0 when ``service_s`` is unknown,
    i.e. 0: nothing is predicted before the first answer)."""
    return (queue_per_slot(ahead, in_engine, capacity) + 1.0) * service_s


def concurrency(capacity: int, running: int, waiting: int,
                kv_usage: float | None = None) -> int:
    """How many requests the engine runs at once: its capacity while nothing waits, else what it
    runs now (the engine is full: by its slots, its KV cache or its prefill budget). With
    ``kv_usage`` (the KV cache's used share) the KV pressure counts before a queue forms too:
    while nothing waits, as many of the running mix as the whole cache holds
    (``running / kv_usage``), at most ``capacity``."""
    if waiting > 0 or kv_usage is None or running <= 0 or kv_usage <= 0:
        return max(1, capacity if waiting == 0 else min(capacity, running))
    return max(1, min(capacity, int(running / min(1.0, kv_usage))))
