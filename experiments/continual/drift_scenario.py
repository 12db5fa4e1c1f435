"""Drift scenarios (issue 20, docs/continual.md): after a drift (the traffic mix shifted, or a
model slowed 2x), the continual learner trains on the pool's live rollouts, its candidates go
through the twin replay gate and the canary without a human command, and after the first
promotion the promoted version and the frozen shipped one serve the same arrival sequence on
the drifted pool, one after the other or (``--window-mode side-by-side``) both at once.
Writes results.json, queries.json and scenario.png under --out.

    python experiments/continual/drift_scenario.py --scenario slowed
    python experiments/continual/drift_scenario.py --scenario mix_shift

Ray Serve with twin engines (experiments/continual/pool.yaml, time_scale 0.1: 10x compressed,
budgets scaled the same), the learner a separate process (`inframind learn`, its own local Ray).
The drift is in place from the first query (t = 0)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import ray
import yaml
from live import SERVE_LOCK, post_query

from inframind_ray import assumptions as A
from inframind_ray.config import load_pool
from inframind_ray.policy.learned import DEFAULT_CHECKPOINT
from inframind_ray.policy.registry import PolicyRegistry
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.serving.app import start
from inframind_ray.serving.drift import MixShifted, ModelSlowed, apply_to_config
from inframind_ray.tasks.workload import (
    MMLU_ONLY,
    WorkloadSpec,
    arrival_times,
    budgets,
    sample_task_items,
)

HERE = Path(__file__).parent
TIME_SCALE = 0.1  # pool.yaml's engine time_scale
# chosen before any run: the strongest model slowed (the one a quality-seeking policy leans
# on), and a shift from the MMLU-Pro traffic of the bad-candidate scenario to GSM8K-heavy
SCENARIOS = {
    "slowed": (ModelSlowed(model="llama-3.1-70b", factor=2.0), MMLU_ONLY),
    "mix_shift": (MixShifted(tasks=[("gsm8k", 0.8), ("mmlu_pro", 0.2)]),
                  (("gsm8k", 0.8), ("mmlu_pro", 0.2))),
    # added 2026-12-06 after the GSM8K shift missed, chosen by its headroom (journal)
    "mix_shift_math": (MixShifted(tasks=[("math", 0.8), ("mmlu_pro", 0.2)]),
                       (("math", 0.8), ("mmlu_pro", 0.2))),
}
CANARY_SHARE = 0.25  # the scenario's canary share (default 0.1): a shorter canary, same test
# the live phase's items come from the train split, the window's from the test split: the
# learner trains on the live rollouts, so a window of test items would otherwise repeat most
# of them (306 and 322 of 400 in the runs of 2026-12-05 before this); the frozen policy was
# trained on the train split too, so neither version is compared on items it trained on
LIVE_SPLIT, WINDOW_SPLIT = "train", "test"


async def drive(url: str, wl: WorkloadSpec, arms: dict[str, dict],
                stop=None) -> dict[str, list[dict]]:  # noqa: ANN001
    """Send ``wl``'s queries at its arrival times (budgets x TIME_SCALE), each once per arm
    (tag -> extra body fields, e.g. a ``policy_version``; several arms: the copies of a query
    leave together, in an order that alternates); every query sent is reported. ``stop()`` true
    ends the sending early."""
    items, buds, at = sample_task_items(wl), budgets(wl), arrival_times(wl)
    rows: dict[str, list[dict]] = {tag: [] for tag in arms}
    t0 = time.monotonic()

    async def one(session: aiohttp.ClientSession, i: int, tag: str) -> None:
        task, item = items[i]
        row = {"i": i, "query_id": f"{tag}-{i}", "task": task, "item_id": item,
               "budget_s": float(buds[i]), "sent_s": time.monotonic() - t0, "http_status": 0}
        rows[tag].append(await post_query(session, url, {
            "task": task, "item_id": item, "budget_s": float(buds[i]),
            "query_id": row["query_id"], **arms[tag]}, row, t0))

    tags = list(arms)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                     connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = []
        for i in range(wl.n_queries):
            await asyncio.sleep(max(0.0, t0 + float(at[i]) - time.monotonic()))
            if stop is not None and stop():
                break
            order = tags if i % 2 == 0 else tags[::-1]
            tasks += [asyncio.create_task(one(session, i, tag)) for tag in order]
        if tasks:
            await asyncio.wait(tasks, timeout=90)
    return {tag: sorted(r, key=lambda x: x["i"]) for tag, r in rows.items()}


def goodput(rows: list[dict]) -> np.ndarray:
    """Per query: 1 for a correct answer within budget; a query not answered 200 counts 0."""
    return np.array([float(r["http_status"] == 200 and bool(r.get("correct"))
                           and bool(r.get("within_budget"))) for r in rows])


def paired(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict:
    """Mean of a - b over paired queries, 95% bootstrap interval (queries resampled)."""
    d = a - b
    rng = np.random.default_rng(seed)
    boots = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(4000)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"n": len(d), "a": round(a.mean(), 4), "b": round(b.mean(), 4),
            "diff": round(d.mean(), 4), "diff_95ci": [round(lo, 4), round(hi, 4)],
            "discordant": int((d != 0).sum())}


def write_configs(out: Path, scenario: str, rate: float, seed: int,  # noqa: ANN201
                  explore_share: float = 0.0, lr: float | None = None):
    """The drifted pool file and the learner's config (the shipped continual.yaml with the
    gate on and the scenario's workload for the replay gate; ``lr``: its PPO step size instead
    of the shipped one); ``explore_share`` of the live learned-policy queries explore
    (``serving.rollouts.explore_share``; the window does not)."""
    drift, tasks = SCENARIOS[scenario]
    base = load_pool(HERE / "pool.yaml")
    s = base.serving.model_copy(update={
        "registry_dir": str(out / "registry"), "records_dir": str(out / "records"),
        "canary": base.serving.canary.model_copy(update={"share": CANARY_SHARE}),
        "rollouts": base.serving.rollouts.model_copy(update={"explore_share": explore_share})})
    cfg = apply_to_config(base.model_copy(update={"serving": s}), drift)
    pool_file = out / "pool.yaml"
    pool_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    learner = yaml.safe_load((HERE.parents[1] / "rllib_configs/continual.yaml").read_text())
    scaled = [b * TIME_SCALE for b in A.BUDGET_RANGE_S]
    learner.update(deployment=str(pool_file), min_age_s=30 * TIME_SCALE)
    if lr is not None:
        learner["ppo"]["lr"] = lr
    learner["gate"].update(enabled=True)
    learner["gate"]["replay"].update(rate_per_min=rate, budget_range_s=scaled,
                                     tasks=[list(t) for t in tasks], seed=seed)
    learner_file = out / "continual.yaml"
    learner_file.write_text(yaml.safe_dump(learner, sort_keys=False))
    return cfg, tasks, learner_file


def set_active(reg: PolicyRegistry, version: str, info) -> None:  # noqa: ANN001
    """Make ``version`` active and pinned, and end a canary still running, so that the
    comparison's arms are pure. (Until 2026-12-05 16:40 a still-running canary's share of a
    sequential window's continual arm went to its candidate. Since the night of 2026-12-05 the
    pin itself stops a running canary, and the end here is a no-op kept for older registries.)"""
    reg.unpin(actor="scenario")
    if reg.state().active != version:
        reg.promote(version, info, actor="scenario")
    reg.pin(version, actor="scenario")
    running = reg.state().canary
    if running is not None:
        reg.end_canary(running, False, "stopped for the scenario's window: each arm serves one "
                       "version", info, actor="scenario")


def wait_serving(orch, version: str, timeout_s: float = 30) -> None:  # noqa: ANN001
    """Until the orchestrator serves ``version`` and runs no canary."""
    t = time.monotonic()
    while (st := ray.get(orch.state.remote())).get("policy_version") != version or st.get(
            "canary") is not None:
        if time.monotonic() - t > timeout_s:
            raise RuntimeError(f"the pool did not swap to {version} in {timeout_s:g} s")
        time.sleep(0.5)


def plot(out: Path, live: list[dict], events: list[dict], arms: dict, t_live: float,
         live_s: float, window: dict | None, learner: list[dict] = ()) -> None:
    """Left: live goodput with the learner's candidates (ticks: grey passed the twin gate,
    red failed it), its restarts from the active version (blue dashes), canaries (shaded) and
    promotions. Right: the comparison window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    g = goodput(live)
    k = 50
    if len(g) >= k:
        xs = [r["sent_s"] for r in live][k - 1:]
        a.plot(xs, np.convolve(g, np.ones(k) / k, "valid"), label=f"live goodput ({k}-query mean)")
    started: dict[str, float] = {}
    for e in events:
        x = e["at"] - t_live
        if not 0 <= x <= live_s + 5:
            continue
        if e["op"] == "gate:replay":
            a.plot([x, x], [0, 0.06], color="0.5" if e.get("passed") else "r", lw=1.2)
        elif e["op"] == "canary_start":
            started[e["version"]] = x
        elif (e["op"] == "canary_superseded" and e.get("running")
              and e["version"] in started):
            a.axvspan(started.pop(e["version"]), x, color="orange", alpha=0.12)
        elif e["op"] in ("promote", "canary_rollback") and e["version"] in started:
            ok = e["op"] == "promote"
            a.axvspan(started.pop(e["version"]), x, color="g" if ok else "r", alpha=0.12)
            a.text(x, 0.9, f"{'promote' if ok else 'rollback'} {e['version']}", fontsize=7,
                   ha="right")
    for r in learner:
        if r.get("reset_to") and "at" in r:
            a.axvline(r["at"] - t_live, color="b", ls="--", lw=0.8, alpha=0.6)
    for v, x in started.items():
        a.axvspan(x, live_s, color="0.5", alpha=0.1)
        a.text(live_s, 0.8, f"canary {v}", fontsize=7, ha="right")
    a.set_xlabel("seconds of live traffic (ticks: candidates through the twin gate;\n"
                 "blue dashes: the learner restarted from the active version)", fontsize=9)
    a.set_ylim(0, 1)
    a.set_title("live phase: learner, gates, canaries (shaded; orange: superseded)",
                fontsize=10)
    a.legend(fontsize=8, loc="lower right")
    for name, rows in arms.items():
        gg = goodput(rows)
        b.plot(np.arange(1, len(gg) + 1), np.cumsum(gg) / np.arange(1, len(gg) + 1), label=name)
    if not arms:
        b.text(0.5, 0.5, "no version was promoted in the live phase:\nno comparison window",
               ha="center", va="center", transform=b.transAxes)
    b.set_xlabel("query of the comparison window")
    b.set_ylabel("cumulative goodput")
    title = "same arrivals after the drift: promoted vs frozen"
    if window:
        gp = window["goodput"]
        title += f"\ndiff {gp['diff']:+.4f}, 95% CI [{gp['diff_95ci'][0]:+.4f}, " \
                 f"{gp['diff_95ci'][1]:+.4f}]"
    b.set_title(title, fontsize=10)
    if arms:
        b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scenario.png", dpi=120)


def replot(out: Path) -> None:
    """Redraw ``out/scenario.png`` from its results.json and queries.json."""
    doc = json.loads((out / "results.json").read_text())
    q = json.loads((out / "queries.json").read_text())
    live = q.pop("live")
    plot(out, live, doc["registry_log"], q, doc["live_started_at"], doc["live_s"],
         doc.get("window"), doc.get("learner_metrics", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    ap.add_argument("--out", type=Path, default=None, help="default runs/continual/SCENARIO")
    ap.add_argument("--rate", type=float, default=120.0, help="live req/min")
    ap.add_argument("--max-live-s", type=float, default=1500.0,
                    help="the most seconds of live traffic waiting for the first promotion")
    ap.add_argument("--window", type=int, default=400, help="queries per arm compared")
    ap.add_argument("--lr", type=float, default=None,
                    help="the learner's PPO step size (default: rllib_configs/continual.yaml's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--explore-share", type=float, default=0.0,
                    help="share of live learned-policy queries that explore (epsilon: the "
                    "pool's serving.rollouts.explore_epsilon); off in the comparison window")
    ap.add_argument("--window-mode", choices=["sequential", "side-by-side"],
                    default="sequential",
                    help="the comparison window's arms one after the other at the live rate "
                    "(the runs before 2026-12-05), or side by side: each query sent to both "
                    "versions at once (the query's policy_version), each arm at half the rate")
    ap.add_argument("--replot", action="store_true", help="only redraw --out's scenario.png")
    args = ap.parse_args()
    if args.replot:
        replot(args.out or Path("runs/continual") / args.scenario)
        return
    out = args.out or Path("runs/continual") / args.scenario
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg, tasks, learner_file = write_configs(out, args.scenario, args.rate, args.seed,
                                             args.explore_share, args.lr)
    info = build_pool_info(cfg)
    reg = PolicyRegistry(out / "registry")
    frozen = reg.seed(DEFAULT_CHECKPOINT, info)
    scaled = tuple(b * TIME_SCALE for b in A.BUDGET_RANGE_S)
    doc: dict = {"command": " ".join(["python", *sys.argv]), "scenario": args.scenario,
                 "drift": SCENARIOS[args.scenario][0].model_dump(), "tasks": tasks,
                 "time_scale": TIME_SCALE, "budget_range_s": scaled, "rate": args.rate,
                 "canary_share": CANARY_SHARE, "frozen": frozen,
                 "explore_share": args.explore_share, "learner_lr": args.lr,
                 "explore_epsilon": cfg.serving.rollouts.explore_epsilon}
    with open(SERVE_LOCK, "a") as lock:  # other runs bind these ports
        fcntl.flock(lock, fcntl.LOCK_EX)
        session = start(cfg)
        learner = None
        try:
            exe = Path(sys.executable).with_name("inframind")
            learner = subprocess.Popen(
                [str(exe), "learn", "-c", str(learner_file), "--out", str(out / "learner")],
                stdout=(out / "learner.log").open("w"), stderr=subprocess.STDOUT,  # noqa: SIM115
                start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
            t_live = time.time()
            promoted: list[str] = []

            def stop() -> bool:
                if not promoted:
                    act = reg.state().active
                    if act != frozen:
                        promoted.append(act)
                return bool(promoted) or learner.poll() is not None

            n_live = int(args.rate / 60 * args.max_live_s)
            live = asyncio.run(drive(session.url, WorkloadSpec(
                args.rate, n_live, split=LIVE_SPLIT, seed=args.seed, budget_range_s=scaled,
                tasks=tasks), {"live": {}}, stop))["live"]
            t_end_live = time.time()
            os.killpg(learner.pid, signal.SIGINT)
            try:
                learner.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(learner.pid, signal.SIGKILL)
            st = reg.state()
            promote = [e for e in st.log if e["op"] == "promote" and e["version"] != frozen]
            doc.update(live_queries=len(live), live_s=round(t_end_live - t_live, 1),
                       live_started_at=round(t_live, 3),
                       learner_rc=learner.returncode, promoted=promoted[0] if promoted else None,
                       time_to_first_promotion_s=round(promote[0]["at"] - t_live, 1)
                       if promote else None,
                       live_goodput_by_version={
                           v: [round(goodput([r for r in live if r.get("policy_version") == v])
                                     .mean(), 4),
                               sum(r.get("policy_version") == v for r in live)]
                           for v in sorted({r.get("policy_version") for r in live} - {None})},
                       live_not_200=sum(r["http_status"] != 200 for r in live))
            doc["explored_queries"] = ray.get(session.orchestrator.state.remote())[
                "counters"].get("explored_queries", 0)
            arms: dict[str, list[dict]] = {}
            if promoted:
                if args.explore_share:  # the window compares greedy policies
                    greedy = cfg.model_copy(update={"serving": cfg.serving.model_copy(update={
                        "rollouts": cfg.serving.rollouts.model_copy(
                            update={"explore_share": 0.0})})})
                    ray.get([o.set_pool.remote(greedy.model_dump(mode="json"))
                             for o in session.orchestrators])
                versions = {"continual": promoted[0], "frozen": frozen}
                if args.window_mode == "side-by-side":
                    # both arms at once on one pool, each at half the live rate (the pool's
                    # offered load stays the live phase's), every query sent to each version
                    set_active(reg, frozen, info)
                    wait_serving(session.orchestrator, frozen)
                    wl = WorkloadSpec(args.rate / 2, args.window, split=WINDOW_SPLIT,
                                      seed=args.seed + 1, budget_range_s=scaled, tasks=tasks)
                    arms = asyncio.run(drive(session.url, wl, {
                        name: {"policy_version": v} for name, v in versions.items()}))
                else:  # one arm after the other, each at the live rate
                    wl = WorkloadSpec(args.rate, args.window, split=WINDOW_SPLIT,
                                      seed=args.seed + 1, budget_range_s=scaled, tasks=tasks)
                    for name, version in versions.items():
                        set_active(reg, version, info)
                        wait_serving(session.orchestrator, version)
                        arms |= asyncio.run(drive(session.url, wl, {name: {}}))
                seen = {(r["task"], r["item_id"]) for r in live}
                doc["window"] = {
                    "queries": args.window, "seed": args.seed + 1, "mode": args.window_mode,
                    "live_split": LIVE_SPLIT, "split": WINDOW_SPLIT,
                    "items_seen_live": sum((r["task"], r["item_id"]) in seen
                                           for r in arms["frozen"]),
                    "goodput": paired(goodput(arms["continual"]), goodput(arms["frozen"])),
                    "slo_attainment": paired(
                        *(np.array([float(r["http_status"] == 200 and bool(r.get(
                            "within_budget"))) for r in arms[a]]) for a in arms)),
                    "not_200": {a: sum(r["http_status"] != 200 for r in arms[a]) for a in arms},
                    "versions_served": {a: dict(collections.Counter(
                        str(r.get("policy_version")) for r in arms[a])) for a in arms}}
        finally:
            if learner is not None and learner.poll() is None:
                os.killpg(learner.pid, signal.SIGKILL)
            session.stop()
    st = reg.state()
    doc["registry_log"] = st.log
    doc["learner_metrics"] = [json.loads(x) for x in (out / "learner" / "metrics.jsonl")
                              .read_text().splitlines()] \
        if (out / "learner" / "metrics.jsonl").exists() else []
    (out / "results.json").write_text(json.dumps(doc, indent=2, default=float))
    (out / "queries.json").write_text(json.dumps({"live": live, **arms}, default=float))
    plot(out, live, st.log, arms, t_live, doc["live_s"], doc.get("window"),
         doc["learner_metrics"])
    print(json.dumps({k: doc.get(k) for k in ("promoted", "time_to_first_promotion_s",
                                              "live_goodput_by_version", "window")},
                     indent=2, default=float))


if __name__ == "__main__":
    main()
