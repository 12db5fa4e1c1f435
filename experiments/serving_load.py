"""Load measurements of the serving plane on a real local Ray cluster with Serve (issue 21),
loopback only, every loop bounded. One subcommand per measurement; each prints one JSON summary
(and writes it with ``--out``):

    overload          offered load FACTOR x the pool's capacity for DURATION s: refusals
                      (429/503 with Retry-After) and their client latency, admitted queries'
                      SLO attainment, RSS of every process before / during / after
    kill-replicas     steady load; one replica of each model killed in turn: queries lost,
                      share answered within budget, time until the model is back in the
                      orchestrator's view
    kill-orchestrator steady load; the orchestrator killed: in-flight queries' answers, time
                      until a new query is answered
    serve-deploy      `ray start` + `inframind serve-config` + `serve deploy` on a fresh cluster
                      (own temp dir and ports) and one query answered
    twin-margins      twin cells with the admission rule off, at margin 0 and 0.5
    bench-vs-served   the same workload (items, budgets, Poisson arrivals) served and in the
                      twin (`inframind bench`'s runner) on a pool with two replicas of its
                      strongest model: goodput side by side

    PYTHONPATH=$PWD .venv/bin/python experiments/serving_load.py overload --out runs/x.json

The pool is ``--pool`` (default: the shipped ``default`` twin pool) served on ``--port``;
capacity is the pool's measured capacity in req/min (docs/pools.md: 362 for ``default`` on
MMLU-Pro). Only processes this script started are ended, by their ids.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import aiohttp
import numpy as np
import psutil

from inframind_ray.config import AdaptiveInflightConfig, PoolConfig, load_pool
from inframind_ray.serving.loadgen import require_loopback, stamp
from inframind_ray.tasks.workload import WorkloadSpec, arrival_times, budgets, sample_task_items

MAX_QUERIES = 5_000  # every load loop is bounded by this and by its duration


# ---------------------------------------------------------------------------- the pool
def pool_cfg(args: argparse.Namespace, replicas: dict[str, int] | None = None) -> PoolConfig:
    """The pool to serve: its own port and records folder, no embedding model (CPU)."""
    cfg = load_pool(args.pool)
    models = [m.model_copy(update={"replicas": (replicas or {}).get(m.name, m.replicas)})
              for m in cfg.models]
    rec = tempfile.mkdtemp(prefix="inframind-load-records-")
    extra = {} if args.max_inflight is None else {"max_inflight_queries": args.max_inflight}
    if args.request_start:
        extra["request_start_header"] = True
    if args.adaptive:
        extra["adaptive_inflight"] = AdaptiveInflightConfig()
    if args.degrade:
        cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={
            "on_deadline": "degrade"})})
    return cfg.model_copy(update={"models": models, "serving": cfg.serving.model_copy(update={
        "port": args.port, "records_dir": rec, "embed": False,
        "metrics_export_port": None, **extra})})


def start(cfg: PoolConfig):  # noqa: ANN201 - serving.app.Session
    from inframind_ray.serving.app import start as serve_start

    return serve_start(cfg)


def model_state(session) -> dict:  # noqa: ANN001
    import ray

    return ray.get(session.orchestrator.state.remote(), timeout=30)["models"]


# ---------------------------------------------------------------------------- load
class Load:
    """Poisson arrivals of MMLU-Pro test items at ``rate_per_min``, ``rate x duration_s`` of them,
    each
    POSTed to /v1/queries; per request its send time, status, client latency, Retry-After and
    (answered) within-budget. Bounded: MAX_QUERIES, the duration, then ``drain_s``."""

    def __init__(self, url: str, rate_per_min: float, duration_s: float, seed: int,
                 budget: tuple[float, float], policy: str | None = None,
                 drain_s: float = 120.0) -> None:
        require_loopback(url)
        self.url, self.rate, self.duration_s, self.policy = url, rate_per_min, duration_s, policy
        n = min(MAX_QUERIES, max(1, round(rate_per_min / 60 * duration_s)))
        self.spec = WorkloadSpec(rate_per_min, n, budget_range_s=budget, seed=seed)
        self.items, self.budgets = sample_task_items(self.spec), budgets(self.spec)
        self.times = arrival_times(self.spec)
        self.drain_s, self.records, self.t0 = drain_s, [], 0.0

    async def _one(self, session: aiohttp.ClientSession, i: int) -> None:
        task, item = self.items[i]
        body = {"item_id": item, "budget_s": float(self.budgets[i])}
        if self.policy:
            body["policy"] = self.policy
        sent = time.monotonic()
        rec = {"i": i, "sent_s": sent - self.t0, "budget_s": body["budget_s"], "status": 0,
               "error": "no answer before the run ended (lost)"}
        try:
            async with session.post(f"{self.url}/v1/queries", json=body, headers=stamp()) as r:
                raw = await r.text()
                try:
                    data = json.loads(raw)
                except ValueError:  # Serve's own refusals (backpressure) are plain text
                    data = {"error": raw.strip()[:200]}
                rec = {"i": i, "sent_s": sent - self.t0, "budget_s": body["budget_s"],
                       "status": r.status, "client_s": time.monotonic() - sent,
                       "retry_after": r.headers.get("Retry-After"),
                       "error": data.get("error") if r.status != 200 else None}
                if r.status == 200:
                    rec.update(within_budget=bool(data["within_budget"]),
                               correct=bool(data["correct"]), latency_s=data["latency_s"],
                               degraded=any(st.get("degraded_from") for st in data["steps"]))
        except (aiohttp.ClientError, TimeoutError) as e:
            rec["error"] = f"lost: {type(e).__name__}: {e}"
        finally:
            self.records.append(rec)

    async def run(self, during=None) -> None:  # noqa: ANN001 - async callback(load)
        """Send, run ``during(self)`` alongside, wait for the answers (bounded)."""
        self.t0 = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=self.spec.budget_range_s[1] + self.drain_s)
        async with aiohttp.ClientSession(timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=0)) as s:
            side = asyncio.create_task(during(self)) if during else None
            tasks = []
            for i, t in enumerate(self.times):  # all n: the twin runs the same n (bench-vs-served)
                await asyncio.sleep(max(0.0, self.t0 + t - time.monotonic()))
                tasks.append(asyncio.create_task(self._one(s, i)))
            if side:
                await side
            await asyncio.wait(tasks, timeout=self.spec.budget_range_s[1] + self.drain_s)
            for t in tasks:
                t.cancel()

    def summary(self, since_s: float = 0.0, until_s: float = math.inf) -> dict:
        """Counts by status, lost, share answered within budget (of all sent), admitted
        queries' SLO attainment, refusal latency and Retry-After presence (of the queries sent
        in [since_s, until_s))."""
        r = [x for x in self.records if since_s <= x["sent_s"] < until_s]
        ok = [x for x in r if x["status"] == 200]
        refused = [x for x in r if x["status"] in (429, 503)]
        lat = [x["client_s"] for x in refused]
        done = sorted(x["sent_s"] + x["client_s"] for x in ok)
        ok_lat = [x["client_s"] for x in ok]
        codes: dict[str, int] = {}
        for x in r:
            codes[str(x["status"])] = codes.get(str(x["status"]), 0) + 1
        return {
            "sent": len(r), "by_status": codes,
            "offered_per_s": round(len(r) / min(self.duration_s, until_s - since_s), 2),
            "lost": sum(x["status"] == 0 for x in r),
            "within_budget_of_sent": round(sum(x.get("within_budget", False) for x in r)
                                           / max(1, len(r)), 4),
            "admitted_slo_attainment": round(sum(x["within_budget"] for x in ok)
                                             / max(1, len(ok)), 4),
            # answered (status ok) within the budget counted from the client's send
            "admitted_within_budget_client": round(sum(
                x["within_budget"] and x["client_s"] <= x["budget_s"] for x in ok)
                / max(1, len(ok)), 4),
            "goodput": round(sum(x["within_budget"] and x["correct"] for x in ok)
                             / max(1, len(r)), 4),
            "admitted_accuracy": round(sum(x["correct"] for x in ok) / max(1, len(ok)), 4),
            "degraded": sum(x.get("degraded", False) for x in ok),
            "degraded_correct": sum(x.get("degraded", False) and x["correct"] for x in ok),
            "refused": len(refused),
            "refused_with_retry_after": sum(bool(x["retry_after"]) for x in refused),
            "refusal_p50_ms": round(1e3 * float(np.percentile(lat, 50)), 1) if lat else None,
            "refusal_p99_ms": round(1e3 * float(np.percentile(lat, 99)), 1) if lat else None,
            "answered_per_s": (round((len(done) - 1) / (done[-1] - done[0]), 2)
                               if len(done) > 1 and done[-1] > done[0] else None),
            "admitted_p50_s": round(float(np.percentile(ok_lat, 50)), 2) if ok_lat else None,
            "admitted_p99_s": round(float(np.percentile(ok_lat, 99)), 2) if ok_lat else None,
            "refusal_reasons": sorted({re.sub(r"[0-9][0-9.e+]*", "#", str(x["error"]))
                                       for x in refused}),
        }


# ---------------------------------------------------------------------------- memory
def _ray_processes() -> dict[int, str]:
    """This user's Ray processes (and this driver): pid -> a short name."""
    me, out = os.getuid(), {os.getpid(): "driver"}
    for p in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            if p.info["uids"].real != me or not p.info["cmdline"]:
                continue
            cmd = " ".join(p.info["cmdline"])
            if cmd.startswith("ray::") or "ray/core/src" in cmd or "gcs_server" in cmd \
                    or "raylet" in cmd or "dashboard" in cmd and "ray" in cmd:
                out[p.info["pid"]] = cmd.split()[0][:60]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


class RssSampler:
    """RSS (MiB) of the cluster's processes every ``period_s`` on a thread; per pid its first,
    highest and last sample. The cluster must be this script's own."""

    def __init__(self, pids: dict[int, str], period_s: float = 1.0) -> None:
        self.pids, self.period_s = pids, period_s
        self.first: dict[int, float] = {}
        self.peak: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict[int, float]:
        out = {}
        for pid in self.pids:
            try:
                out[pid] = psutil.Process(pid).memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                continue
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pid, mb in self.sample().items():
                self.first.setdefault(pid, mb)
                self.peak[pid] = max(self.peak.get(pid, 0.0), mb)
                self.last[pid] = mb
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=10)

    def report(self, before: dict[int, float], after: dict[int, float]) -> dict:
        """Per process: before, peak during, after (MiB); the largest growth."""
        rows = {f"{self.pids[p]}[{p}]": {"before": round(before.get(p, 0), 1),
                                         "peak": round(self.peak.get(p, 0), 1),
                                         "after": round(after.get(p, 0), 1)}
                for p in self.pids if p in self.peak}
        growth = {k: round(v["after"] - v["before"], 1) for k, v in rows.items()}
        top = sorted(rows.items(), key=lambda kv: -kv[1]["peak"])[:8]
        return {"processes": len(rows),
                "total_before_mib": round(sum(v["before"] for v in rows.values()), 1),
                "total_peak_mib": round(sum(v["peak"] for v in rows.values()), 1),
                "total_after_mib": round(sum(v["after"] for v in rows.values()), 1),
                "max_growth_mib": max(growth.items(), key=lambda kv: kv[1]) if growth else None,
                "largest": dict(top)}


# ---------------------------------------------------------------------------- measurements
def _health_summary(polls: list[dict]) -> dict:
    """Status counts and client latency (ms, p50 / p99 / max) of the /healthz polls."""
    ms = np.sort([1000 * p["client_s"] for p in polls if "client_s" in p])
    counts = Counter(str(p["status"]) for p in polls)
    q = (lambda x: round(float(np.quantile(ms, x)), 1)) if len(ms) else (lambda x: None)
    return {"polls": len(polls), "status": dict(counts), "p50_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": q(1.0)}


def overload(args: argparse.Namespace) -> dict:
    cfg = pool_cfg(args)
    session = start(cfg)
    try:
        pids = _ray_processes()
        sampler = RssSampler(pids)
        time.sleep(2.0)
        before = sampler.sample()
        rate = args.factor * args.capacity
        load = Load(session.url, rate, args.duration, args.seed, tuple(args.budget),
                    policy=args.load_policy, drain_s=60.0)
        bound: list[dict] = []  # the ingress's bound and queries in flight, every 2 s
        health: list[dict] = []  # GET /healthz every 0.5 s: status and client latency

        async def poll(ld: Load) -> None:
            end = time.monotonic() + args.duration + 30.0
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
                n = 0
                while time.monotonic() < end:
                    t = round(time.monotonic() - ld.t0, 1)
                    sent = time.monotonic()
                    try:
                        async with s.get(f"{ld.url}/healthz") as r:
                            await r.read()
                        health.append({"t_s": t, "status": r.status,
                                       "client_s": time.monotonic() - sent})
                    except (aiohttp.ClientError, TimeoutError) as e:
                        health.append({"t_s": t, "status": 0, "error": type(e).__name__})
                    if n % 4 == 0:
                        try:
                            async with s.get(f"{ld.url}/v1/state") as r:
                                st = await r.json() if r.status == 200 else {}
                            bound.append({"t_s": t, "status": r.status,
                                          "limit": st.get("ingress_limit"),
                                          "inflight": st.get("ingress_inflight")})
                        except (aiohttp.ClientError, TimeoutError) as e:
                            bound.append({"t_s": t, "error": type(e).__name__})
                    n += 1
                    await asyncio.sleep(0.5)

        with sampler:
            asyncio.run(load.run(poll))
        time.sleep(10.0)  # after: queues drained, the load gone
        after = sampler.sample()
        write_records(args.out, load)
        return {"measurement": "overload", "policy": args.load_policy or "default",
                "max_inflight_queries": cfg.serving.max_inflight_queries,
                "request_start_header": cfg.serving.request_start_header,
                "on_deadline": cfg.engine.on_deadline,
                "adaptive_inflight": (None if cfg.serving.adaptive_inflight is None
                                      else cfg.serving.adaptive_inflight.model_dump()),
                "rate_per_min": rate, "factor": args.factor,
                "capacity_per_min": args.capacity, "duration_s": args.duration,
                "load": load.summary(), "rss": sampler.report(before, after),
                "ingress_bound": bound, "healthz": _health_summary(health)}
    finally:
        session.stop()


def write_records(out: Path | None, load: Load) -> None:
    """Every request (send time, status, client latency, a refusal's reason) beside ``out``."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".records.json").write_text(json.dumps(
        [{k: x.get(k) for k in ("sent_s", "status", "client_s", "budget_s", "within_budget",
                                 "correct", "degraded", "error")}
         for x in load.records]))


def _replica_names(model: str) -> list[str]:
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if "SERVE_REPLICA" in a["name"] and f"model:{model}#" in a["name"])


def kill_replicas(args: argparse.Namespace) -> dict:
    import ray

    cfg = pool_cfg(args, {m.name: args.replicas for m in load_pool(args.pool).models})
    session = start(cfg)
    models = [m.name for m in cfg.models]
    kills: list[dict] = []
    try:
        end = time.time() + 60
        while time.time() < end and any(model_state(session)[m]["replicas"] < args.replicas
                                        for m in models):
            time.sleep(0.25)
        rate = args.factor * args.capacity
        duration = args.warmup + len(models) * args.every
        load = Load(session.url, rate, duration, args.seed, tuple(args.budget),
                    policy=args.load_policy)

        async def kill_each(ld: Load) -> None:
            await asyncio.sleep(args.warmup)
            for m in ([] if args.control else models):
                t_next = time.monotonic() + args.every
                names = _replica_names(m)
                victim = names[0]
                dead_id = victim.rsplit("#", 1)[-1]
                t_kill = time.monotonic()
                ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
                row = {"model": m, "killed": dead_id, "at_s": round(t_kill - ld.t0, 2)}
                new_id, t_up, t_view, t_report = None, None, None, None
                while time.monotonic() - t_kill < args.every + 60:
                    if new_id is None:
                        fresh = [n for n in _replica_names(m) if n not in names]
                        if fresh:
                            new_id, t_up = fresh[0].rsplit("#", 1)[-1], time.monotonic()
                    st = await asyncio.to_thread(model_state, session)
                    v = st[m]
                    if new_id and t_report is None and new_id in v["replica_ids"]:
                        t_report = time.monotonic()
                    if (new_id and new_id in v["replica_ids"] and dead_id not in v["replica_ids"]
                            and v["available"] and not v["stale"]
                            and v["replicas"] == args.replicas):
                        t_view = time.monotonic()
                        break
                    await asyncio.sleep(0.1)
                row.update(
                    replacement=new_id,
                    replacement_actor_s=None if t_up is None else round(t_up - t_kill, 2),
                    replacement_reported_s=(None if t_report is None
                                            else round(t_report - t_kill, 2)),
                    back_in_view_s=None if t_view is None else round(t_view - t_kill, 2),
                    view_after_report_s=(None if t_view is None or t_report is None
                                         else round(t_view - t_report, 2)),
                    view_after_actor_s=(None if t_view is None or t_up is None
                                        else round(t_view - t_up, 2)))
                kills.append(row)
                await asyncio.sleep(max(0.0, t_next - time.monotonic()))

        asyncio.run(load.run(kill_each))
        write_records(args.out, load)
        counters = ray.get(session.orchestrator.state.remote())["counters"]
        windows = {f"{a:g}-{b:g}s": load.summary(a, b) for a, b in zip(
            [0.0, *[args.warmup + i * args.every for i in range(len(models))]],
            [args.warmup + i * args.every for i in range(len(models) + 1)], strict=True)}
        return {"measurement": "kill-replicas", "policy": args.load_policy or "default",
                "rate_per_min": rate, "factor": args.factor,
                "control_no_kills": args.control, "replicas_per_model": args.replicas,
                "kills": kills, "counters": counters, "load": load.summary(),
                "by_window_sent": {k: {x: v[x] for x in ("sent", "lost", "within_budget_of_sent",
                                                       "goodput")}
                                   for k, v in windows.items()}}
    finally:
        session.stop()


def kill_orchestrator(args: argparse.Namespace) -> dict:
    import ray

    cfg = pool_cfg(args)
    session = start(cfg)
    marks: dict[str, float] = {}
    try:
        rate = args.factor * args.capacity
        load = Load(session.url, rate, args.warmup + args.after, args.seed, tuple(args.budget),
                    policy=args.load_policy)

        async def kill(ld: Load) -> None:
            await asyncio.sleep(args.warmup)
            marks["kill_s"] = time.monotonic() - ld.t0
            ray.kill(session.orchestrator, no_restart=False)

        asyncio.run(load.run(kill))
        k = marks["kill_s"]
        inflight = [x for x in load.records if x["sent_s"] < k
                    and x["sent_s"] + x.get("client_s", 1e9) > k]
        new_ok = sorted(x["sent_s"] + x["client_s"] - k for x in load.records
                        if x["sent_s"] >= k and x["status"] == 200)
        first_sent_ok = min((x["sent_s"] - k for x in load.records
                             if x["sent_s"] >= k and x["status"] == 200), default=None)
        return {"measurement": "kill-orchestrator", "policy": args.load_policy or "default",
                "rate_per_min": rate,
                "kill_at_s": round(k, 2),
                "inflight_at_kill": len(inflight),
                "inflight_statuses": sorted({x["status"] for x in inflight}),
                "first_new_answer_after_kill_s": round(new_ok[0], 2) if new_ok else None,
                "first_answered_query_sent_after_kill_s": (None if first_sent_ok is None
                                                           else round(first_sent_ok, 2)),
                "after_kill": load.summary(since_s=k), "load": load.summary()}
    finally:
        session.stop()


def _cluster_pids(temp_dir: str) -> list[int]:
    """Processes of the cluster started under ``temp_dir`` and their descendants (ours)."""
    roots = []
    for p in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            if p.info["uids"].real == os.getuid() and temp_dir in " ".join(p.info["cmdline"]
                                                                           or ()):
                roots.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    pids = set()
    for r in roots:
        try:
            pids |= {r.pid, *(c.pid for c in r.children(recursive=True))}
        except psutil.NoSuchProcess:
            continue
    return sorted(pids)


def serve_deploy(args: argparse.Namespace) -> dict:
    """A fresh cluster (own temp dir, ports), the generated Serve config deployed with Serve's
    CLI, one query answered; the cluster's processes ended by pid."""
    import yaml

    venv_bin = Path(sys.executable).parent
    tmp = tempfile.mkdtemp(prefix="imd-")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    pool = yaml.safe_load(Path(args.deploy_pool).read_text())
    pool.setdefault("serving", {}).update(port=args.port, records_dir=f"{tmp}/records",
                                          metrics_export_port=None)
    pool_path = Path(tmp) / "pool.yaml"
    pool_path.write_text(yaml.safe_dump(pool))
    gcs, dash = args.port + 1, args.port + 2
    t: dict[str, float] = {}
    out: dict = {"measurement": "serve-deploy", "pool": args.deploy_pool}

    def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

    t0 = time.monotonic()
    try:
        r = run([str(venv_bin / "ray"), "start", "--head", f"--port={gcs}",
                 f"--dashboard-port={dash}", "--include-dashboard=true", f"--temp-dir={tmp}",
                 "--num-cpus=8", "--disable-usage-stats",
                 f"--ray-client-server-port={args.port + 3}"], 180)
        t["ray_start_s"] = time.monotonic() - t0
        if r.returncode:
            out["error"] = "ray start failed: " + r.stderr[-400:]
            return out
        serve_yaml = Path(tmp) / "serve.yaml"
        r = run([str(venv_bin / "inframind"), "serve-config", "-c", str(pool_path), "-o",
                 str(serve_yaml)], 120)
        if r.returncode:
            out["error"] = "serve-config failed: " + r.stderr[-400:]
            return out
        t1 = time.monotonic()
        r = run([str(venv_bin / "serve"), "deploy", str(serve_yaml), "-a",
                 f"http://127.0.0.1:{dash}"], 180)
        t["serve_deploy_cmd_s"] = time.monotonic() - t1
        if r.returncode:
            out["error"] = "serve deploy failed: " + (r.stderr or r.stdout)[-400:]
            return out
        url = f"http://127.0.0.1:{args.port}/v1/queries"
        body = json.dumps({"item_id": 70, "budget_s": 60}).encode()
        answer, end = None, time.monotonic() + 240
        while time.monotonic() < end:
            try:
                req = urllib.request.Request(url, data=body, method="POST",
                                             headers={"content-type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as resp:
                    answer = json.loads(resp.read())
                    break
            except Exception:  # not up yet: 404 / 503 / refused
                time.sleep(0.5)
        t["first_answer_after_deploy_s"] = time.monotonic() - t1
        out.update(answered=answer is not None,
                   answer=None if answer is None else {k: answer[k] for k in (
                       "status", "correct", "latency_s", "policy")})
        return out
    finally:
        t["total_s"] = time.monotonic() - t0
        out["timings_s"] = {k: round(v, 1) for k, v in t.items()}
        pids = _cluster_pids(tmp)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(3.0)
        for pid in _cluster_pids(tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out["ended_pids"] = len(pids)


def bench_vs_served(args: argparse.Namespace) -> dict:
    """One workload (items, budgets, Poisson arrivals), served and in the twin (as served:
    load snapshots every ``metrics_period_s``, a past load's latency EWMAs), on the pool with
    ``--replicas`` of ``--strongest``, under ``--policy``. Noise: two standard errors of the
    difference of two binomial shares of n queries."""
    from inframind_ray.bench.runner import CellSpec, run_cell

    base = load_pool(args.pool)
    cfg = pool_cfg(args, {args.strongest: args.replicas})
    rate = args.factor * args.capacity
    load = None
    session = start(cfg)
    try:
        load = Load(session.url, rate, args.duration, args.seed, tuple(args.budget),
                    policy=args.policy)
        asyncio.run(load.run())
    finally:
        session.stop()
    served = load.summary()
    n = served["sent"]
    twin_cfg = base.model_copy(update={"models": cfg.models})
    twin = run_cell(CellSpec(twin_cfg, args.policy, load.spec, pool_history=True,
                             metrics_period_s=cfg.serving.metrics_period_s)).summary
    twin = {k: twin.get(k) for k in ("n_queries", "goodput", "slo_attainment", "accuracy",
                                     "latency_p95_s", "call_status_mix", "model_mix")}
    se = float(np.sqrt(max(served["goodput"] * (1 - served["goodput"]), 1e-9) / max(1, n)))
    return {"measurement": "bench-vs-served", "policy": args.policy, "rate_per_min": rate,
            "strongest": args.strongest, "replicas": args.replicas, "queries": n,
            "served": served, "twin": twin,
            "goodput_diff": round(served["goodput"] - twin["goodput"], 4),
            "noise_2se": round(2 * se * np.sqrt(2), 4)}


def twin_margins(args: argparse.Namespace) -> dict:
    """Twin cells (no cluster) with the admission rule off, at margin 0 and at 0.5: the same
    workload per rate (``--rates``, req/min; ``--queries`` each), served-like load view."""
    from inframind_ray.bench.runner import CellSpec, run_cell

    pool, rows = load_pool(args.pool), []
    for rate in args.rates:
        for policy in args.policies.split(","):
            for margin in (None, 0.0, 0.5):
                cfg = pool.model_copy(update={"engine": pool.engine.model_copy(update={
                    "admission_margin": margin})})
                work = WorkloadSpec(rate, args.queries, budget_range_s=tuple(args.budget),
                                    seed=args.seed)
                r = run_cell(CellSpec(cfg, policy, work, metrics_period_s=0.25,
                                      pool_history=True)).summary
                rows.append({"rate_per_min": rate, "policy": policy, "margin": margin,
                             "goodput": r["goodput"], "slo_attainment": r["slo_attainment"],
                             "deadline_calls": r["call_status_mix"].get("deadline", 0.0)})
    return {"measurement": "twin-margins", "pool": args.pool, "queries": args.queries,
            "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measurement", choices=["overload", "kill-replicas", "kill-orchestrator",
                                            "serve-deploy", "bench-vs-served",
                                            "twin-margins"])
    ap.add_argument("--pool", default="default")
    ap.add_argument("--deploy-pool", default="tests/pools/serve_test.yaml")
    ap.add_argument("--port", type=int, default=8871)
    ap.add_argument("--capacity", type=float, default=362.0,
                    help="the pool's capacity, req/min (docs/pools.md)")
    ap.add_argument("--factor", type=float, default=0.5, help="offered load over capacity")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--budget", type=float, nargs=2, default=(20.0, 90.0))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--every", type=float, default=20.0, help="seconds between replica kills")
    ap.add_argument("--after", type=float, default=30.0, help="load after the orchestrator kill")
    ap.add_argument("--strongest", default="llama-3.1-70b")
    ap.add_argument("--control", action="store_true", help="kill-replicas: the same load, no kill")
    ap.add_argument("--policy", default="always-strongest")
    ap.add_argument("--policies", default="always-strongest,infra-heuristic")
    ap.add_argument("--load-policy", default=None,
                    help="overload / kill-*: the policy queries ask for (default: the pool's)")
    ap.add_argument("--rates", type=float, nargs="+", default=(362.0, 724.0))
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--max-inflight", type=int, default=None,
                    help="serving.max_inflight_queries (default: the pool's)")
    ap.add_argument("--adaptive", action="store_true",
                    help="serving.adaptive_inflight with its defaults (the bound steered at run "
                         "time, max_inflight_queries its ceiling)")
    ap.add_argument("--request-start", action="store_true",
                    help="serving.request_start_header: budgets count from the client's send "
                         "(X-Request-Start), the proxy's queue included")
    ap.add_argument("--degrade", action="store_true",
                    help="engine.on_deadline degrade: a call too late for its budget is given "
                         "up for the fastest answer at its reserve point")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    fn = {"overload": overload, "kill-replicas": kill_replicas,
          "kill-orchestrator": kill_orchestrator, "serve-deploy": serve_deploy,
          "bench-vs-served": bench_vs_served, "twin-margins": twin_margins}[args.measurement]
    load1 = os.getloadavg()
    t0 = time.time()
    res = fn(args)
    res["machine"] = {"cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in load1],
                      "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                      "wall_s": round(time.time() - t0, 1),
                      "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0))}
    text = json.dumps(res, indent=1, default=float)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
