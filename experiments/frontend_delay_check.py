"""Would a state-dependent front-end delay fix the twin's TTFT? (docs/fidelity.md, run 9)

Replays the real side of a recorded ``twin validate --calibrate`` run on the twin with its own
in-run profiles, but with the front-end delay ``d`` split by the engine's state at arrival:
``d + wake`` for a request that finds the engine idle, ``d - cut`` for one that finds it busy.
Prints the median TTFT and E2E errors per case for a grid of (cut, wake). A diagnostic, fitted
on the validation requests themselves: if no (cut, wake) brings every case under 10 %, no
two-parameter front-end model calibrated elsewhere will either.

    .venv/bin/python experiments/frontend_delay_check.py docs/fidelity/jitter-tiny/run9-calibrate

``--fit-on CASE`` instead fits the entry delay of ``entry.fit_entry`` (busy cut, wake per
idle-time bin) on that one recorded case and scores every case with it (docs/fidelity.md,
run 12): how far the state-dependent delay can go when the calibration shares the run.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from inframind_ray.fidelity.compare import compare
from inframind_ray.fidelity.entry import fit_entry
from inframind_ray.fidelity.profile import load_profile
from inframind_ray.fidelity.recorded import load_recorded
from inframind_ray.fidelity.twin_replay import replay_twin, twin_kv_tokens


def _score_all(cases: list, fps: dict, infos: dict, delay=None) -> list[dict]:
    """Replay every case on the twin with its engine's profile and score it; ``delay(d,
    idle_for)`` replaces the profile's entry delay when given."""
    rows = []
    for c in cases:
        fp = fps[c.engine]
        entry = None if delay is None else (
            lambda idle_for, d=fp.request_overhead_s: max(0.0, delay(d, idle_for)))
        replay_twin(c, fp, infos[c.engine], int(twin_kv_tokens(infos[c.engine])),
                      entry_delay=entry)
        rows.append(compare(c))
    return rows


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="folder of a `twin validate --calibrate` run")
    ap.add_argument("--cuts-ms", default="0,1,2,3")
    ap.add_argument("--wakes-ms", default="0,1,2")
    ap.add_argument("--fit-on", default=None, help="fit the entry delay on this case instead")
    a = ap.parse_args()
    cases, infos = load_recorded(a.run)
    fps = {k: load_profile(a.run / f"profile-{k}.json")[2] for k in infos}
    if a.fit_on:
        fit_case = next((c for c in cases if c.name == a.fit_on), None)
        if fit_case is None:
            raise SystemExit(f"error: no case {a.fit_on!r} in {a.run}")
        for k in infos:
            e = fit_entry(fit_case, fps[k], infos[k], int(twin_kv_tokens(infos[k])))
            fps[k] = dataclasses.replace(fps[k], entry=e)
            print(f"{k}: busy cut {e.busy_cut_s * 1e3:.2f} ms, idle wake "
                  + " / ".join(f"{w * 1e3:+.2f}" for w in e.idle_wake_s) + " ms")
        print("| case | TTFT median error | E2E median error |\n|---|---:|---:|")
        for r in _score_all(cases, fps, infos):
            print(f"| {r['case']} | {r['ttft_median_rel_err']:.1%} | "
                  f"{r['e2e_median_rel_err']:.1%} |")
        return
    print("| cut ms | wake ms | TTFT median error per case | E2E median error per case |")
    print("|---:|---:|---|---|")
    for cut in (float(x) / 1e3 for x in a.cuts_ms.split(",")):
        for wake in (float(x) / 1e3 for x in a.wakes_ms.split(",")):
            rows = _score_all(cases, fps, infos, lambda d, idle_for, w=wake, k=cut:
                              d - k if idle_for is None else d + w)
            print(f"| {cut * 1e3:g} | {wake * 1e3:g} | "
                  + " / ".join(f"{r['ttft_median_rel_err']:.1%}" for r in rows) + " | "
                  + " / ".join(f"{r['e2e_median_rel_err']:.1%}" for r in rows) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
