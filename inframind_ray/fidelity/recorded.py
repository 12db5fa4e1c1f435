"""Re-score a recorded `twin validate` run without an engine (``twin rescore``): read its real
side back as cases and replay them on the twin with another profile."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from inframind_ray.errors import ConfigError
from inframind_ray.fidelity.cases import Case
from inframind_ray.fidelity.compare import score_case
from inframind_ray.fidelity.profile import EntryDelay, load_profile
from inframind_ray.fidelity.real import EngineInfo
from inframind_ray.fidelity.report import write_run
from inframind_ray.fidelity.twin_replay import twin_kv_tokens


def load_recorded(run: Path) -> tuple[list[Case], dict[str, EngineInfo]]:
    """The real side of a recorded ``twin validate`` run (its folder's validate.json, meta.json,
    requests.parquet, samples.parquet) as cases to replay on the twin with another profile;
    ConfigError("replay", ...) if the folder is not such a run."""
    import pandas as pd

    def real_side(df: pd.DataFrame, case: str) -> pd.DataFrame:
        return df[(df["case"] == case) & (df["side"] == "real")].drop(columns=["case", "side"])

    def tokens(col: pd.Series) -> np.ndarray:
        return np.maximum(1, np.nan_to_num(col.to_numpy(float), nan=1.0)).astype(int)

    try:
        rows = json.loads((run / "validate.json").read_text())
        meta = json.loads((run / "meta.json").read_text())
        req = pd.read_parquet(run / "requests.parquet")
        smp = pd.read_parquet(run / "samples.parquet")
        infos = {k: EngineInfo(**v) for k, v in meta["engines"].items()}
        cases = []
        for row in rows:
            real = real_side(req, row["case"]).sort_values("i")
            recs = [{**r, "i": int(r["i"])} for r in real.to_dict("records")]
            c = Case(row["case"], float(row["rate_per_min"]), real["arrival_s"].to_numpy(float),
                     tokens(real["prompt_tokens"]), tokens(real["output_tokens"]),
                     (real["deadline_s"] - real["arrival_s"]).to_numpy(float),
                     engine=row.get("engine", "main"), real=recs)
            c.real_samples = real_side(smp, c.name).to_dict("records")
            if not recs or c.engine not in infos:
                raise ValueError(f"case {c.name!r} has no real requests or engine")
            cases.append(c)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError("replay", f"{run} is not a recorded `twin validate` run ({e})") from None
    if not cases:
        raise ConfigError("replay", f"{run}/validate.json lists no cases")
    return cases, infos


def rescore_run(run: Path, out: Path, profile: Path | None = None,
                profile_key: str | None = None, entry: bool = True) -> None:
    """Replay the real side of the recorded run ``run`` on the twin with ``profile`` (default:
    the run's own --calibrate profiles, RUN/profile-ENGINE.json; ``entry`` False: with the plain
    front-end delay), and write the same table and files as `twin validate` to ``out``."""
    cases, infos = load_recorded(run)
    if profile is not None:
        key, _, fp = load_profile(profile, profile_key)
        fps = dict.fromkeys(infos, fp)
    else:
        fps = {k: load_profile(run / f"profile-{k}.json", profile_key)[2] for k in infos}
        key = f"{run.name} (in-run profiles)"
    if not entry:
        fps = {k: dataclasses.replace(f, entry=EntryDelay()) for k, f in fps.items()}
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for c in cases:
        kv_tokens = twin_kv_tokens(infos[c.engine])
        if not kv_tokens:
            raise ConfigError("replay", f"{run}: engine {c.engine!r} has no KV capacity")
        rows.append(score_case(c, fps[c.engine], infos[c.engine], int(kv_tokens)))
    write_run(out, cases, rows, key, infos)
