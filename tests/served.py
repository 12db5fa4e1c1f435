"""Helpers of the tests that run a real Ray Serve session."""

from __future__ import annotations

import time

import pytest
import ray


def wait_idle(session, timeout: float = 60.0, strict: bool = False) -> None:  # noqa: ANN001
    """Wait until the served session has no query in flight and every model is idle; with
    ``strict``, fail the test if it is not idle within ``timeout`` seconds."""
    end = time.time() + timeout
    while time.time() < end:
        st = ray.get(session.orchestrator.state.remote())
        if st["inflight_queries"] == 0 and all(
                m["waiting"] == 0 and m["running"] == 0 for m in st["models"].values()):
            return
        time.sleep(0.2)
    if strict:
        pytest.fail(f"serving plane not idle after {timeout} s")
