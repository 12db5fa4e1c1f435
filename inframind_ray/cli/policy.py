"""``inframind policy``: the learned policy's version registry (policy/registry.py) of a
deployment: list, register a candidate, promote, roll back, pin, unpin. It acts on the
registry folder (``serving.registry_dir`` of the deployment file, or ``--registry``); a pool
serving from that folder switches to the new active version within a second. Refusals are one
line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.cli.common import console

policy_app = typer.Typer(no_args_is_help=True, help="The learned policy's version registry: "
                         "list, register, gate, canary, promote, rollback, pin, unpin.")

Config = Annotated[Path, typer.Option("-c", "--config", help="deployment YAML (its pool checks "
                                      "candidates; its serving.registry_dir is the registry)")]
Registry = Annotated[Path | None, typer.Option("--registry",
                                               help="registry folder (default: the config's)")]
DEFAULT_CONFIG = Path("deployments/twin_pool.yaml")


def _open(config: Path, registry: Path | None):  # noqa: ANN202
    """(registry, pool info) of a deployment file."""
    from inframind_ray.config import load_pool
    from inframind_ray.policy.registry import PolicyRegistry
    from inframind_ray.pools.cards import build_pool_info

    cfg = load_pool(config)
    root = registry if registry is not None else Path(cfg.serving.registry_dir).expanduser()
    return PolicyRegistry(root), build_pool_info(cfg)


def _show(reg) -> None:  # noqa: ANN001
    st = reg.state()
    console.print(f"active {st.active or '-'}" + (" (pinned)" if st.pinned else "")
                  + (f"; rollback target {st.previous[-1]}" if st.previous else "")
                  + (f"; canary {st.canary}" if st.canary else "")
                  + (f" (next: {st.next_canary})" if st.next_canary else ""))


@policy_app.command("list")
def list_versions(
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every registered version: state, pinned, parent, created, data window, gates."""
    from rich.table import Table

    from inframind_ray.policy.registry import describe

    reg, _ = _open(config, registry)
    if as_json:
        print(json.dumps(describe(reg), indent=2))
        return
    table = Table("version", "state", "pinned", "parent", "created", "rollouts", "gates", "note")
    for v in reg.list():
        m = v.meta
        table.add_row(m.version, v.state.value, "yes" if v.pinned else "", m.parent or "",
                      m.created, str(m.data_window.rollouts) if m.data_window else "",
                      json.dumps(m.gates) if m.gates else "", m.note)
    console.print(table)
    _show(reg)


@policy_app.command()
def register(
    checkpoint: Annotated[Path, typer.Argument(help="checkpoint folder (policy.safetensors + "
                                               "spec.json)")],
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
    parent: Annotated[str | None, typer.Option(help="the version it was trained from")] = None,
    note: Annotated[str, typer.Option(help="free text kept with the version")] = "",
) -> None:
    """Register a checkpoint as a candidate after checking it on the deployment's pool."""
    reg, pool = _open(config, registry)
    meta = reg.register(checkpoint, pool, parent=parent, note=note)
    console.print(f"registered {meta.version} (candidate) from {meta.source}")


@policy_app.command()
def promote(
    version: Annotated[str, typer.Argument(help="e.g. v0002")],
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
) -> None:
    """Make a version the active one (checked first; refused while another is pinned)."""
    reg, pool = _open(config, registry)
    reg.promote(version, pool)
    _show(reg)


@policy_app.command()
def rollback(config: Config = DEFAULT_CONFIG, registry: Registry = None) -> None:
    """Serve the previous active version again."""
    reg, pool = _open(config, registry)
    reg.rollback(pool)
    _show(reg)


@policy_app.command()
def pin(
    version: Annotated[str | None, typer.Argument(help="the active version (default)")] = None,
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
) -> None:
    """Pin the active version: nothing replaces it until `unpin`."""
    reg, _ = _open(config, registry)
    reg.pin(version)
    _show(reg)


@policy_app.command()
def unpin(config: Config = DEFAULT_CONFIG, registry: Registry = None) -> None:
    """Release the pin."""
    reg, _ = _open(config, registry)
    reg.unpin()
    _show(reg)


@policy_app.command()
def gate(
    version: Annotated[str, typer.Argument(help="the candidate, e.g. v0002")],
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
    queries: Annotated[int, typer.Option(help="validation queries per arm")] = 300,
    rate: Annotated[float, typer.Option(help="arrival rate (req/min) of the replay")] = 60.0,
    tolerance: Annotated[float, typer.Option(help="allowed drop (goodput, SLO attainment)")]
    = 0.02,
    alpha: Annotated[float, typer.Option(help="one-sided error per metric")] = 0.05,
    seed: int = 0,
    canary: Annotated[bool, typer.Option("--canary", help="start the canary if it passes")]
    = False,
) -> None:
    """The twin replay gate: the candidate against the active version on validation items in
    the twin of the deployment's pool; the result goes into the candidate's gate results.
    Exit 1 if it fails."""
    from pydantic import ValidationError

    from inframind_ray.bench.replay_gate import ReplayGateConfig, replay_gate
    from inframind_ray.config import load_pool
    from inframind_ray.errors import ConfigError

    reg, pool = _open(config, registry)
    try:
        cfg = ReplayGateConfig(n_queries=queries, rate_per_min=rate, tolerance=tolerance,
                               alpha=alpha, seed=seed)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"--{err['loc'][0]}", err["msg"]) from None
    out = replay_gate(load_pool(config), reg, version, cfg=cfg)
    for t in out["tests"]:
        console.print(f"{t['metric']}: candidate {t['candidate']:.3f} incumbent "
                      f"{t['incumbent']:.3f} diff {t['diff']:+.3f} lower bound "
                      f"{t['lower']:+.3f} vs -{t['tolerance']:g}: "
                      + ("pass" if t["passed"] else "FAIL"))
    console.print(f"replay gate of {version}: " + ("passed" if out["passed"] else "failed"))
    if not out["passed"]:
        raise typer.Exit(1)
    if canary:
        reg.start_canary(version, pool)
        console.print(f"canary of {version} requested")


@policy_app.command("canary")
def start_canary(
    version: Annotated[str, typer.Argument(help="the candidate, e.g. v0002")],
    config: Config = DEFAULT_CONFIG, registry: Registry = None,
) -> None:
    """Ask the pool serving from this registry to canary a candidate (serving.canary)."""
    reg, pool = _open(config, registry)
    reg.start_canary(version, pool)
    console.print(f"canary of {version} requested")
