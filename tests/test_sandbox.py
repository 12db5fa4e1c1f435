"""The code sandbox (inframind_ray.grading.sandbox): real sandboxed processes, hostile samples.

Every hostile sample must end as a failure within its limits, leave no process and no file
behind outside its own temporary directory, and leave this process alive. The hostile tests
need the full (namespace) isolation, which needs root and util-linux ``unshare`` (as here and
in CI); elsewhere they are skipped, and the degraded mode is tested on its own.
"""

from __future__ import annotations

import ast
import os
import socket
import tempfile
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from inframind_ray.grading import sandbox
from inframind_ray.grading.sandbox import SandboxLimits, SandboxWarning, Status, run_python

FULL = sandbox.isolation() == "namespaces"
needs_full = pytest.mark.skipif(not FULL, reason="namespace isolation needs root + unshare")


def _marker() -> str:
    return f"inframind-sbx-test-{uuid.uuid4().hex}"


def _survivors(marker: str, wait_s: float = 2.0) -> list[int]:
    """Processes whose command line holds ``marker`` (polled until none or ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(name))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_normal_sample_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary dir goes
    res = run_python("import os, sys\nopen('out.txt', 'w').write('x')\n"
                     "print('hello', sys.argv[1:], os.getcwd() == os.environ['HOME'])\n",
                     argv=("a", "b"))
    assert res.status is Status.PASSED and res.passed and res.returncode == 0
    assert "hello ['a', 'b'] True" in res.stdout
    assert res.duration_s < 5
    assert list(tmp_path.iterdir()) == []  # the temporary directory is gone


def test_failing_assert_fails():
    res = run_python("assert 1 + 1 == 3, 'arithmetic'\n")
    assert res.status is Status.FAILED and res.returncode == 1
    assert "AssertionError: arithmetic" in res.stderr


def test_limits_validated():
    with pytest.raises(ValueError, match="cpu_s"):
        SandboxLimits(cpu_s=0)
    with pytest.raises(ValueError, match="isolation_mode"):
        run_python("pass", isolation_mode="docker")


def test_busy_loop_hits_the_cpu_limit():
    res = run_python("while True:\n    pass\n", cpu_s=1, timeout_s=3)
    # SIGXCPU after one CPU second; on a crowded host the wall clock may come first
    assert res.status in (Status.KILLED, Status.TIMEOUT), res
    assert res.duration_s < 3 + 1


def test_sleeping_sample_hits_the_wall_clock():
    res = run_python("import time\ntime.sleep(100)\n", timeout_s=1)
    assert res.status is Status.TIMEOUT and res.returncode is None
    assert res.duration_s < 1 + 1


def test_secret_environment_is_not_visible(monkeypatch):
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("INFRAMIND_TEST_SECRET", secret)
    src = (
        "import os, sys\n"
        "print(sorted(os.environ))\n"
        "found = []\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        f"    if b'{secret}' in data:\n"
        "        found.append(pid)\n"
        "sys.exit(1 if 'INFRAMIND_TEST_SECRET' in os.environ or found else 0)\n"
    )
    res = run_python(src)
    assert res.passed, res
    assert secret not in res.stdout + res.stderr
    assert "INFRAMIND_TEST_SECRET" not in res.stdout
    assert set(ast.literal_eval(res.stdout.strip())) <= {"PATH", "LANG", "HOME", "LC_CTYPE"}


@needs_full
def test_fork_bomb_is_contained():
    marker = _marker()
    res = run_python("import os\nwhile True:\n    try:\n        os.fork()\n"
                     "    except OSError:\n        pass\n", argv=(marker,), timeout_s=3)
    assert res.status is not Status.PASSED
    assert res.duration_s < 3 + 1
    assert _survivors(marker) == []


@needs_full
def test_process_spawning_loop_is_contained():
    marker = _marker()
    src = ("import subprocess, sys\nkids = []\nwhile True:\n"
           "    kids.append(subprocess.Popen([sys.executable, '-c', 'import time; "
           "time.sleep(300)', sys.argv[1]]))\n")
    res = run_python(src, argv=(marker,), timeout_s=3)
    assert res.status is not Status.PASSED
    assert res.duration_s < 3 + 1
    assert _survivors(marker) == []


@needs_full
def test_detached_grandchild_does_not_survive():
    """A daemonised grandchild (new session, reparented) dies with the sample."""
    marker = _marker()
    src = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        os.execv(sys.executable, [sys.executable, '-c', 'import time; "
           "time.sleep(300)', sys.argv[1]])\n    os._exit(0)\ntime.sleep(0.3)\n")
    res = run_python(src, argv=(marker,))
    assert res.passed, res
    assert _survivors(marker) == []


@needs_full
def test_fork_bomb_does_not_starve_a_concurrent_sample():
    """Each sample has its own uid, so one sample's process limit is not another's."""
    marker = _marker()
    bomb = ("import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        time.sleep(0.01)\n")
    ok = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    with ThreadPoolExecutor(2) as ex:
        bombed = ex.submit(run_python, bomb, argv=(marker,), timeout_s=4)
        time.sleep(1.0)
        normal = ex.submit(run_python, ok).result()
        assert bombed.result().status is not Status.PASSED
    assert normal.passed, normal
    assert _survivors(marker) == []


@needs_full
def test_memory_bomb_fails_fast():
    res = run_python("x = bytearray(10 * 1024 ** 3)\n")
    assert res.status is Status.FAILED and "MemoryError" in res.stderr
    assert res.duration_s < 2
    res = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 ** 2))\n")
    assert res.status is not Status.PASSED
    assert res.duration_s < 3


@needs_full
def test_writes_outside_the_work_directory_do_not_land(tmp_path):
    targets = [tmp_path / "escaped.txt", Path(tempfile.gettempdir()) / f"{_marker()}.txt",
               Path.cwd() / f"{_marker()}.txt"]
    src = "import sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'w').write('x')\n" \
          "    except OSError as e:\n        print(p, e)\nopen('inside.txt', 'w').write('ok')\n"
    res = run_python(src, argv=[str(t) for t in targets])
    assert res.passed, res  # writing inside its own directory works
    for t in targets:
        assert not t.exists(), t


@needs_full
def test_huge_file_and_output_are_limited():
    res = run_python("open('big.bin', 'wb').write(b'x' * (100 * 1024 ** 2))\n")
    assert res.status is Status.FAILED and "File too large" in res.stderr
    res = run_python("while True:\n    print('x' * 100000)\n", timeout_s=5)
    assert res.status is not Status.PASSED and res.duration_s < 3
    assert len(res.stdout) <= 4096
    res = run_python("i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 1000000)\n"
                     "    i += 1\n", timeout_s=5)
    assert res.status is Status.FAILED and "No space left" in res.stderr


@needs_full
def test_network_is_unreachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        src = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
               "s.sendall(b'leak')\n")
        res = run_python(src)
        assert res.status is Status.FAILED, res
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected


@needs_full
def test_overhead_is_tens_of_milliseconds():
    cost = []
    for _ in range(5):
        t = time.perf_counter()
        assert run_python("pass\n").passed
        cost.append(time.perf_counter() - t)
    assert min(cost) < 0.5


def test_concurrent_samples():
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda i: run_python(f"print({i} * {i})\n"), range(8)))
    assert [r.stdout.strip() for r in results] == [str(i * i) for i in range(8)]


def test_degraded_mode_still_bounds_time_and_environment(monkeypatch):
    monkeypatch.setenv("INFRAMIND_TEST_SECRET", "degraded-secret")
    res = run_python("import os\nprint('INFRAMIND_TEST_SECRET' in os.environ, os.getcwd())\n",
                     isolation_mode="rlimits")
    assert res.passed and res.isolation == "rlimits"
    assert res.stdout.startswith("False")
    assert run_python("assert False\n", isolation_mode="rlimits").status is Status.FAILED
    res = run_python("while True:\n    pass\n", isolation_mode="rlimits", cpu_s=1, timeout_s=3)
    assert res.status in (Status.KILLED, Status.TIMEOUT) and res.duration_s < 3 + 1
    res = run_python("import time\ntime.sleep(60)\n", isolation_mode="rlimits", timeout_s=1)
    assert res.status is Status.TIMEOUT and res.duration_s < 2


def test_degrading_warns(monkeypatch):
    monkeypatch.setattr(sandbox, "_isolation", None)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sandbox.isolation() == "rlimits"
    assert any(issubclass(w.category, SandboxWarning) and "not running as root" in str(w.message)
               for w in caught)
    with pytest.raises(RuntimeError, match="not available"):
        run_python("pass", isolation_mode="namespaces")
