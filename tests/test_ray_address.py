"""Joining a Ray cluster that is not there fails in one line and within seconds, for the
serving plane (`inframind serve --address`) and the learner (`inframind learn --address`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inframind_ray.errors import InframindError
from inframind_ray.serving.ray_address import REACH_TIMEOUT_S, check_reachable, host_port

INFRAMIND = str(Path(sys.executable).parent / "inframind")


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_addresses_are_parsed_and_bad_ones_refused():
    assert host_port("auto") is None and host_port("local") is None
    assert host_port("127.0.0.1:6379") == ("127.0.0.1", 6379)
    assert host_port("ray://head.example:10001") == ("head.example", 10001)
    assert host_port("[::1]:6379") == ("::1", 6379)
    for bad in ("head", "head:", ":6379", "head:port", "head:70000", "ray://"):
        with pytest.raises(InframindError, match="expected 'auto', HOST:PORT"):
            host_port(bad)


def test_a_listening_address_passes_and_a_dead_one_fails_fast():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        check_reachable(f"127.0.0.1:{srv.getsockname()[1]}")
    port = _dead_port()
    t0 = time.monotonic()
    with pytest.raises(InframindError, match=f"nothing answers at 127.0.0.1:{port}"):
        check_reachable(f"ray://127.0.0.1:{port}")
    assert time.monotonic() - t0 < REACH_TIMEOUT_S + 1


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([INFRAMIND, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def _one_line_refusal(r: subprocess.CompletedProcess, port: int) -> None:
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("error: cannot join the Ray cluster at "), r.stderr
    assert f"127.0.0.1:{port}" in lines[-1] and "Traceback" not in r.stderr


def test_serve_and_learn_refuse_an_address_with_nothing_listening(tmp_path):
    """Before this check, ``ray.init`` retried the GCS for minutes (more than 150 s here)."""
    from live_data import live_deployment, shipped_policy

    port = _dead_port()
    t0 = time.monotonic()
    r = _run(["serve", "-c", "deployments/twin_pool.yaml", "--address", f"127.0.0.1:{port}"])
    _one_line_refusal(r, port)
    _, _, dep = live_deployment(tmp_path, shipped_policy())
    (tmp_path / "continual.yaml").write_text(yaml.safe_dump({"deployment": str(dep)}))
    r = _run(["learn", "-c", str(tmp_path / "continual.yaml"), "--out", str(tmp_path / "out"),
              "--iterations", "1", "--address", f"127.0.0.1:{port}"])
    _one_line_refusal(r, port)
    assert time.monotonic() - t0 < 60  # two CLI starts (imports) and two 5 s checks at most
