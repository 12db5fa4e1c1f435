"""Versions of the learned policy in a directory: register a candidate, promote, roll back,
pin and unpin, list.

Layout under ``root`` (``serving.registry_dir``)::

    registry.json            who is active, the previous actives, the pinned version, an event log
    versions/v0001/          policy.safetensors + spec.json (the checkpoint format of
                             policy/learned.py, never pickles) + meta.json (VersionMeta)

A candidate is checked before it is registered and again before it is promoted: its files'
digest (a file changed after registration is corrupt), the spec's format and feature dims,
finite weights that fit the networks, and the pool (1..8 models). Any failure is a
``RegistryError`` with one line; the registry is left unchanged, so the incumbent keeps
serving. A pinned version is never replaced, by a learner or a human, until it is unpinned.
Writers (the orchestrator, ``inframind policy``) serialise on a lock file; ``registry.json``
is replaced atomically, so readers never see half a state.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from inframind_ray.core.types import PoolInfo
from inframind_ray.errors import InframindError
from inframind_ray.policy.candidate_rank import TwinScore, beats, twin_score
from inframind_ray.policy.learned import CheckpointError, LearnedPolicy
from inframind_ray.policy.registry_models import (
    DataWindow,
    RegistryState,
    VersionInfo,
    VersionMeta,
    VersionState,
)

__all__ = ["DataWindow", "PolicyRegistry", "RegistryError", "RegistryState", "VersionInfo",
           "VersionMeta", "VersionNotFound", "VersionState", "check_checkpoint", "describe",
           "digest"]

STATE_FILE = "registry.json"
WEIGHTS, SPEC, META = "policy.safetensors", "spec.json", "meta.json"
LOG_KEEP = 200  # events kept in registry.json


class RegistryError(InframindError):
    """A registry operation refused (one line); nothing changed."""


class VersionNotFound(RegistryError):
    """No such version in the registry."""


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def digest(folder: Path) -> str:
    """sha256 over a checkpoint's weights and spec (missing files hash as empty)."""
    h = hashlib.sha256()
    for name in (WEIGHTS, SPEC):
        p = folder / name
        h.update(name.encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def check_checkpoint(folder: Path, pool: PoolInfo) -> LearnedPolicy:
    """The learned policy of a checkpoint folder on ``pool``; RegistryError (one line) if the
    files are missing or corrupt, the spec's format or feature dims are not this version's,
    a weight is not finite, or the pool does not fit."""
    try:
        policy = LearnedPolicy.load(folder, pool)
    except CheckpointError as e:
        raise RegistryError(str(e)) from None
    for net in (policy.planner, policy.executor):
        for name, t in net.state_dict().items():
            if not bool(t.isfinite().all()):
                raise RegistryError(f"checkpoint {folder}: weight {name} is not finite")
    return policy


class PolicyRegistry:
    """The versions in ``root`` and the operations on them (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.versions = self.root / "versions"

    # ------------------------------------------------------------------ state files
    @contextmanager
    def _locked(self) -> Iterator[RegistryState]:
        """The state under the writers' lock; written back (atomically) when the block ends
        without an exception."""
        self.versions.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                st = self.state()
                before = st.model_copy(deep=True)
                yield st
                if st == before:  # nothing changed: no write, so the stamp stays
                    return
                st.log = st.log[-LOG_KEEP:]
                tmp = self.root / f".{STATE_FILE}.{os.getpid()}.tmp"
                tmp.write_text(st.model_dump_json(indent=2))
                os.replace(tmp, self.root / STATE_FILE)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def state(self) -> RegistryState:
        """The current state (empty if the registry is new); RegistryError if unreadable."""
        path = self.root / STATE_FILE
        if not path.is_file():
            return RegistryState()
        try:
            return RegistryState.model_validate_json(path.read_text())
        except ValueError as e:
            first = str(e).splitlines()[0]
            raise RegistryError(f"registry {path}: unreadable ({first})") from None

    def stamp(self) -> int:
        """Changes when the state does (``registry.json``'s mtime in ns; 0 if none): cheap to
        poll."""
        try:
            return os.stat(self.root / STATE_FILE).st_mtime_ns
        except FileNotFoundError:
            return 0

    def meta(self, version: str) -> VersionMeta:
        """A version's metadata; VersionNotFound if it is not registered."""
        path = self.versions / version / META
        if not path.is_file():
            raise VersionNotFound(f"no policy version {version!r} in {self.root}")
        return VersionMeta.model_validate_json(path.read_text())

    def path(self, version: str) -> Path:
        """A version's checkpoint folder."""
        self.meta(version)
        return self.versions / version

    def list(self) -> list[VersionInfo]:
        """Every registered version, oldest first."""
        st = self.state()
        out = []
        for v in sorted(st.states):
            out.append(VersionInfo(meta=self.meta(v), state=st.states[v], pinned=v == st.pinned))
        return out

    # ------------------------------------------------------------------ checks
    def check(self, version: str, pool: PoolInfo) -> LearnedPolicy:
        """A registered version's policy on ``pool``, its files verified against the digest
        taken at registration; RegistryError (one line) otherwise."""
        meta = self.meta(version)
        folder = self.versions / version
        if digest(folder) != meta.sha256:
            raise RegistryError(f"version {version}: its files changed since registration "
                                "(digest mismatch)")
        return check_checkpoint(folder, pool)

    # ------------------------------------------------------------------ operations
    def register(self, source: str | Path, pool: PoolInfo, *, parent: str | None = None,
                 data_window: DataWindow | None = None, gates: dict | None = None,
                 note: str = "", actor: str = "cli") -> VersionMeta:
        """Copy a checkpoint folder in as a new candidate after checking it on ``pool``."""
        source = Path(source)
        check_checkpoint(source, pool)
        with self._locked() as st:
            return self._register(st, source, parent=parent, data_window=data_window,
                                  gates=gates, note=note, actor=actor)

    def _register(self, st: RegistryState, source: Path, *, parent: str | None = None,
                  data_window: DataWindow | None = None, gates: dict | None = None,
                  note: str = "", actor: str) -> VersionMeta:
        """``register`` under the lock already held (``st``)."""
        if parent is not None and parent not in st.states:
            raise VersionNotFound(f"no policy version {parent!r} (the parent) in {self.root}")
        n = max((int(v[1:]) for v in st.states), default=0) + 1
        version = f"v{n:04d}"
        tmp = self.versions / f".{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in (WEIGHTS, SPEC):
            shutil.copyfile(source / name, tmp / name)
        meta = VersionMeta(version=version, parent=parent, created=_now_iso(),
                           source=str(source.resolve()), sha256=digest(tmp),
                           data_window=data_window, gates=gates or {}, note=note)
        (tmp / META).write_text(meta.model_dump_json(indent=2))
        os.replace(tmp, self.versions / version)
        st.states[version] = VersionState.CANDIDATE
        st.log.append(self._event("register", version, actor))
        return meta

    def promote(self, version: str, pool: PoolInfo, *, actor: str = "cli") -> RegistryState:
        """Make ``version`` the active one (checked first); the incumbent becomes retired and
        the target of ``rollback``. Refused while another version is pinned."""
        with self._locked() as st:
            if version not in st.states:
                raise VersionNotFound(f"no policy version {version!r} in {self.root}")
            self._promote(st, version, pool, actor)
        return st

    def _promote(self, st: RegistryState, version: str, pool: PoolInfo, actor: str,
                 **extra: object) -> None:
        if version == st.active:
            raise RegistryError(f"{version} is already active")
        self._not_pinned(st, "promote")
        self.check(version, pool)
        if st.active is not None:
            st.states[st.active] = VersionState.RETIRED
            st.previous.append(st.active)
        st.active = version
        st.states[version] = VersionState.ACTIVE
        if st.canary == version:
            st.canary = None
        if st.next_canary == version:
            st.next_canary = None
        st.log.append(self._event("promote", version, actor, **extra))

    # ------------------------------------------------------------------ gates and canary
    def record_gate(self, version: str, name: str, result: dict) -> VersionMeta:
        """Write a gate's result into the version's ``meta.json`` (``gates[name]``), replaced
        atomically; the event log says so. The digest covers weights and spec only."""
        with self._locked() as st:
            meta = self.meta(version)
            meta.gates = {**meta.gates, name: result}
            path = self.versions / version / META
            tmp = path.with_name(f".{META}.{os.getpid()}.tmp")
            tmp.write_text(meta.model_dump_json(indent=2))
            os.replace(tmp, path)
            st.log.append(self._event(f"gate:{name}", version, "gate",
                                      passed=bool(result.get("passed"))))
        return meta

    def _score(self, version: str | None) -> TwinScore | None:
        return None if version is None else twin_score(self.meta(version).gates)

    def start_canary(self, version: str, pool: PoolInfo, *, actor: str = "cli",
                     queue: bool = False, supersede_margin: float | None = None,
                     max_supersedes: int = 0) -> RegistryState:
        """Ask the serving pool to canary ``version`` (a candidate, checked first). Refused
        while a version is pinned, or while another canary runs unless ``queue`` (the
        learner's path). Then, by twin replay-gate goodput (``policy/candidate_rank.py``), it
        supersedes the running canary if better by more than ``supersede_margin`` (fewer than
        ``max_supersedes`` times since a canary last ended, so that one can finish), else
        queues as ``next_canary`` unless the queued one scores higher (``canary_not_queued``;
        without comparable scores the newer queues). Displaced versions stay candidates."""
        with self._locked() as st:
            if version not in st.states:
                raise VersionNotFound(f"no policy version {version!r} in {self.root}")
            if st.states[version] is not VersionState.CANDIDATE:
                raise RegistryError(f"{version} is {st.states[version].value}, not a candidate")
            self._not_pinned(st, "start a canary")
            if st.canary is not None and not queue:
                raise RegistryError(f"a canary of {st.canary} is running")
            self.check(version, pool)
            score = self._score(version)
            if st.canary is None:
                st.canary = version
                st.log.append(self._event("canary_start", version, actor))
            elif version in (st.canary, st.next_canary):
                pass
            elif (supersede_margin is not None and st.canary_supersedes < max_supersedes
                  and beats(score, self._score(st.canary), supersede_margin)):
                st.log.append(self._event("canary_superseded", st.canary, actor, by=version,
                                          running=True))
                st.canary, st.canary_supersedes = version, st.canary_supersedes + 1
                if st.next_canary is not None and not beats(self._score(st.next_canary),
                                                            score, 0.0):
                    st.log.append(self._event("canary_superseded", st.next_canary, actor,
                                              by=version))
                    st.next_canary = None
                st.log.append(self._event("canary_start", version, actor,
                                          supersedes=st.canary_supersedes))
            elif st.next_canary is not None and beats(self._score(st.next_canary), score, 0.0):
                st.log.append(self._event("canary_not_queued", version, actor,
                                          behind=st.next_canary))
            else:
                if st.next_canary is not None:
                    st.log.append(self._event("canary_superseded", st.next_canary, actor,
                                              by=version))
                st.next_canary = version
                st.log.append(self._event("canary_queued", version, actor, behind=st.canary))
        return st

    def end_canary(self, version: str, promote: bool, reason: str, pool: PoolInfo, *,
                   actor: str = "canary") -> RegistryState:
        """The canary's outcome: promote ``version`` (refused if pinned: it then ends rejected;
        a pin stops the running canary, so only a canary ended by hand can meet one) or reject
        it, with ``reason`` in the event log."""
        with self._locked() as st:
            if st.canary != version:
                raise RegistryError(f"no canary of {version} is running")
            if promote:
                try:
                    self._promote(st, version, pool, actor, reason=reason)
                    self._start_queued(st)
                    return st
                except RegistryError as e:
                    reason = f"{reason}; not promoted: {e}"
            st.canary, st.canary_supersedes = None, 0
            st.states[version] = VersionState.REJECTED
            st.log.append(self._event("canary_rollback", version, actor, reason=reason))
            self._start_queued(st)
        return st

    def _start_queued(self, st: RegistryState) -> None:
        """After a canary ends: the queued candidate's canary starts, unless it is no longer a
        candidate (promoted or rejected by hand meanwhile), a version is pinned, or the active
        version scores at least as high in the twin (all three: dropped, it stays what it is)."""
        nxt, st.next_canary = st.next_canary, None
        st.canary_supersedes = 0
        if nxt is None or st.canary is not None:
            return
        reason = ("pinned" if st.pinned is not None
                  else "not a candidate" if st.states.get(nxt) is not VersionState.CANDIDATE
                  else None)
        if reason is None and beats(self._score(nxt), self._score(st.active), 0.0) is False:
            reason = f"{st.active} scores as high in the twin replay gate"
        if reason is not None:
            st.log.append(self._event("canary_dropped", nxt, "registry", reason=reason))
            return
        st.canary = nxt
        st.log.append(self._event("canary_start", nxt, "registry", queued=True))

    def rollback(self, pool: PoolInfo, *, actor: str = "cli") -> RegistryState:
        """Serve the previous active version again (checked first); the current one is
        retired. Refused while pinned, or when there is no previous version."""
        with self._locked() as st:
            self._not_pinned(st, "roll back")
            if not st.previous:
                raise RegistryError("no previous active version to roll back to")
            target = st.previous[-1]
            self.check(target, pool)
            st.previous.pop()
            if st.active is not None:
                st.states[st.active] = VersionState.RETIRED
            st.log.append(self._event("rollback", target, actor, replaced=st.active))
            st.active = target
            st.states[target] = VersionState.ACTIVE
        return st

    def pin(self, version: str | None = None, *, actor: str = "cli") -> RegistryState:
        """Pin the active version (``version``, if given, must be it): nothing replaces it until
        ``unpin``, and it serves all the traffic: a running canary stops (its version stays a
        candidate: it was not judged) and a queued one leaves the queue."""
        with self._locked() as st:
            if st.active is None:
                raise RegistryError("no active version to pin")
            if version is not None and version != st.active:
                if version not in st.states:
                    raise VersionNotFound(f"no policy version {version!r} in {self.root}")
                raise RegistryError(f"{version} is not active ({st.active} is): promote it first")
            st.pinned = st.active
            st.log.append(self._event("pin", st.active, actor))
            why = f"{st.active} pinned"
            if st.canary is not None:
                st.log.append(self._event("canary_stopped", st.canary, actor, reason=why))
            if st.next_canary is not None:
                st.log.append(self._event("canary_dropped", st.next_canary, actor, reason=why))
            st.canary, st.next_canary, st.canary_supersedes = None, None, 0
        return st

    def unpin(self, *, actor: str = "cli") -> RegistryState:
        """Release the pin (a no-op if nothing is pinned)."""
        with self._locked() as st:
            if st.pinned is not None:
                st.log.append(self._event("unpin", st.pinned, actor))
            st.pinned = None
        return st

    def seed(self, source: str | Path, pool: PoolInfo, *, actor: str = "serve") -> str:
        """An empty registry's first version: ``source`` registered and promoted (the shipped
        or configured checkpoint). Returns the active version; a non-empty registry is left as
        it is."""
        st = self.state()
        if st.active is not None:
            return st.active
        source = Path(source)
        check_checkpoint(source, pool)
        with self._locked() as st:  # one lock: the two orchestrators start at once
            if st.active is not None:
                return st.active
            meta = self._register(st, source, note="seed", actor=actor)
            self._promote(st, meta.version, pool, actor)
        return meta.version

    @staticmethod
    def _not_pinned(st: RegistryState, what: str) -> None:
        if st.pinned is not None:
            raise RegistryError(f"{st.pinned} is pinned: unpin it before you {what}")

    @staticmethod
    def _event(op: str, version: str, actor: str, **extra: object) -> dict:
        return {"at": round(time.time(), 3), "op": op, "version": version, "actor": actor,
                **extra}


def describe(reg: PolicyRegistry) -> dict:
    """The registry as JSON for ``/v1/state`` and ``inframind policy list``."""
    st = reg.state()
    return {"dir": str(reg.root), "active": st.active, "pinned": st.pinned,
            "previous": st.previous[-5:], "canary": st.canary, "next_canary": st.next_canary,
            "versions": [json.loads(v.model_dump_json()) for v in reg.list()]}
