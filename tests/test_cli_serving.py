"""`inframind serve`, `query` and `load` as a user runs them: a real service in a subprocess,
with an API key, answering the other two commands, then stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "inframind_ray.cli"]


def test_serve_query_load_roundtrip(tmp_path):
    cfg = yaml.safe_load((ROOT / "tests" / "pools" / "serve_test.yaml").read_text())
    cfg["serving"].update(port=8768, api_key_env="INFRAMIND_TEST_KEY", embed=False,
                          records_dir=str(tmp_path / "rec"), max_inflight_queries=64,
                          registry_dir=str(tmp_path / "policies"))
    cfg["models"][0]["max_num_seqs"] = 8
    cfg["models"][0]["max_queue"] = 64  # the learned policy's votes must not overflow "big"
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "INFRAMIND_TEST_KEY": "s3cret"}
    url = "http://127.0.0.1:8768"
    srv = subprocess.Popen([*CLI, "serve", "-c", str(path)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2)
                break
            except OSError:
                assert srv.poll() is None, srv.stdout.read()
                time.sleep(1)
        # no key -> 401, one line
        r = subprocess.run([*CLI, "query", "--item-id", "70", "--url", url], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "INFRAMIND_API_KEY": ""})
        assert r.returncode == 2 and "401" in r.stderr and "Traceback" not in r.stderr
        # the registry and feedback endpoints take the same key
        assert _post(url + "/v1/feedback", {"query_id": "x", "score": 1}) == 401
        assert _post(url + "/v1/policies/rollback", {}) == 401
        assert _post(url + "/v1/feedback", {"query_id": "x", "score": 1}, "s3cret") == 404
        kenv = {**os.environ, "INFRAMIND_API_KEY": "s3cret"}
        r = subprocess.run([*CLI, "query", "--item-id", "70", "--budget", "60", "--url", url],
                           capture_output=True, text=True, timeout=120, env=kenv)
        assert r.returncode == 0, r.stderr
        assert "correct=" in r.stdout and "node 0" in r.stdout
        r = subprocess.run([*CLI, "query", "--task", "gsm8k", "--item-id", "3", "--url", url],
                           capture_output=True, text=True, timeout=120, env=kenv)
        assert r.returncode == 0 and "correct=" in r.stdout, r.stderr
        out = tmp_path / "load.json"
        r = subprocess.run([*CLI, "load", "--rate", "120", "--duration", "6", "--url", url,
                            "--mix", "gsm8k=0.5,mmlu_pro=0.5", "--out", str(out)],
                           capture_output=True, text=True, timeout=300, env=kenv)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        assert doc["summary"]["sent"] == len(doc["records"]) > 3
        assert doc["summary"]["http_200"] == doc["summary"]["sent"]
        assert {x["task"] for x in doc["records"]} == {"gsm8k", "mmlu_pro"}
        assert set(doc["summary"]["goodput_by_task"]) == {"gsm8k", "mmlu_pro"}
        r = subprocess.run([*CLI, "load", "--url", "http://10.1.2.3:8000", "--duration", "1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "loopback" in r.stderr
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=120)
        except subprocess.TimeoutExpired:
            srv.kill()
    assert srv.returncode == 0


def _post(url: str, body: dict, key: str | None = None) -> int:
    """The HTTP status of a JSON POST (with ``key`` as a bearer token)."""
    import urllib.error

    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", **({"authorization": f"Bearer {key}"} if key
                                               else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
