"""Run untrusted Python in a separate, contained process per sample.

``run_python(source)`` writes the source to a fresh temporary directory and runs it with
``python -I -S`` (isolated mode, no site-packages: the standard library only) under
:class:`SandboxLimits`, with a minimal environment (``PATH``, ``LANG``, ``HOME``; nothing from
this process), stdin from ``/dev/null`` and stdout/stderr into files whose size RLIMIT_FSIZE
bounds. It returns a :class:`SandboxResult`; it never raises for anything the sample does.

Two isolation levels (``isolation()`` says which one this process uses):

``namespaces`` (root with ``unshare`` from util-linux, the normal case here and in CI): the
sample runs in fresh network, pid and mount namespaces (``_sandbox_init.py`` sets them up as
PID 1): no network (only a loopback that is down), every mount read-only and nosuid, a private
size-limited tmpfs on ``/tmp`` holding the work directory (cwd and HOME), and a fresh random
unprivileged uid/gid with no_new_privs, so RLIMIT_NPROC bounds fork bombs (root ignores it,
and a per-sample uid keeps concurrent samples from sharing the count). When the sample exits,
or the wall clock runs out and the launcher is killed, the kernel kills every process left in
the pid namespace; the tmpfs vanishes with the mount namespace.

``rlimits`` (not root, no ``unshare``, or namespaces refused): the same rlimits, a new session,
the work directory as cwd and HOME, and on timeout the process group and every descendant
still found under the sample are killed. There is no network or filesystem isolation and a
process that leaves the session and reparents can survive: :class:`SandboxWarning` says so once.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path

log = logging.getLogger(__name__)

_LAUNCHER = str(Path(__file__).with_name("_sandbox_init.py"))
_TAIL_BYTES = 4096
_UID_BASE = 1 << 20  # per-sample uids come from [2**20, 2**20 + 2**30): no real user has them
_LIMIT_ORDER = ("wall_s", "cpu_s", "memory_mb", "file_mb", "nproc", "nofile", "tmpfs_mb")
_ISOLATION = {"ns": "namespaces", "plain": "rlimits"}
_UNSHARE = ("--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child")


class SandboxWarning(UserWarning):
    """The sandbox runs with weaker isolation than intended."""


class Status(enum.StrEnum):
    """How a sample ended."""

    PASSED = "passed"    # exit status 0
    FAILED = "failed"    # a nonzero exit status (an exception, a failed assert, MemoryError)
    TIMEOUT = "timeout"  # the wall clock ran out; the whole process tree was killed
    KILLED = "killed"    # a signal ended it (CPU-time limit, memory, a crash)
    ERROR = "error"      # the sandbox itself could not run the sample


@dataclass(frozen=True)
class SandboxLimits:
    """Per-sample limits. ``cpu_s`` is per process (RLIMIT_CPU; SIGKILL one second later),
    ``memory_mb`` is address space per process, ``file_mb`` the largest file (stdout and stderr
    included), ``nproc`` processes and threads of the sample, ``nofile`` open files per process,
    ``tmpfs_mb`` the whole writable work area (namespaces only)."""

    wall_s: float = 20.0
    cpu_s: int = 10  # MBPP item 123's own reference (brute-force amicable numbers to 9,999) takes
    #                  4.5 CPU-s on an idle core here: 5 s killed it in CI (docs/tasks.md)
    memory_mb: int = 512
    file_mb: int = 1
    nproc: int = 32
    nofile: int = 64
    tmpfs_mb: int = 64

    def __post_init__(self) -> None:
        for f in fields(self):
            if not getattr(self, f.name) > 0:
                raise ValueError(f"SandboxLimits.{f.name} must be positive")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class SandboxResult:
    """One sample's run: ``status``; ``returncode`` (the exit status, or minus the signal number,
    None on timeout/error); wall ``duration_s``; the last 4 KB of stdout and stderr; which
    ``isolation`` ran it; ``detail`` in words."""

    status: Status
    returncode: int | None
    duration_s: float
    stdout: str
    stderr: str
    isolation: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


def _python() -> str:
    """The base interpreter (the venv's site-packages are not wanted in the sample)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _minimal_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home}


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (from /proc; empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the sample's process group and every descendant still found under it (in
    namespace mode, killing the pid namespace's init is what kills the rest)."""
    victims = _descendants(proc.pid)
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def _wait(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether ``proc`` ended within ``timeout_s``. A pidfd wakes up the moment it ends
    (``Popen.wait`` polls with sleeps of up to 50 ms, most of a short sample's cost)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout_s * 1000))
    finally:
        os.close(fd)


def _user_task_count() -> int:
    """Processes and threads of this user (what RLIMIT_NPROC counts), from /proc."""
    uid = os.getuid()
    n = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                n += len(os.listdir(f"/proc/{name}/task"))
        except OSError:
            continue
    return n


def _expose_prefixes(python: str) -> list[str]:
    real = os.path.realpath(python)
    prefix = os.path.realpath(sys.base_prefix)
    return [prefix] if real.startswith(prefix + os.sep) else []


def _classify(rc: int | None, lines: list[str], timed_out: bool, limits: SandboxLimits,
              plain: bool) -> tuple[Status, int | None, str]:
    errors = [ln[6:] for ln in lines if ln.startswith("error ")]
    waits = [int(ln[5:]) for ln in lines if ln.startswith("wait ")]
    if timed_out:
        return Status.TIMEOUT, None, f"wall-clock limit {limits.wall_s:g} s reached; killed"
    if errors:
        return Status.ERROR, None, errors[0]
    if plain:
        code = rc
    elif waits:
        code = os.waitstatus_to_exitcode(waits[0])
    else:
        return Status.ERROR, None, f"sandbox launcher ended with {rc} and no status"
    if code == 0:
        return Status.PASSED, 0, "exit 0"
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = {"SIGXCPU": "CPU-time limit", "SIGKILL": "CPU-time or memory limit",
               "SIGXFSZ": "file-size limit"}.get(name, "signal")
        return Status.KILLED, code, f"killed by {name} ({why})"
    return Status.FAILED, code, f"exit {code}"


def _run(source: str, limits: SandboxLimits, mode: str, argv: tuple[str, ...]) -> SandboxResult:
    python = _python()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="inframind-sandbox-") as tmp:
        d = Path(tmp)
        work = d / "work"
        work.mkdir()
        src = (work if mode == "plain" else d) / "main.py"
        src.write_text(source, encoding="utf-8", errors="surrogatepass")
        lim = {f.name: getattr(limits, f.name) for f in fields(limits)}
        lim["wall_s"] = math.ceil(lim["wall_s"])  # unused by the launcher
        if mode == "plain":
            lim["nproc"] += _user_task_count()  # RLIMIT_NPROC counts all of this user's
        r, w = os.pipe()
        uid = _UID_BASE + secrets.randbelow(1 << 30)
        expose = ":".join(_expose_prefixes(python)) if mode == "ns" else ""
        cmd = [python, "-I", "-S", _LAUNCHER, mode, str(w), str(src), str(work), str(uid),
               ",".join(str(int(lim[k])) for k in _LIMIT_ORDER), expose, *argv]
        if mode == "ns":
            cmd = [shutil.which("unshare") or "unshare", *_UNSHARE, "--", *cmd]
        timed_out = False
        try:
            with open(d / "stdout", "wb") as out, open(d / "stderr", "wb") as err:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=str(work),
                    env=_minimal_env("/tmp/work" if mode == "ns" else str(work)),
                    start_new_session=True, pass_fds=(w,))
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in argv
            os.close(r)
            os.close(w)
            return SandboxResult(Status.ERROR, None, time.monotonic() - start, "", "",
                                 _ISOLATION[mode], f"could not start the sandbox: {e}")
        os.close(w)
        if not _wait(proc, limits.wall_s):
            timed_out = True
            _kill_tree(proc)
        rc = proc.wait()
        if mode == "plain":
            with contextlib.suppress(OSError):  # anything the sample left in its session
                os.killpg(proc.pid, signal.SIGKILL)
        duration = time.monotonic() - start
        with os.fdopen(r, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        status, code, detail = _classify(rc, lines, timed_out, limits, mode == "plain")
        return SandboxResult(status, code, duration, _tail(d / "stdout"), _tail(d / "stderr"),
                             _ISOLATION[mode], detail)


_probe_lock = threading.Lock()
_isolation: str | None = None


def isolation() -> str:
    """``"namespaces"`` when this process can contain samples fully (probed once by running a
    sample), else ``"rlimits"``, with a :class:`SandboxWarning` that says why."""
    global _isolation
    with _probe_lock:
        if _isolation is None:
            why = None
            if sys.platform != "linux":
                why = f"platform {sys.platform} has no namespaces"
            elif os.geteuid() != 0:
                why = "not running as root (namespaces and per-sample uids need it)"
            elif shutil.which("unshare") is None:
                why = "no unshare binary (util-linux)"
            else:
                probe = _run("pass\n", DEFAULT_LIMITS, "ns", ())
                if not probe.passed:
                    why = f"namespace probe failed: {probe.detail} {probe.stderr.strip()[-300:]}"
            _isolation = "namespaces" if why is None else "rlimits"
            if why is not None:
                msg = (f"sandbox degraded to rlimits + new session + timeout: {why}; samples "
                       "can reach the network and write where this user can")
                log.warning(msg)
                warnings.warn(msg, SandboxWarning, stacklevel=3)
        return _isolation


def run_python(
    source: str,
    *,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    cpu_s: int | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
    argv: tuple[str, ...] | list[str] = (),
    isolation_mode: str = "auto",
) -> SandboxResult:
    """Run ``source`` as ``main.py`` in a fresh sandboxed process; ``argv`` are its arguments.
    ``timeout_s``/``memory_mb``/``cpu_s`` override the fields of ``limits``. ``isolation_mode``:
    ``"auto"`` (the best this process can do), ``"namespaces"`` (RuntimeError if unavailable)
    or ``"rlimits"``. Thread-safe."""
    over = {k: v for k, v in (("wall_s", timeout_s), ("memory_mb", memory_mb),
                              ("cpu_s", cpu_s)) if v is not None}
    if over:
        limits = replace(limits, **over)
    if isolation_mode not in ("auto", "namespaces", "rlimits"):
        raise ValueError(f"isolation_mode must be auto, namespaces or rlimits, "
                         f"not {isolation_mode!r}")
    available = isolation()
    if isolation_mode == "namespaces" and available != "namespaces":
        raise RuntimeError("namespace isolation is not available in this process")
    mode = "plain" if isolation_mode == "rlimits" or available == "rlimits" else "ns"
    return _run(source, limits, mode, tuple(str(a) for a in argv))
