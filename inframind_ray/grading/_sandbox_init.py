"""The sandbox's launcher: run as a script, never imported; standard library only, and little of
it (every import is start-up time of every sample)::

    python -I -S _sandbox_init.py MODE STATUS_FD SOURCE WORKDIR UID LIMITS EXPOSE [ARG ...]

LIMITS is ``wall_s,cpu_s,memory_mb,file_mb,nproc,nofile,tmpfs_mb``; EXPOSE is a ``:``-joined list
of directories (may be empty). The sample gets this process's interpreter and environment.

``ns`` mode: started by ``unshare --net --pid --mount --fork --mount-proc --kill-child`` as root,
so it is PID 1 of a fresh pid, mount and network namespace (no interface up: no network). It
reads the sample, then

1. makes the interpreter's install reachable for an unprivileged uid (a tmpfs over the first
   ancestor directory others may not enter, e.g. ``/root``, with the install bind-mounted back at
   its own path),
2. makes every mount read-only and nosuid (``mount_setattr(AT_RECURSIVE)``),
3. mounts a small private tmpfs on ``/tmp`` with the work directory ``/tmp/work`` in it,
4. forks the sample: rlimits, no supplementary groups, a fresh unprivileged uid/gid (so
   RLIMIT_NPROC counts this sample's processes only), no_new_privs, then ``execve`` of
   ``python -I -S main.py`` with the minimal environment,
5. reaps children until the sample exits, reports its wait status on the status fd and exits:
   the kernel then kills every process left in the pid namespace, and the tmpfs goes with the
   mount namespace.

``plain`` mode (no root or no namespaces): rlimits, chdir to the work directory, ``execve``.

The status fd gets lines ``wait <status>`` or ``error <message>``.
"""

from __future__ import annotations

import os
import resource
import stat
import sys

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added in Linux 5.12)
PR_SET_NO_NEW_PRIVS = 38
LIMIT_NAMES = ("wall_s", "cpu_s", "memory_mb", "file_mb", "nproc", "nofile", "tmpfs_mb")


def _libc():
    import ctypes  # namespace mode only

    return ctypes, ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    ctypes, _ = _libc()
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    ctypes, libc = _libc()
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    _check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _readonly_everywhere() -> None:
    """Every mount of this namespace read-only and nosuid."""
    ctypes, libc = _libc()

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    ret = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), b"/",
                        ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr),
                        ctypes.c_size_t(ctypes.sizeof(attr)))
    if ret == 0:
        return
    # Kernels before 5.12: remount each mount point read-only, deepest first.
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted(set(points), key=len, reverse=True):
        point = point.encode().decode("unicode_escape")
        _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def _expose(prefix: str) -> None:
    """Make ``prefix`` reachable by any uid at its own path (read-only once everything is)."""
    parts = os.path.abspath(prefix).split("/")[1:]
    hidden = None
    for i in range(1, len(parts) + 1):
        path = "/" + "/".join(parts[:i])
        if not os.stat(path).st_mode & stat.S_IXOTH:
            hidden = path
            break
    if hidden is None or hidden == prefix:
        return
    fd = os.open(prefix, os.O_PATH | os.O_DIRECTORY)
    try:
        _mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=755")
        os.makedirs(prefix, 0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", prefix, None, MS_BIND | MS_REC)
    finally:
        os.close(fd)


def _set_limits(lim: dict) -> None:
    mb = 1024 * 1024
    for res, soft, hard in (
        (resource.RLIMIT_CPU, lim["cpu_s"], lim["cpu_s"] + 1),
        (resource.RLIMIT_AS, lim["memory_mb"] * mb, lim["memory_mb"] * mb),
        (resource.RLIMIT_FSIZE, lim["file_mb"] * mb, lim["file_mb"] * mb),
        (resource.RLIMIT_NPROC, lim["nproc"], lim["nproc"]),
        (resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(res, (soft, hard))


def _report(fd: int, line: str) -> None:
    try:  # noqa: SIM105 - contextlib costs start-up time
        os.write(fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _exec_sample(cfg: dict, workdir: str) -> None:
    """In the sample's process: never returns."""
    os.chdir(workdir)
    _set_limits(cfg["limits"])
    if cfg["mode"] == "ns":
        uid = cfg["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _libc()[1].prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    python = sys.executable
    os.execve(python, [python, "-I", "-S", "main.py", *cfg["argv"]], dict(os.environ))


def _config(argv: list[str]) -> dict:
    mode, fd, source, workdir, uid, limits, expose, *args = argv
    values = map(int, limits.split(","))
    return {"mode": mode, "status_fd": int(fd), "source": source, "workdir": workdir,
            "uid": int(uid), "limits": dict(zip(LIMIT_NAMES, values, strict=True)),
            "expose": [p for p in expose.split(":") if p], "argv": args}


def main() -> None:
    cfg = _config(sys.argv[1:])
    fd = cfg["status_fd"]
    os.set_inheritable(fd, False)
    try:
        if cfg["mode"] == "plain":
            _exec_sample(cfg, cfg["workdir"])
        with open(cfg["source"], "rb") as f:
            source = f.read()
        for prefix in cfg["expose"]:
            _expose(prefix)
        _readonly_everywhere()
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={cfg['limits']['tmpfs_mb']}m,nr_inodes=1024,mode=1777")
        workdir = "/tmp/work"
        os.mkdir(workdir, 0o700)
        with open(os.path.join(workdir, "main.py"), "wb") as f:
            f.write(source)
        for path in (workdir, os.path.join(workdir, "main.py")):
            os.chown(path, cfg["uid"], cfg["uid"])
    except BaseException as e:  # noqa: BLE001 - everything is reported, then exit
        _report(fd, f"error sandbox setup failed: {type(e).__name__}: {e}")
        os._exit(125)
    pid = os.fork()
    if pid == 0:
        try:
            _exec_sample(cfg, workdir)
        except BaseException as e:  # noqa: BLE001
            _report(fd, f"error sandbox exec failed: {type(e).__name__}: {e}")
        os._exit(126)
    while True:  # PID 1: reap everything until the sample itself is done
        try:
            wpid, status = os.wait()
        except ChildProcessError:
            break
        if wpid == pid:
            _report(fd, f"wait {status}")
            break
    os._exit(0)  # the kernel kills whatever is left in the namespace


if __name__ == "__main__":
    main()
