"""Per-model iteration-time profile of a continuous-batching engine (fitted from measured data)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IterationProfile:
    """``t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K`` seconds.

    P: prompt tokens prefilled this iteration; B: sequences decoding one token; K: KV tokens held
    by the batch. Fitted by ``scripts/fit_profiles.py`` (see docs/profiles.md).
    """

    c0: float
    c_prefill: float
    c_decode: float
    c_kv: float

    def iteration_time(self, prefill_tokens: int, decode_seqs: int, kv_tokens: float) -> float:
        """Seconds for one forward pass of the batch."""
        return (
            self.c0
            + self.c_prefill * prefill_tokens
            + self.c_decode * decode_seqs
            + self.c_kv * kv_tokens
        )

    def scaled(self, memory_factor: float, compute_factor: float) -> IterationProfile:
        """A profile on other hardware: memory-bound terms / memory_factor, prefill / compute."""
        return IterationProfile(
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
