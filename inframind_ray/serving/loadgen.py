"""Bounded Poisson load against the HTTP API, loopback only."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import aiohttp
import numpy as np

from inframind_ray import assumptions as A
from inframind_ray.errors import ConfigError
from inframind_ray.tasks.workload import MMLU_ONLY, WorkloadSpec, budgets, sample_task_items

MAX_QUERIES = 20_000


def stamp() -> dict[str, str]:
    """The send instant as ``X-Request-Start`` (``t=`` epoch seconds): a pool with
    ``serving.request_start_header`` counts the budget from it (the same clock here)."""
    return {"X-Request-Start": f"t={time.time():.6f}"}


async def json_or_error(r: aiohttp.ClientResponse) -> dict:
    """The reply's JSON body, or ``{"error": text}`` for a plain-text one (Serve's own
    refusals: its proxy's 429 past the ingress bound)."""
    raw = await r.text()
    try:
        data = json.loads(raw)
    except ValueError:
        return {"error": raw.strip()[:300]}
    return data if isinstance(data, dict) else {"error": str(data)[:300]}


def require_loopback(url: str) -> None:
    """Refuse any target that is not on this machine's loopback range."""
    host = urlparse(url).hostname
    if not host:
        raise ConfigError("url", f"not a URL: {url!r}")
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        raise ConfigError("url", f"cannot resolve {host!r}") from None
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        raise ConfigError("url", f"load is only sent to loopback addresses, not {host!r}")


@dataclass
class LoadResult:
    """Per-request outcomes of one load run."""

    rate_per_min: float
    duration_s: float
    policy: str | None
    records: list[dict] = field(default_factory=list)
    wall_s: float = 0.0

    @staticmethod
    def _goodput(records: list[dict]) -> float:
        """Share of sent requests answered correctly within budget (unanswered ones count)."""
        return round(sum(bool(x.get("correct")) and bool(x.get("within_budget"))
                         for x in records if x["http_status"] == 200) / max(1, len(records)), 4)

    def summary(self) -> dict:
        """Counts, goodput (overall and per task family), SLO attainment, latency percentiles."""
        r = self.records
        n = len(r)
        ok = [x for x in r if x["http_status"] == 200]
        lat = np.array([x["latency_s"] for x in ok]) if ok else np.array([np.nan])
        return {
            "policy": self.policy or "default", "rate_per_min": self.rate_per_min,
            "duration_s": self.duration_s, "sent": n, "http_200": len(ok),
            "http_429": sum(x["http_status"] == 429 for x in r),
            "http_503": sum(x["http_status"] == 503 for x in r),
            "errors": sum(x["http_status"] not in (200, 429, 503) for x in r),
            "goodput": self._goodput(r),
            "slo_attainment": round(sum(bool(x.get("within_budget")) for x in ok) / max(1, n), 4),
            "accuracy": round(sum(bool(x.get("correct")) for x in ok) / max(1, n), 4),
            "latency_p50_s": round(float(np.nanpercentile(lat, 50)), 3),
            "latency_p95_s": round(float(np.nanpercentile(lat, 95)), 3),
            "calls_per_query": round(float(np.mean([x.get("n_steps", 0) for x in ok]))
                                     if ok else 0.0, 2),
            "wall_s": round(self.wall_s, 2),
            "goodput_by_task": {t: self._goodput([x for x in r if x["task"] == t])
                                for t in dict.fromkeys(x["task"] for x in r)},
        }


@dataclass(frozen=True)
class LoadSpec:
    """One bounded load run: Poisson arrivals of benchmark items of ``split`` (MMLU-Pro, or a
    mix of task families) for ``duration_s`` seconds, then at most ``drain_s`` more seconds
    waiting for the answers."""

    rate_per_min: float = 30.0
    duration_s: float = 60.0
    seed: int = 0
    policy: str | None = None
    budget_range_s: tuple[float, float] = A.BUDGET_RANGE_S
    split: str = "test"
    drain_s: float = 120.0
    tasks: tuple[tuple[str, float], ...] = MMLU_ONLY  # (task family, share of the queries)

    def validate(self) -> None:
        """Raise ConfigError naming the bad field."""
        if not self.rate_per_min > 0:
            raise ConfigError("rate", f"must be > 0 req/min, got {self.rate_per_min}")
        if not self.duration_s > 0:
            raise ConfigError("duration", f"must be > 0 s, got {self.duration_s}")


@dataclass(frozen=True)
class DemoSpec:
    """``inframind demo``: each policy at a low and a high rate, tighter budgets than the bench
    so that the high rate congests the twin pool within a few minutes."""

    low_rate: float = 30.0
    high_rate: float = 300.0
    low_duration_s: float = 40.0
    high_duration_s: float = 75.0
    policies: tuple[str, ...] = ("inframind", "infra-heuristic", "always-strongest")
    budget_range_s: tuple[float, float] = (15.0, 45.0)


async def run_load(url: str, spec: LoadSpec, api_key: str | None = None) -> LoadResult:
    """Send the spec's Poisson arrivals, then wait for the answers at most ``spec.drain_s`` more
    seconds. Bounded in count and time."""
    require_loopback(url)
    spec.validate()
    rate_per_min, duration_s, seed = spec.rate_per_min, spec.duration_s, spec.seed
    policy, budget_range_s, drain_s = spec.policy, spec.budget_range_s, spec.drain_s
    n = min(MAX_QUERIES, max(1, int(rate_per_min / 60 * duration_s * 1.5) + 10))
    work = WorkloadSpec(rate_per_min, n, split=spec.split, budget_range_s=budget_range_s,
                        seed=seed, tasks=spec.tasks)
    work.validate()
    items, buds = sample_task_items(work), budgets(work)
    gaps = np.random.default_rng(seed).exponential(60.0 / rate_per_min, size=n)
    result = LoadResult(rate_per_min, duration_s, policy)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.monotonic()

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        task, item = items[i]
        body = {"item_id": item, "budget_s": float(buds[i])}
        if task != "mmlu_pro":
            body["task"] = task
        if policy:
            body["policy"] = policy
        sent = time.monotonic()
        rec: dict = {"http_status": 0, "task": task, "item_id": item, "budget_s": buds[i],
                     "error": "no answer before the load run ended"}
        try:
            async with session.post(f"{url}/v1/queries", json=body,
                                    headers=stamp()) as r:
                data = await json_or_error(r)
                rec = {"http_status": r.status, "task": task, "item_id": item,
                       "budget_s": buds[i], "client_latency_s": time.monotonic() - sent}
                if r.status == 200:
                    rec.update(latency_s=data["latency_s"], correct=data["correct"],
                               within_budget=data["within_budget"], n_steps=len(data["steps"]),
                               models=[s["model"] for s in data["steps"]],
                               topology=data["plan"]["topology"])
        except (aiohttp.ClientError, TimeoutError) as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        finally:  # every request sent is reported, answered or not
            result.records.append(rec)

    timeout = aiohttp.ClientTimeout(total=budget_range_s[1] + drain_s)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        t = 0.0
        for i in range(n):
            t += gaps[i]
            if t > duration_s:
                break
            await asyncio.sleep(max(0.0, t0 + t - time.monotonic()))
            tasks.append(asyncio.create_task(one(session, i)))
        await asyncio.wait(tasks, timeout=budget_range_s[1] + drain_s)
        for task in tasks:
            task.cancel()
    result.wall_s = time.monotonic() - t0
    return result
