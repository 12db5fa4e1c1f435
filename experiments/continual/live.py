"""What the continual scenarios (bad_candidate.py, drift_scenario.py) share: the Serve lock, and
one live query POSTed to the pool's /v1/queries with its row filled as the scenarios read it."""

from __future__ import annotations

import time

import aiohttp

SERVE_LOCK = "/tmp/serve.lock"  # shared with every Serve run on this machine (its ports)


async def post_query(session: aiohttp.ClientSession, url: str, body: dict, row: dict,
                     t0: float) -> dict:
    """Send ``body``; ``row`` gets the status, the version that answered, the grade, budget
    and latency (or the client error) and ``done_s`` (seconds since ``t0``). Returns ``row``."""
    try:
        async with session.post(f"{url}/v1/queries", json=body) as r:
            d = await r.json(content_type=None)
            row.update(http_status=r.status, policy_version=d.get("policy_version"),
                       correct=d.get("correct"), within_budget=d.get("within_budget"),
                       latency_s=d.get("latency_s"))
    except (aiohttp.ClientError, TimeoutError) as e:
        row["error"] = f"{type(e).__name__}: {e}"
    row["done_s"] = time.monotonic() - t0
    return row
