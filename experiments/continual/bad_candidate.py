"""Bad-candidate scenario (issue 20, docs/continual.md): a degraded candidate (the shipped
policy's preferences inverted, policy/degrade.py) is (1) stopped by the twin replay gate, and
(2) with the gate's verdict ignored, canaried on Ray Serve with twin engines (time_scale 0.1,
budgets scaled by the same 0.1) until the canary's sequential test decides. Writes results.json and
bad_candidate.png under --out.

    nice -n 5 python experiments/continual/bad_candidate.py

(it takes /tmp/serve.lock itself around the Serve part; the twin gate runs without it)."""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import shutil
import time
from pathlib import Path

import aiohttp
import numpy as np
import ray
from live import SERVE_LOCK, post_query

from inframind_ray import assumptions as A
from inframind_ray.bench.replay_gate import ReplayGateConfig, replay_gate
from inframind_ray.config import load_pool
from inframind_ray.policy.degrade import invert_preferences
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT
from inframind_ray.policy.registry import PolicyRegistry
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.serving.app import start
from inframind_ray.tasks.workload import WorkloadSpec, budgets, sample_task_items

POOL = Path(__file__).parent / "pool.yaml"
TIME_SCALE = 0.1  # the pool file's engine time_scale (engine times x 0.1)


async def drive(url: str, orch, rate: float, max_s: float, seed: int) -> tuple[list, dict]:  # noqa: ANN001
    """Poisson queries (test split, budgets x TIME_SCALE) until the canary has decided (then
    10 s more) or ``max_s``; every query sent is reported."""
    n = int(rate / 60 * max_s) + 10
    scaled = tuple(b * TIME_SCALE for b in A.BUDGET_RANGE_S)
    wl = WorkloadSpec(rate, n, split="test", seed=seed, budget_range_s=scaled)
    items, buds = sample_task_items(wl), budgets(wl)
    gaps = np.random.default_rng(seed).exponential(60.0 / rate, size=n)
    rows: list[dict] = []
    t0 = time.monotonic()
    decided_at: float | None = None
    state: dict = {}

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        task, item = items[i]
        row = {"i": i, "query_id": f"bad-{seed}-{i}", "item_id": item, "budget_s": buds[i],
               "sent_s": time.monotonic() - t0, "http_status": 0}
        rows.append(await post_query(session, url, {
            "item_id": item, "budget_s": float(buds[i]), "query_id": row["query_id"]}, row, t0))

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks, t, last_poll = [], 0.0, 0.0
        for i in range(n):
            t += gaps[i]
            if t > max_s or (decided_at is not None and t > decided_at + 10):
                break
            await asyncio.sleep(max(0.0, t0 + t - time.monotonic()))
            tasks.append(asyncio.create_task(one(session, i)))
            if decided_at is None and t - last_poll >= 1.0:
                last_poll = t
                state = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: ray.get(orch.state.remote()))
                if state.get("last_canary"):
                    decided_at = t
        await asyncio.wait(tasks, timeout=60)
    state = ray.get(orch.state.remote())
    return rows, state


def _window(rows: list[dict], last: dict) -> tuple[list[dict], list[dict], np.ndarray]:
    """The canary's window (answered queries sent up to the last candidate one), its candidate
    queries, and per window query whether it went to the incumbent."""
    ok = [r for r in rows if r["http_status"] == 200 and r.get("policy_version")]
    cand = [r for r in ok if r["policy_version"] == last["candidate"]]
    end = max(r["sent_s"] for r in cand)
    win = [r for r in ok if r["sent_s"] <= end]
    return win, cand, np.array([r["policy_version"] == last["incumbent"] for r in win])


def _goodput(rs: list[dict]) -> np.ndarray:
    return np.array([bool(r["correct"]) and bool(r["within_budget"]) for r in rs], float)


def _running(win: list[dict], live: np.ndarray, arm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative live goodput (both arms) minus the incumbent arm's after every window query,
    in the order sent; and where the incumbent arm has a query yet."""
    order = np.argsort([r["sent_s"] for r in win], kind="stable")
    cl = np.cumsum(live[order]) / np.arange(1, len(win) + 1)
    ci = np.cumsum(live[order] * arm[order]) / np.maximum(1, np.cumsum(arm[order]))
    return cl - ci, np.cumsum(arm[order]) > 0


def running_difference(rows: list[dict], last: dict) -> np.ndarray:
    """Cumulative live goodput (both arms) minus the incumbent arm's, after every answered
    query in the canary's window, in the order the queries were sent (from the first
    incumbent query on): what the harm guard keeps above -tolerance."""
    win, _, arm = _window(rows, last)
    diff, seen = _running(win, _goodput(win), arm)
    return diff[seen]


def canary_window(rows: list[dict], last: dict) -> dict:
    """Goodput of the live traffic (both arms) and of each arm over the canary's window (the
    queries sent before the last one routed to the candidate), with 95% intervals."""
    win, cand, arm = _window(rows, last)
    live = _goodput(win)
    inc = live[arm]
    diff = live.mean() - inc.mean()
    # live and incumbent share queries: bootstrap the window's queries for the interval
    rng = np.random.default_rng(0)
    boots = []
    for _ in range(2000):
        k = rng.integers(0, len(win), len(win))
        boots.append(live[k].mean() - live[k][arm[k]].mean())
    lo, hi = np.percentile(boots, [2.5, 97.5])
    running, seen = _running(win, live, arm)
    run = running[49:]  # after 50 queries, as the runs before the harm guard reported it
    looks = running[seen]  # every query from the first incumbent one
    return {"window_queries": len(win), "candidate_queries": len(cand),
            "served_share": round(len(cand) / len(win), 4),
            "goodput_live": round(live.mean(), 4), "goodput_incumbent": round(inc.mean(), 4),
            "goodput_candidate": round(_goodput(cand).mean(), 4),
            "live_minus_incumbent": round(diff, 4),
            "live_minus_incumbent_95ci": [round(lo, 4), round(hi, 4)],
            "running_live_minus_incumbent_min_after_50": round(float(run.min()), 4)
            if len(run) else None,
            "running_live_minus_incumbent_min": round(float(looks.min()), 4),
            "looks_below_tolerance": int((looks < -last["config"]["tolerance"]).sum()),
            "looks": len(looks)}


def plot(out: Path, gate: dict, rows: list[dict], last: dict, cfg) -> None:  # noqa: ANN001
    """Left: the replay gate's paired differences and bounds; right: the canary's goodput test
    recomputed from the responses in the order they came back."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from inframind_ray.serving.canary import Canary

    fig, (a, b, lv) = plt.subplots(1, 3, figsize=(16, 4))
    ts = gate["tests"]
    a.errorbar(range(len(ts)), [t["diff"] for t in ts],
               yerr=[[t["diff"] - t["lower"] for t in ts], [0] * len(ts)], fmt="o", capsize=4)
    a.axhline(-ts[0]["tolerance"], color="r", ls="--", label="-tolerance")
    a.axhline(0, color="k", lw=0.5)
    a.set_xticks(range(len(ts)), [t["metric"] for t in ts])
    a.set_title(f"twin replay gate ({ts[0]['n']} val queries): "
                + ("passed" if gate["passed"] else "failed"))
    a.set_ylabel("candidate - incumbent (one-sided 95% bound)")
    a.legend()
    c = Canary(last["candidate"], last["incumbent"], cfg)
    xs, lo, hi, d = [], [], [], []
    for r in sorted(rows, key=lambda r: r["done_s"]):
        if r["http_status"] != 200 or not r.get("policy_version"):
            continue
        c.observe(r["policy_version"] == last["candidate"], r["correct"],
                  bool(r["within_budget"]))
        t = c.tests()[0]
        if t.n_candidate >= 1 and t.n_incumbent >= 1:
            xs.append(t.n_candidate + t.n_incumbent)
            lo.append(t.diff_lower)
            hi.append(t.diff_upper)
            d.append(t.diff)
    b.fill_between(xs, lo, hi, alpha=0.3, label="always-valid bounds")
    b.plot(xs, d, label="observed difference")
    b.axhline(-cfg.tolerance, color="r", ls="--", label="-tolerance")
    b.set_ylim(-1, 1)
    b.set_xlabel("answered queries (both arms)")
    b.set_title(f"canary goodput test: {last['decision']} after "
                f"{last['routed']['candidate']} candidate queries")
    b.legend(fontsize=8)
    run = running_difference(rows, last)
    lv.plot(np.arange(1, len(run) + 1), run, label="live (both arms) - incumbent arm")
    lv.axhline(-cfg.tolerance, color="r", ls="--", label="-tolerance")
    lv.axhline(0, color="k", lw=0.5)
    lv.set_ylim(-0.15, 0.05)
    lv.set_xlabel("queries of the canary's window, in the order sent")
    lv.set_title(f"live goodput during the canary (lowest {run.min():+.3f})")
    lv.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bad_candidate.png", dpi=120)


def serve_canary(cfg, reg: PolicyRegistry, bad: str, info, args) -> tuple[list, dict]:  # noqa: ANN001
    """Serve the pool, ask for the canary of ``bad`` (the twin gate's verdict ignored), drive
    the load until the canary decides; the responses and the orchestrator's last state."""
    session = start(cfg)
    try:
        reg.start_canary(bad, info, actor="scenario (twin gate disabled)")
        for _ in range(50):
            if ray.get(session.orchestrator.state.remote())["canary"]:
                break
            time.sleep(0.2)
        return asyncio.run(drive(session.url, session.orchestrator, args.rate, args.max_s,
                                 args.seed))
    finally:
        session.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/continual/bad_candidate"))
    ap.add_argument("--rate", type=float, default=120.0, help="live req/min")
    ap.add_argument("--gate-queries", type=int, default=300)
    ap.add_argument("--max-s", type=float, default=480.0, help="the most seconds of load")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replot", action="store_true",
                    help="only redraw --out's bad_candidate.png from its results and queries")
    args = ap.parse_args()
    if args.replot:
        doc = json.loads((args.out / "results.json").read_text())
        rows = json.loads((args.out / "queries.json").read_text())
        plot(args.out, doc["replay_gate"], rows, doc["canary"], load_pool(POOL).serving.canary)
        return
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    base = load_pool(POOL)
    cfg = base.model_copy(update={"serving": base.serving.model_copy(update={
        "registry_dir": str(args.out / "registry"), "records_dir": str(args.out / "records")})})
    info = build_pool_info(cfg)
    reg = PolicyRegistry(args.out / "registry")
    reg.seed(DEFAULT_CHECKPOINT, info)
    bad = reg.register(invert_preferences(DEFAULT_CHECKPOINT, args.out / "inverted"), info,
                       parent="v0001", note="shipped policy, action heads negated").version
    scaled = tuple(b * TIME_SCALE for b in A.BUDGET_RANGE_S)
    t0 = time.time()
    gate = replay_gate(cfg, reg, bad, cfg=ReplayGateConfig(
        n_queries=args.gate_queries, rate_per_min=args.rate, budget_range_s=scaled,
        seed=args.seed))
    print(f"twin replay gate: {'passed' if gate['passed'] else 'failed'} "
          f"({time.time() - t0:.0f} s)", json.dumps(gate["tests"]), flush=True)
    with open(SERVE_LOCK, "a") as lock:  # the Serve part only: other runs bind these ports
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows, state = serve_canary(cfg, reg, bad, info, args)
    last = state.get("last_canary") or state.get("canary")
    doc = {"command": "nice -n 5 python "
                      f"experiments/continual/bad_candidate.py --rate {args.rate} "
                      f"--gate-queries {args.gate_queries} --max-s {args.max_s} "
                      f"--seed {args.seed}",
           "time_scale": TIME_SCALE, "budget_range_s": scaled, "replay_gate": gate,
           "canary": last, "finished": state.get("last_canary") is not None,
           "registry_log": reg.state().log,
           "sent": len(rows), "answered": sum(r["http_status"] == 200 for r in rows),
           "window": canary_window(rows, last) if last else None}
    (args.out / "results.json").write_text(json.dumps(doc, indent=2, default=float))
    (args.out / "queries.json").write_text(json.dumps(rows, default=float))
    if last:
        plot(args.out, gate, rows, last, cfg.serving.canary)
    print(json.dumps({k: doc[k] for k in ("canary", "window", "sent", "answered")},
                     indent=2, default=float))


if __name__ == "__main__":
    main()
