"""The drift kit from the command line: a pool file after a script of drifts
(serving/drift.py), written as YAML, e.g. to run the twin replay gate or a twin benchmark on
the drifted pool:

    python experiments/continual/drift.py experiments/continual/pool.yaml \
        experiments/continual/example_drifts.yaml --out P.yaml

Drifts on a running Serve pool go through ``serving.drift.apply_to_session``; a mix shift
changes no pool (a load generator takes its ``tasks``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from inframind_ray.config import load_pool
from inframind_ray.errors import InframindError
from inframind_ray.serving.drift import MixShifted, apply_to_config, load_script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pool", type=Path)
    ap.add_argument("script", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        cfg = load_pool(args.pool)
        for d in load_script(args.script):
            cfg = apply_to_config(cfg, d)
            if isinstance(d, MixShifted):
                print(f"at {d.at_s:g} s: task mix {d.tasks} (for the load generator)")
    except InframindError as e:
        sys.exit(f"error: {e}")
    args.out.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
