"""Derive the compact KubeRay RayService schema the tests check manifests against.

Reads KubeRay's CRD (``ray-operator/config/crd/bases/ray.io_rayservices.yaml`` of a checkout of
https://github.com/ray-project/kuberay, Apache-2.0), keeps the ``v1`` version's
``openAPIV3Schema`` and drops every ``description`` (prose, 80 % of the file), and writes
``tests/data/kuberay/rayservice_v1_schema.json`` with the commit it came from.

    python scripts/derive_kuberay_schema.py PATH/TO/kuberay [COMMIT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).parents[1] / "tests" / "data" / "kuberay" / "rayservice_v1_schema.json"


def strip(node: object) -> object:
    """The schema without descriptions."""
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main(repo: str, commit: str = "") -> None:
    """Write the compact schema."""
    crd = yaml.safe_load((Path(repo) / "ray-operator/config/crd/bases/ray.io_rayservices.yaml")
                         .read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"source": "github.com/ray-project/kuberay "
                               "ray-operator/config/crd/bases/ray.io_rayservices.yaml",
                               "commit": commit, "license": "Apache-2.0",
                               "group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"],
                               "version": "v1",
                               "schema": strip(version["schema"]["openAPIV3Schema"])},
                              separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main(*sys.argv[1:])
