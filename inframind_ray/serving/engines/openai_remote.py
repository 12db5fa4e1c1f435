"""An OpenAI-compatible remote endpoint as a pool model (black-box pool).

Nothing inside the remote server is visible, so the signals are client-side: requests in
flight, EWMAs of observed TTFT (streamed), time per output token and end-to-end latency, and the
error rate.
"""

from __future__ import annotations

import json
import os
import time

import aiohttp

from inframind_ray.config import OpenAIEngineSpec
from inframind_ray.core.request import RequestStatus, ewma
from inframind_ray.core.types import LoadSnapshot
from inframind_ray.serving.engines.base import Engine, GenerateRequest, GenerateResult


class OpenAIEngine(Engine):
    """Streams chat completions from ``spec.base_url``."""

    def __init__(self, spec: OpenAIEngineSpec) -> None:
        self.spec = spec
        self.capacity = spec.max_inflight
        self.inflight = 0
        self.errors = 0
        self.done = 0
        self._ewma = {"ttft": 0.0, "tpot": 0.0, "e2e": 0.0}
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the HTTP session."""
        headers = {}
        if self.spec.api_key_env and os.environ.get(self.spec.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.spec.api_key_env]}"
        self._session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s))

    def _observe(self, key: str, v: float) -> None:
        self._ewma[key] = ewma(self._ewma[key], v)

    async def generate(self, req: GenerateRequest) -> GenerateResult:
        """POST /chat/completions with stream=true; measure TTFT and latency client-side."""
        if self._session is None:
            await self.start()
        body = {"model": self.spec.model, "stream": True, "max_tokens": req.max_tokens,
                "temperature": 0, "messages": [{"role": "user", "content": req.prompt}]}
        t0 = time.time()
        first: float | None = None
        parts: list[str] = []
        n_chunks = 0
        self.inflight += 1
        try:
            timeout = aiohttp.ClientTimeout(total=max(0.001, req.deadline - t0))
            async with self._session.post(f"{self.spec.base_url.rstrip('/')}/chat/completions",
                                          json=body, timeout=timeout) as r:
                if r.status != 200:
                    self.errors += 1
                    text = (await r.text())[:200]
                    status = (RequestStatus.OVERLOADED if r.status in (429, 503)
                              else RequestStatus.ERROR)
                    return GenerateResult(req.request_id, status, detail=f"HTTP {r.status}: {text}",
                                          latency_s=time.time() - t0)
                async for raw in r.content:
                    line = raw.decode().strip()
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    delta = json.loads(line[5:])["choices"][0].get("delta", {}).get("content")
                    if delta:
                        first = first or time.time()
                        parts.append(delta)
                        n_chunks += 1
        except TimeoutError:
            return GenerateResult(req.request_id, RequestStatus.DEADLINE,
                                  detail="remote call passed deadline",
                                  latency_s=time.time() - t0)
        except aiohttp.ClientError as e:
            self.errors += 1
            return GenerateResult(req.request_id, RequestStatus.ERROR,
                                  detail=f"{type(e).__name__}: {e}",
                                  latency_s=time.time() - t0)
        finally:
            self.inflight -= 1
        end = time.time()
        self.done += 1
        ttft = (first or end) - t0
        self._observe("ttft", ttft)
        self._observe("e2e", end - t0)
        if n_chunks > 1:
            self._observe("tpot", (end - (first or end)) / (n_chunks - 1))
        return GenerateResult(req.request_id, RequestStatus.FINISHED, "".join(parts), 0,
                              n_chunks, ttft_s=ttft, latency_s=end - t0)

    def stats(self) -> LoadSnapshot:
        """Client-side proxies of the remote load."""
        return LoadSnapshot(self.spec.model, running=self.inflight, ttft_s=self._ewma["ttft"],
                            tpot_s=self._ewma["tpot"], e2e_s=self._ewma["e2e"],
                            timestamp=time.time())

    def diagnostics(self) -> dict:
        """The error rate of the calls so far."""
        total = self.done + self.errors
        return {"error_rate": self.errors / total if total else 0.0}

    async def shutdown(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
