"""Latency prediction from live load and a model's profile (the executor's "price list")."""

from __future__ import annotations

import math

from inframind_ray.policy.base import ModelInfo, ModelLoad


def slots(info: ModelInfo, load: ModelLoad) -> int:
    """Sequence slots of a model over its replicas (at least one replica's worth)."""
    return info.max_num_seqs * max(1, load.replicas)


def free_slots(info: ModelInfo, load: ModelLoad) -> int:
    """Sequence slots not running a request or promised to a waiting one."""
    return slots(info, load) - load.running - load.waiting


def latency_terms(
    info: ModelInfo, load: ModelLoad, prompt_tokens: int, out_tokens: float
) -> tuple[float, float]:
    """(service, queue wait) seconds of one new request; ``predict_latency`` is their sum.

    Queue wait: requests beyond the free sequence slots wait, on average, their share of the
    in-flight work (e2e EWMA per slot). Service: one prefill iteration and ``out_tokens - 1``
    decode iterations at the batch size the request will join.
    """
    n_slots = slots(info, load)
    per_replica = math.ceil((load.running + 1) / max(1, load.replicas))
    batch = max(1, min(info.max_num_seqs, per_replica))
    kv = load.kv_usage * info.kv_capacity
    p = info.profile
    service = p.iteration_time(prompt_tokens, batch - 1, kv) + max(0.0, out_tokens - 1) * (
        p.iteration_time(0, batch, kv)
    )
    excess = 1 - free_slots(info, load)
    if excess <= 0:
        return service, 0.0
    per_request = load.e2e_s if load.e2e_s > 0 else service
    return service, excess / n_slots * per_request


def predict_latency(
    info: ModelInfo, load: ModelLoad, prompt_tokens: int, out_tokens: float
) -> float:
    """Predicted seconds from submission to last token of one new request (the analytic price
    list: ``latency_terms`` summed)."""
    service, wait = latency_terms(info, load, prompt_tokens, out_tokens)
    return service + wait
