"""The policy registry (no Ray): register, promote, rollback, pin; corrupt or mismatched
candidates refused with one line while the incumbent stays active; the CLI over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inframind_ray.config import load_pool
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT, LearnedPolicy
from inframind_ray.policy.registry import (
    PolicyRegistry,
    RegistryError,
    VersionNotFound,
    VersionState,
)
from inframind_ray.pools.cards import build_pool_info

POOL = Path(__file__).parent / "pools" / "serve_test.yaml"


@pytest.fixture(scope="module")
def pool():
    return build_pool_info(load_pool(POOL))


def _ckpt(pool, path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    return LearnedPolicy(pool, seed=seed, hidden=16).save(path)


def _seed_in_process(root: str, start: float) -> str:
    import time

    pool = build_pool_info(load_pool(POOL))
    time.sleep(max(0.0, start - time.time()))  # both processes seed at the same moment
    return PolicyRegistry(root).seed(DEFAULT_CHECKPOINT, pool)


def test_concurrent_seeds_register_one_version(tmp_path):
    """The orchestrator and its standby seed an empty registry at once (two processes): one
    version is registered and both serve it (a check-then-register race gave v0001 and v0002,
    the second one active)."""
    import multiprocessing as mp
    import time

    root = str(tmp_path / "reg")
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as workers:
        start = time.time() + 8.0  # after the spawned processes have imported the project
        got = workers.starmap(_seed_in_process, [(root, start)] * 4)
    reg = PolicyRegistry(root)
    assert got == ["v0001"] * 4, got
    assert [v.meta.version for v in reg.list()] == ["v0001"]
    assert reg.state().active == "v0001"


def test_promote_rollback_pin(pool, tmp_path):
    """Seed, register, promote, roll back: states, the rollback target and the pinned version
    follow; a pinned version refuses promote and rollback until unpinned."""
    reg = PolicyRegistry(tmp_path / "reg")
    assert reg.seed(DEFAULT_CHECKPOINT, pool) == "v0001"
    assert reg.seed(DEFAULT_CHECKPOINT, pool) == "v0001"  # a seeded registry stays as it is
    v2 = reg.register(_ckpt(pool, tmp_path / "a", 1), pool, parent="v0001", note="a").version
    assert v2 == "v0002" and reg.state().states[v2] is VersionState.CANDIDATE
    st = reg.promote(v2, pool)
    assert (st.active, st.previous, st.states["v0001"]) == ("v0002", ["v0001"],
                                                              VersionState.RETIRED)
    # the served weights are the candidate's, not the seed's
    served = reg.check(v2, pool)
    want = load_file(tmp_path / "a" / "policy.safetensors")
    assert torch.equal(served.planner.pi.weight, want["planner.pi.weight"])
    st = reg.rollback(pool)
    assert (st.active, st.previous) == ("v0001", [])
    assert st.states[v2] is VersionState.RETIRED
    with pytest.raises(RegistryError, match="no previous active version"):
        reg.rollback(pool)

    reg.promote(v2, pool)
    with pytest.raises(RegistryError, match="not active"):
        reg.pin("v0001")
    reg.pin()
    v3 = reg.register(_ckpt(pool, tmp_path / "b", 2), pool, parent=v2).version
    for op in (lambda: reg.promote(v3, pool), lambda: reg.rollback(pool)):
        with pytest.raises(RegistryError, match="v0002 is pinned: unpin it"):
            op()
    assert reg.state().active == v2
    reg.unpin()
    assert reg.promote(v3, pool).active == v3
    rows = {v.meta.version: (v.state, v.pinned, v.meta.parent) for v in reg.list()}
    assert rows == {"v0001": (VersionState.RETIRED, False, None),
                    "v0002": (VersionState.RETIRED, False, "v0001"),
                    "v0003": (VersionState.ACTIVE, False, "v0002")}
    assert [e["op"] for e in reg.state().log] == [
        "register", "promote", "register", "promote", "rollback", "promote", "pin", "register",
        "unpin", "promote"]
    with pytest.raises(VersionNotFound):
        reg.promote("v0099", pool)


def _break(kind: str, src: Path, pool) -> Path:
    spec = json.loads((src / "spec.json").read_text())
    if kind == "bad file":
        (src / "policy.safetensors").write_bytes(b"not a tensor file")
    elif kind == "spec format":
        (src / "spec.json").write_text(json.dumps(spec | {"format": "inframind-policy-v9"}))
    elif kind == "feature dims":
        (src / "spec.json").write_text(json.dumps(spec | {"dims": spec["dims"] | {"sem": 1}}))
    elif kind == "weights shape":
        t = load_file(src / "policy.safetensors")
        t["planner.pi.weight"] = torch.zeros(3, 3)
        save_file(t, src / "policy.safetensors")
    elif kind == "nan weight":
        t = load_file(src / "policy.safetensors")
        t["executor.v.2.bias"] = torch.full_like(t["executor.v.2.bias"], float("nan"))
        save_file(t, src / "policy.safetensors")
    return src


@pytest.mark.parametrize("kind,why", [
    ("bad file", "corrupt weights"), ("spec format", "unknown format"),
    ("feature dims", "feature dims"), ("weights shape", "weights do not fit"),
    ("nan weight", "is not finite")])
def test_corrupt_or_mismatched_candidate_refused(pool, tmp_path, kind, why):
    """A broken candidate is refused with one line naming the fault; the registry and its
    active version are unchanged."""
    reg = PolicyRegistry(tmp_path / "reg")
    reg.seed(DEFAULT_CHECKPOINT, pool)
    before = reg.state()
    bad = _break(kind, _ckpt(pool, tmp_path / "c", 3), pool)
    with pytest.raises(RegistryError, match=why) as e:
        reg.register(bad, pool)
    assert "\n" not in str(e.value)
    assert reg.state() == before and reg.state().active == "v0001"


def test_pool_too_large_and_files_changed_after_registration(pool, tmp_path):
    """A pool the rows cannot hold is refused; a version whose files change after
    registration is refused at promotion (digest), and the incumbent stays."""
    reg = PolicyRegistry(tmp_path / "reg")
    reg.seed(DEFAULT_CHECKPOINT, pool)
    big = pool.__class__(models=tuple(pool.models) * 5)
    with pytest.raises(RegistryError, match="pools of 1 to 8"):
        reg.register(_ckpt(pool, tmp_path / "a", 1), big)
    v2 = reg.register(_ckpt(pool, tmp_path / "b", 2), pool).version
    (reg.path(v2) / "policy.safetensors").write_bytes(b"flipped bits")
    with pytest.raises(RegistryError, match="digest mismatch"):
        reg.promote(v2, pool)
    assert reg.state().active == "v0001"


def _cli(capsys, *args: str) -> tuple[int, str]:
    """``inframind ARGS`` in this process (the real entry point and its error handling)."""
    import sys

    from inframind_ray.cli import main

    argv = sys.argv
    sys.argv = ["inframind", *args]
    try:
        main()
        rc = 0
    except SystemExit as e:
        rc = int(e.code or 0)
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_cli_register_promote_pin_rollback(pool, tmp_path, capsys):
    """``inframind policy``: register, promote, pin, a refused promote (one line, exit 2), a
    refused corrupt candidate, unpin, rollback, list as JSON."""
    reg = tmp_path / "reg"
    opts = ("-c", str(POOL), "--registry", str(reg))
    assert _cli(capsys, "policy", "register", str(DEFAULT_CHECKPOINT), *opts)[0] == 0
    assert _cli(capsys, "policy", "promote", "v0001", *opts)[0] == 0
    good = _ckpt(pool, tmp_path / "good", 5)
    assert _cli(capsys, "policy", "register", str(good), "--parent", "v0001", *opts)[0] == 0
    rc, out = _cli(capsys, "policy", "promote", "v0002", *opts)
    assert rc == 0 and "active v0002; rollback target v0001" in out
    assert _cli(capsys, "policy", "pin", *opts)[0] == 0
    rc, out = _cli(capsys, "policy", "rollback", *opts)
    assert rc == 2 and out.strip() == "error: v0002 is pinned: unpin it before you roll back"
    bad = _break("bad file", _ckpt(pool, tmp_path / "bad", 6), pool)
    rc, out = _cli(capsys, "policy", "register", str(bad), *opts)
    assert rc == 2 and out.count("\n") == 1 and "corrupt weights" in out
    assert _cli(capsys, "policy", "unpin", *opts)[0] == 0
    assert _cli(capsys, "policy", "rollback", *opts)[0] == 0
    rc, out = _cli(capsys, "policy", "list", "--json", *opts)
    listed = json.loads(out)
    assert (listed["active"], listed["pinned"]) == ("v0001", None)
    assert [v["state"] for v in listed["versions"]] == ["active", "retired"]
    rc, out = _cli(capsys, "policy", "promote", "v0042", *opts)
    assert rc == 2 and "no policy version 'v0042'" in out


def test_registry_dir_validated_at_load(tmp_path):
    """A deployment file whose registry_dir is a file is refused at load, naming the field."""
    import yaml

    from inframind_ray.errors import ConfigError

    cfg = yaml.safe_load(POOL.read_text())
    (tmp_path / "a_file").write_text("x")
    cfg["serving"]["registry_dir"] = str(tmp_path / "a_file")
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="registry_dir: .* exists and is not a folder"):
        load_pool(tmp_path / "pool.yaml")


def test_orchestrator_says_when_the_registry_overrides_policy_checkpoint(pool, tmp_path):
    """A registry seeded before serves its active version; a different policy_checkpoint in the
    deployment file is named in /v1/state's policy_note instead of being silently ignored."""
    from inframind_ray.serving.orchestrator import Orchestrator

    cfg = load_pool(POOL)
    reg = PolicyRegistry(tmp_path / "reg")
    reg.seed(DEFAULT_CHECKPOINT, pool)
    other = _ckpt(pool, tmp_path / "other", 4)
    serving = cfg.serving.model_copy(update={
        "records_dir": str(tmp_path / "rec"), "registry_dir": str(reg.root),
        "policy_checkpoint": str(other), "embed": False})
    st = Orchestrator(cfg.model_copy(update={"serving": serving}).model_dump()).state()
    assert st["policy_version"] == "v0001" and st["policy_status"] == "ok"
    assert f"policy_checkpoint {other} is not what serves" in st["policy_note"]
