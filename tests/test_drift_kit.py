"""The drift scenario kit's pool changes (no Ray): each drift's pool, the twin seeing a slowed
model slower, scripts validated with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from inframind_ray.config import load_pool
from inframind_ray.errors import ConfigError
from inframind_ray.serving.drift import (
    MixShifted,
    ModelAdded,
    ModelSlowed,
    ReplicaLost,
    apply_to_config,
    load_script,
)

POOL = Path(__file__).parent / "pools" / "serve_test.yaml"


def test_each_drift_changes_the_pool_as_it_says():
    cfg = load_pool(POOL)
    two = cfg.model_copy(update={"models": [cfg.models[0].model_copy(update={"replicas": 2}),
                                            cfg.models[1]]})
    lost = apply_to_config(two, ReplicaLost(model="big"))
    assert lost.models[0].replicas == 1
    gone = apply_to_config(lost, ReplicaLost(model="big"))
    assert [m.name for m in gone.models] == ["small"]
    with pytest.raises(ConfigError, match="last model"):
        apply_to_config(gone, ReplicaLost(model="small"))
    slow = apply_to_config(cfg, ModelSlowed(model="small", factor=2))
    assert slow.models[1].engine.time_scale == cfg.models[1].engine.time_scale * 2
    added = apply_to_config(cfg, ModelAdded(added=cfg.models[1].model_copy(
        update={"name": "small2"})))
    assert [m.name for m in added.models] == ["big", "small", "small2"]
    with pytest.raises(ConfigError, match="already in the pool"):
        apply_to_config(added, ModelAdded(added=cfg.models[1]))
    assert apply_to_config(cfg, MixShifted(tasks=[("gsm8k", 1.0)])) is cfg
    with pytest.raises(ConfigError, match="'nope' is not in the pool"):
        apply_to_config(cfg, ModelSlowed(model="nope", factor=2))


def test_the_twin_sees_a_slowed_model_slower():
    """The twin's engine model of the slowed pool takes twice as long per iteration."""
    from inframind_ray.twin.pool import build_engines

    cfg = load_pool(POOL)
    slow = apply_to_config(cfg, ModelSlowed(model="small", factor=2))
    fast_eng = build_engines(cfg)["small"].replicas[0].engine
    slow_eng = build_engines(slow)["small"].replicas[0].engine
    t_fast, t_slow = (e.profile.iteration_time(256, 8, 4096) for e in (fast_eng, slow_eng))
    assert t_slow == pytest.approx(2 * t_fast)


def test_scripts_are_validated(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("- {at_s: 30, kind: mix_shifted, tasks: [[gsm8k, 0.5], [mmlu_pro, 0.5]]}\n"
                 "- {at_s: 10, kind: model_slowed, model: small, factor: 2}\n")
    s = load_script(p)
    assert [d.kind for d in s] == ["model_slowed", "mix_shifted"]
    p.write_text("- {kind: model_slowed, model: small, factor: -1}\n")
    with pytest.raises(ConfigError, match=r"^drift\.0\.model_slowed\.factor: "):
        load_script(p)
    p.write_text("- {kind: melted}\n")
    with pytest.raises(ConfigError, match="^drift"):
        load_script(p)
