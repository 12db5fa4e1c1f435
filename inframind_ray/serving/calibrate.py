"""A served model's card from its own answers: validation items of each task family sent through
the HTTP API to one model (policy ``pinned:MODEL``: one agent, step by step), graded by the
families' real graders in the service, summarised as accuracy (with a 95 % Wilson interval) and
output-length priors. Loopback only; bounded in count and time."""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from dataclasses import dataclass

import aiohttp
import numpy as np

from inframind_ray.errors import ConfigError
from inframind_ray.serving.loadgen import json_or_error, require_loopback
from inframind_ray.tasks.registry import FAMILIES, family

MAX_PER_FAMILY = 500


@dataclass(frozen=True)
class CalibrationSpec:
    """Which items go to which model: ``per_family`` validation items of each task family
    (seeded), each with ``budget_s``, at most ``concurrency`` in flight."""

    model: str
    tasks: tuple[str, ...] = FAMILIES
    per_family: int = 20
    seed: int = 0
    budget_s: float = 300.0
    concurrency: int = 4
    split: str = "val"

    def validate(self) -> None:
        """Raise ConfigError naming the bad field."""
        if not 1 <= self.per_family <= MAX_PER_FAMILY:
            raise ConfigError("per-family", f"must be 1-{MAX_PER_FAMILY}, got {self.per_family}")
        if not self.budget_s > 0:
            raise ConfigError("budget", f"must be > 0 s, got {self.budget_s:g}")
        if not 1 <= self.concurrency <= 64:
            raise ConfigError("concurrency", f"must be 1-64, got {self.concurrency}")
        for t in self.tasks:
            try:
                family(t)
            except ValueError as e:
                raise ConfigError("tasks", str(e)) from None

    def items(self) -> list[tuple[str, int]]:
        """(family, item id) of every calibration query: distinct validation items."""
        out = []
        for t in self.tasks:
            ids = family(t).split_ids(self.split)
            n = min(self.per_family, len(ids))
            rng = np.random.default_rng([self.seed, zlib.crc32(f"calibrate:{t}".encode())])
            out += [(t, int(i)) for i in rng.choice(ids, n, replace=False)]
        return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n trials."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return round((c - h) / d, 4), round((c + h) / d, 4)


def card(spec: CalibrationSpec, records: list[dict]) -> dict:
    """The model card: per family the graded answers' accuracy and interval, and the output
    tokens of its step-by-step answers (mean, 98th percentile); unanswered queries count as
    wrong and are reported."""
    fams = {}
    for t in spec.tasks:
        rs = [r for r in records if r["task"] == t]
        ok = [r for r in rs if r["status"] == "ok"]
        k = sum(bool(r.get("correct")) for r in rs)
        toks = np.array([r["output_tokens"] for r in ok], float)
        fams[t] = {
            "n": len(rs), "answered": len(ok), "accuracy": round(k / max(1, len(rs)), 4),
            "accuracy_ci95": list(wilson(k, len(rs))),
            "output_tokens_mean": round(float(toks.mean()), 1) if len(toks) else None,
            "output_tokens_p98": round(float(np.percentile(toks, 98)), 1) if len(toks) else None,
            "latency_p50_s": round(float(np.median([r["latency_s"] for r in ok])), 3)
            if ok else None,
        }
    return {"model": spec.model, "calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime()),
            "split": spec.split, "seed": spec.seed, "per_family": spec.per_family,
            "strategy": "deepthink", "families": fams}


async def run_calibration(url: str, spec: CalibrationSpec, api_key: str | None = None
                          ) -> tuple[dict, list[dict]]:
    """Send every calibration item, bounded; return the card and the per-query records."""
    require_loopback(url)
    spec.validate()
    items = spec.items()
    sem = asyncio.Semaphore(spec.concurrency)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    records: list[dict] = []

    async def one(session: aiohttp.ClientSession, task: str, item: int) -> None:
        body = {"task": task, "item_id": item, "budget_s": spec.budget_s,
                "policy": f"pinned:{spec.model}"}
        rec = {"task": task, "item_id": item, "status": "no answer", "correct": False}
        async with sem:
            try:
                async with session.post(f"{url}/v1/queries", json=body) as r:
                    data = await json_or_error(r)
                    rec["http_status"] = r.status
                    if r.status == 200:
                        rec.update(status=data["status"], correct=bool(data["correct"]),
                                   output_tokens=data["steps"][-1]["output_tokens"],
                                   latency_s=data["latency_s"])
                    else:
                        rec["status"] = f"http {r.status}: {data.get('error', '')}"
            except (aiohttp.ClientError, TimeoutError) as e:
                rec["status"] = f"{type(e).__name__}: {e}"
        records.append(rec)

    timeout = aiohttp.ClientTimeout(total=spec.budget_s + 60)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        try:
            async with session.get(f"{url}/v1/state") as r:
                models = (await r.json(content_type=None)).get("models", {})
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ConfigError("url", f"cannot reach {url}: {e}") from None
        if spec.model not in models:
            raise ConfigError("model", f"{spec.model!r} is not served at {url} (models: "
                              f"{', '.join(models) or 'none'})")
        await asyncio.gather(*(one(session, t, i) for t, i in items))
    return card(spec, records), records
