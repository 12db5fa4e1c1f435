"""A deliberately degraded policy checkpoint for the bad-candidate scenario and the gate tests:
the learned policy's preferences inverted. The planner's plan logits and the executor's
(model, strategy) scores are negated, so every greedy decision takes the option the policy
ranks last (masks still apply: it never picks an unavailable option). This is where training on
inverted rewards would push a policy, without spending a training run to get there."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from inframind_ray.policy.registry import SPEC, WEIGHTS

INVERTED = ("planner.pi.weight", "planner.pi.bias", "executor.score.3.weight",
            "executor.score.3.bias")


def invert_preferences(src: str | Path, dst: str | Path) -> Path:
    """Write ``src``'s checkpoint with the action heads negated to ``dst``; returns ``dst``."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    weights = load_file(src / WEIGHTS)
    missing = [k for k in INVERTED if k not in weights]
    if missing:
        raise ValueError(f"checkpoint {src}: no {', '.join(missing)} to invert")
    for k in INVERTED:
        weights[k] = -weights[k]
    save_file(weights, dst / WEIGHTS)
    spec = json.loads((src / SPEC).read_text())
    (dst / SPEC).write_text(json.dumps(spec, indent=2))
    return dst
