"""The orchestrator's served policy version: which registry version the learned policy is, the
registry's changes picked up (promote, rollback, a canary asked for), and the registry's
operations from the API. The orchestrator holds one ``ServedVersion`` and asks it for the policy
to serve; the queries themselves stay in ``serving/orchestrator.py``."""

from __future__ import annotations

import logging
from pathlib import Path

from inframind_ray.config import PoolConfig
from inframind_ray.core.types import PoolInfo
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, CheckpointError, LearnedPolicy
from inframind_ray.policy.registry import PolicyRegistry, RegistryError, VersionNotFound, describe
from inframind_ray.serving.canary import CanaryRunner
from inframind_ray.serving.metrics import OrchestratorMetrics

log = logging.getLogger(__name__)


class ServedVersion:
    """The registry (``serving.registry_dir``), the version served from it, and its canary."""

    def __init__(self, cfg: PoolConfig, metrics: OrchestratorMetrics) -> None:
        s = cfg.serving
        self.registry = PolicyRegistry(Path(s.registry_dir).expanduser())
        self.checkpoint = s.policy_checkpoint  # seeds an empty registry
        self.canary = CanaryRunner(self.registry, s.canary, metrics)  # serving/canary.py
        self.version: str | None = None  # the registry version the learned policy is
        self.note: str | None = None  # a configured checkpoint the registry overrides
        self._stamp = -1  # registry.json's stamp when last read (changed)
        self._pinned: dict[str, LearnedPolicy] = {}  # versions queries asked for

    def load(self, pool: PoolInfo) -> LearnedPolicy:
        """The registry's active version on ``pool`` (an empty registry is seeded with
        ``policy_checkpoint`` or the shipped policy); CheckpointError with the reason if it
        cannot serve."""
        self._stamp = self.registry.stamp()
        try:
            active = self.registry.seed(self.checkpoint or DEFAULT_CHECKPOINT, pool)
            policy = self.registry.check(active, pool)
        except RegistryError as e:
            self.version = None
            raise CheckpointError(str(e)) from None
        self.version = active
        self._stamp = self.registry.stamp()
        ckpt = self.checkpoint
        if ckpt and str(Path(ckpt).resolve()) != self.registry.meta(active).source:
            self.note = (f"serving.policy_checkpoint {ckpt} is not what serves: the "
                         f"registry's active version {active} is (the setting only "
                         "seeds an empty registry; register and promote it)")
            log.warning("%s", self.note)
        return policy

    def changed(self, pool: PoolInfo) -> LearnedPolicy | None:
        """The policy of the registry's new active version if it changed since the last look
        (promote or rollback, here or by ``inframind policy`` on the same folder), after
        starting or stopping the canary the registry asks for; None if nothing is to change.
        RegistryError if the new version cannot serve (the incumbent stays)."""
        stamp = self.registry.stamp()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        st = self.registry.state()
        active, policy = st.active, None
        try:
            if active is not None and active != self.version:
                policy = self.registry.check(active, pool)
                log.info("policy %s -> %s", self.version, active)
                self.version = active
        finally:  # a queued canary that starts with a promotion runs against the new active
            self.canary.sync(st.canary, self.version, pool)
        return policy

    def version_policy(self, version: str, pool: PoolInfo) -> LearnedPolicy | dict:
        """The policy of one registry version on ``pool``, for a query that asks for it
        (``policy_version``: two versions side by side on the same traffic); loaded once and
        kept until the pool changes (``forget``). Or the error answer: 404 no such version,
        409 it cannot serve this pool (the one-line reason)."""
        if version not in self._pinned:
            try:
                self._pinned[version] = self.registry.check(version, pool)
            except VersionNotFound as e:
                return {"http_status": 404, "error": str(e)}
            except RegistryError as e:
                return {"http_status": 409, "error": f"{version} cannot serve this pool: {e}"}
        return self._pinned[version]

    def asked_for(self, policy: object) -> bool:
        """Whether ``policy`` is a version loaded for queries that asked for it."""
        return any(policy is p for p in self._pinned.values())

    def forget(self) -> None:
        """Drop the versions loaded for queries (the pool changed)."""
        self._pinned.clear()

    def resume_canary(self, pool: PoolInfo) -> None:
        """(Re)start the registry's canary, if any, with empty arms (after a start or a pool
        change: outcomes on another pool or before a restart are not kept)."""
        try:
            self.canary.sync(self.registry.state().canary, self.version, pool)
        except RegistryError as e:
            log.warning("canary not started: %s", e)

    def pinned(self) -> bool:
        """True if the version served is the registry's pinned one."""
        try:
            return self.version is not None and self.registry.state().pinned == self.version
        except RegistryError:
            return False

    def listing(self) -> dict:
        """``GET /v1/policies``: the registry's versions and which one serves here."""
        try:
            return describe(self.registry) | {"serving": self.version}
        except RegistryError as e:
            return {"http_status": 500, "error": str(e)}

    def operate(self, op: str, version: str | None, pool: PoolInfo) -> dict | None:
        """One registry operation from the API (``promote``, ``canary``, ``rollback``, ``pin``,
        ``unpin``); the error answer (404: no such version or operation; 409: refused, with the
        one-line reason), or None when done."""
        reg = self.registry
        try:
            if op == "promote":
                reg.promote(version or "", pool, actor="api")
            elif op == "canary":
                reg.start_canary(version or "", pool, actor="api")
            elif op == "rollback":
                reg.rollback(pool, actor="api")
            elif op == "pin":
                reg.pin(version, actor="api")
            elif op == "unpin":
                reg.unpin(actor="api")
            else:
                return {"http_status": 404, "error": f"unknown operation {op!r}"}
        except VersionNotFound as e:
            return {"http_status": 404, "error": str(e)}
        except RegistryError as e:
            return {"http_status": 409, "error": str(e)}
        return None
