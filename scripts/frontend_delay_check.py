"""Would a state-dependent front-end delay fix the twin's TTFT? (docs/fidelity.md, run 9)

Replays the real side of a recorded ``twin validate --calibrate`` run on the twin with its own
in-run profiles, but with the front-end delay ``d`` split by the engine's state at arrival:
``d + wake`` for a request that finds the engine idle, ``d - cut`` for one that finds it busy.
Prints the median TTFT and E2E errors per case for a grid of (cut, wake). A diagnostic, fitted
on the validation requests themselves: if no (cut, wake) brings every case under 10 %, no
two-parameter front-end model calibrated elsewhere will either.

    .venv/bin/python scripts/frontend_delay_check.py docs/fidelity/jitter-tiny/run9-calibrate
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np

from inframind_ray.engine.request import EngineRequest
from inframind_ray.fidelity import validate as V
from inframind_ray.fidelity.profile import FittedProfile, load_profile
from inframind_ray.twin.engine import TwinEngine
from inframind_ray.twin.simloop import run_simulated


def errors(case: V.Case, fp: FittedProfile, info, kv: int, cut: float,
           wake: float) -> tuple[float, float]:
    """Median relative TTFT and E2E error of one case with the split delay."""
    real = [r for r in sorted(case.real, key=lambda r: r["i"]) if r["status"] == "ok"]
    d = fp.request_overhead_s

    async def main() -> dict:
        eng = TwinEngine("twin", fp.profile, max_num_seqs=info.max_num_seqs,
                         kv_capacity_tokens=kv, max_batched_tokens=info.max_batched_tokens or 8192,
                         scheduling="edf")
        rows = {}

        async def one(r: dict) -> None:
            await asyncio.sleep(r["arrival_s"])
            s = eng.snapshot()
            idle = s.running + s.waiting == 0
            await asyncio.sleep(max(0.0, d + wake if idle else d - cut))
            res = await eng.generate(EngineRequest(str(r["i"]), int(r["prompt_tokens"]),
                                                   max(1, int(r["output_tokens"])),
                                                   deadline=r["deadline_s"]))
            rows[r["i"]] = (res.first_token - r["arrival_s"], res.finished_at - r["arrival_s"])

        await asyncio.gather(*[one(r) for r in real])
        return rows

    rows, _ = run_simulated(main())
    te, ee = [], []
    for r in real:
        t, e = rows[r["i"]]
        rt, re_ = r["first_token_s"] - r["arrival_s"], r["finish_s"] - r["arrival_s"]
        te.append(abs(t - rt) / rt)
        ee.append(abs(e - re_) / re_)
    return float(np.median(te)), float(np.median(ee))


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="folder of a `twin validate --calibrate` run")
    ap.add_argument("--cuts-ms", default="0,1,2,3")
    ap.add_argument("--wakes-ms", default="0,1,2")
    a = ap.parse_args()
    cases, infos = V.load_recorded(a.run)
    fps = {k: load_profile(a.run / f"profile-{k}.json")[2] for k in infos}
    print("| cut ms | wake ms | TTFT median error per case | E2E median error per case |")
    print("|---:|---:|---|---|")
    for cut in (float(x) / 1e3 for x in a.cuts_ms.split(",")):
        for wake in (float(x) / 1e3 for x in a.wakes_ms.split(",")):
            res = [errors(c, fps[c.engine], infos[c.engine],
                          int(V.twin_kv_tokens(infos[c.engine])), cut, wake) for c in cases]
            print(f"| {cut * 1e3:g} | {wake * 1e3:g} | "
                  + " / ".join(f"{t:.1%}" for t, _ in res) + " | "
                  + " / ".join(f"{e:.1%}" for _, e in res) + " |", flush=True)


if __name__ == "__main__":
    main()
