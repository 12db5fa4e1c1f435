"""Commands of the serving plane: serve a pool on Ray Serve, send one query, bounded load, the
demo, and the serving overhead."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from inframind_ray.cli.common import budget_range, console, listed
from inframind_ray.config import ServingConfig
from inframind_ray.errors import ConfigError, InframindError
from inframind_ray.serving.loadgen import DemoSpec, LoadSpec

_SERVING = ServingConfig()
DEFAULT_URL = f"http://{_SERVING.host}:{_SERVING.port}"


SCHEDULING_HELP = ("queue order of every replica (and vLLM's priority): edf, fcfs, plas, atlas "
                   "(default: the deployment file's engine.scheduling)")


def _serving_cfg(config: Path, scheduling: str | None = None):  # noqa: ANN202
    """The deployment file, its replicas' queue order overridden by ``scheduling``."""
    from inframind_ray.config import load_pool
    from inframind_ray.core.request_queue import SchedulingPolicy

    cfg = load_pool(config)
    if scheduling is None:
        return cfg
    known = [p.value for p in SchedulingPolicy]
    if scheduling not in known:
        raise ConfigError("scheduling", f"unknown {scheduling!r}; expected one of "
                          f"{', '.join(known)}")
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(
        update={"scheduling": scheduling})})


def serve(
    config: Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")] = Path(
        "deployments/twin_pool.yaml"),
    address: Annotated[str | None, typer.Option(help="Ray address (default: start local)")] = None,
    scheduling: Annotated[str | None, typer.Option(help=SCHEDULING_HELP)] = None,
) -> None:
    """Serve a pool on Ray Serve (orchestrator actor + one deployment per model + HTTP API)."""
    import signal
    import threading

    from inframind_ray.serving.app import start

    cfg = _serving_cfg(config, scheduling)
    with console.status("starting Ray, the orchestrator and the model deployments"):
        session = start(cfg, address=address)
    console.print(f"serving {cfg.name} ({len(cfg.models)} models) at {session.url}  "
                  "(POST /v1/queries, POST /v1/chat/completions, GET /v1/state); Ctrl-C stops")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    with console.status("stopping"):
        session.stop()


def serve_config(
    config: Annotated[Path, typer.Option("-c", "--config", help="pool or deployment YAML")] = Path(
        "deployments/twin_pool.yaml"),
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write here (default: stdout)")
                   ] = None,
) -> None:
    """Serve's own config file for a pool, for `serve deploy FILE` / `serve run FILE` on any Ray
    cluster: one application per model and the HTTP ingress (which starts the orchestrator)."""
    import yaml

    from inframind_ray.serving.deploy import serve_config as build

    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    text = (f"# Serve config of pool {config} (inframind serve-config); deploy with\n"
            f"#   serve deploy FILE   (a running Ray cluster with its dashboard)\n"
            + yaml.dump(build(_serving_cfg(config)), Dumper=_NoAliases, sort_keys=False))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        console.print(f"wrote {out}")


def kuberay(
    config: Annotated[Path, typer.Option("-c", "--config", help="pool or deployment YAML")] = Path(
        "deployments/vllm_gpu_pool.yaml"),
    image: Annotated[str, typer.Option(help="container image with Ray 2.60 and inframind_ray "
                                            "installed")] = "inframind-ray:latest",
    name: Annotated[str, typer.Option(help="the RayService's name")] = "inframind",
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs of a worker pod")] = 8,
    cpus_per_node: Annotated[int, typer.Option(min=1, help="CPUs of a worker pod")] = 32,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write here (default: stdout)")
                   ] = None,
) -> None:
    """A KubeRay RayService manifest for a pool (`kubectl apply -f FILE`): the Serve config of
    `serve-config` and a Ray cluster with a worker group per placement resource of the pool."""
    import yaml

    from inframind_ray.serving.kuberay import rayservice

    class _Blocks(yaml.SafeDumper):  # the embedded Serve config as a readable `|` block
        pass

    _Blocks.add_representer(str, lambda d, v: d.represent_scalar(
        "tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))
    manifest = rayservice(_serving_cfg(config), name=name, image=image,
                          gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node)
    text = f"# RayService of pool {config} (inframind kuberay)\n" + yaml.dump(
        manifest, Dumper=_Blocks, sort_keys=False)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        console.print(f"wrote {out}")


def _post(url: str, path: str, body: dict, api_key: str | None) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + path, json.dumps(body).encode(), headers)

    def parse(code: int, raw: bytes) -> tuple[int, dict]:
        try:
            return code, json.loads(raw or b"{}")
        except json.JSONDecodeError:
            text = raw[:200].decode(errors="replace").replace("\n", " ")
            raise InframindError(f"HTTP {code}: not a JSON reply: {text!r}") from None

    try:
        with urllib.request.urlopen(req, timeout=body.get("budget_s", 60) + 30) as r:
            return parse(r.status, r.read())
    except urllib.error.HTTPError as e:
        return parse(e.code, e.read())
    except urllib.error.URLError as e:
        raise ConfigError("url", f"cannot reach {url}: {e.reason}") from None


def query(
    text: Annotated[str, typer.Argument(help="the query (may be empty with --item-id)")] = "",
    item_id: Annotated[int | None, typer.Option(help="item id within --task (graded)")] = None,
    task: Annotated[str | None, typer.Option(
        help="task family: mmlu_pro (default with --item-id), gsm8k, math, humaneval, mbpp, "
             "or free")] = None,
    reference: Annotated[str | None, typer.Option(
        help="grade a free-text query against this answer (with --task gsm8k, math, mmlu_pro "
             "or free)")] = None,
    budget: Annotated[float, typer.Option(help="latency budget, seconds")] = 60.0,
    policy: Annotated[str | None, typer.Option(help="policy for this query")] = None,
    url: Annotated[str, typer.Option(help="API base URL")] = DEFAULT_URL,
    api_key: Annotated[str | None, typer.Option(envvar="INFRAMIND_API_KEY")] = None,
) -> None:
    """Send one query to a running service and show the answer and its per-step trace."""
    body = {"query": text or None, "item_id": item_id, "budget_s": budget}
    if task:
        body["task"] = task
    if reference:
        body["reference"] = reference
    if policy:
        body["policy"] = policy
    status, out = _post(url, "/v1/queries", body, api_key)
    if status != 200:
        raise InframindError(f"HTTP {status}: {out.get('error', out)}")
    console.print(f"[bold]{out['answer'] or '-'}[/bold]  correct={out['correct']}  "
                  f"latency={out['latency_s']:.2f}s / budget {out['budget_s']:.0f}s  "
                  f"plan={out['plan']['topology']} k={out['plan']['k']}  policy={out['policy']}")
    for s in out["steps"]:
        console.print(f"  node {s['node']} {s['role']:10s} {s['model']:16s} {s['strategy']:9s} "
                      f"{s['status']:8s} {s['start_s']:7.2f}s -> {s['end_s']:7.2f}s")


def load(
    rate: Annotated[float, typer.Option(help="arrival rate, req/min (Poisson)")] = (
        LoadSpec.rate_per_min),
    duration: Annotated[float, typer.Option(help="seconds of arrivals")] = LoadSpec.duration_s,
    policy: Annotated[str | None, typer.Option(help="policy to request")] = LoadSpec.policy,
    seed: Annotated[int, typer.Option()] = LoadSpec.seed,
    mix: Annotated[str, typer.Option(
        help="task families and shares, e.g. gsm8k=0.4,mmlu_pro=0.3,math=0.1,humaneval=0.1,"
             "mbpp=0.1 (bench --mix syntax)")] = "mmlu_pro",
    url: Annotated[str, typer.Option(help="API base URL (loopback only)")] = DEFAULT_URL,
    out: Annotated[Path | None, typer.Option(help="write the summary JSON here")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="INFRAMIND_API_KEY")] = None,
) -> None:
    """Bounded Poisson load of test-split items (MMLU-Pro, or a mix of task families) against
    the HTTP API (loopback only)."""
    import asyncio
    import json

    from inframind_ray.serving.loadgen import run_load
    from inframind_ray.tasks.registry import parse_mix

    spec = LoadSpec(rate, duration, seed, policy, tasks=tuple(parse_mix(mix).items()))
    with console.status(f"{rate:g} req/min for {duration:g} s"):
        res = asyncio.run(run_load(url, spec, api_key=api_key))
    summary = res.summary()
    console.print(summary)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "records": res.records}, indent=1,
                                  default=float))


def calibrate(
    model: Annotated[str, typer.Option(help="the served pool model to calibrate")],
    tasks: Annotated[str, typer.Option(help="task families, comma-separated")] = (
        "mmlu_pro,gsm8k,math,humaneval,mbpp"),
    per_family: Annotated[int, typer.Option(
        help="validation items per family (distinct, seeded)")] = 20,
    budget: Annotated[float, typer.Option(help="latency budget per query, seconds")] = 300.0,
    concurrency: Annotated[int, typer.Option(help="queries in flight at most")] = 4,
    seed: Annotated[int, typer.Option(help="seed of the item sample")] = 0,
    url: Annotated[str, typer.Option(help="API base URL (loopback only)")] = DEFAULT_URL,
    out: Annotated[Path, typer.Option(help="card folder: writes OUT/MODEL.yaml and "
                                      "OUT/MODEL.records.json")] = Path("runs/cards"),
    api_key: Annotated[str | None, typer.Option(envvar="INFRAMIND_API_KEY")] = None,
) -> None:
    """Measure a served model's card: validation items of each task family sent to that model
    alone (policy pinned:MODEL, step by step), graded by the families' real graders; writes its
    accuracy (95 % interval) and output-length priors per family."""
    import asyncio
    import json

    import yaml
    from rich.table import Table

    from inframind_ray.serving.calibrate import CalibrationSpec, run_calibration

    spec = CalibrationSpec(model, tuple(t.strip() for t in tasks.split(",") if t.strip()),
                           per_family, seed, budget, concurrency)
    spec.validate()
    with console.status(f"calibrating {model}: {len(spec.items())} queries"):
        doc, records = asyncio.run(run_calibration(url, spec, api_key))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{model}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (out / f"{model}.records.json").write_text(json.dumps(records, indent=1))
    t = Table(title=f"card of {model} ({spec.split} split, {per_family} items per family)")
    for col in ("family", "n", "answered", "accuracy", "95 % interval", "tokens mean", "p98"):
        t.add_column(col, justify="left" if col == "family" else "right")
    for name, f in doc["families"].items():
        lo, hi = f["accuracy_ci95"]
        t.add_row(name, str(f["n"]), str(f["answered"]), f"{f['accuracy']:.3f}",
                  f"{lo:.3f}-{hi:.3f}", str(f["output_tokens_mean"]), str(f["output_tokens_p98"]))
    console.print(t)
    console.print(f"wrote {out}/{model}.yaml")


def demo(
    config: Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")] = Path(
        "deployments/twin_pool.yaml"),
    low: Annotated[float, typer.Option(help="low rate, req/min")] = DemoSpec.low_rate,
    high: Annotated[float, typer.Option(help="high rate, req/min")] = DemoSpec.high_rate,
    low_duration: Annotated[float, typer.Option(help="seconds of arrivals, low rate")] = (
        DemoSpec.low_duration_s),
    high_duration: Annotated[float, typer.Option(help="seconds of arrivals, high rate")] = (
        DemoSpec.high_duration_s),
    policies: Annotated[str, typer.Option(help="comma-separated policies to compare")] = listed(
        DemoSpec.policies),
    budget: Annotated[str, typer.Option(help="latency budget range MIN,MAX seconds")] = listed(
        DemoSpec.budget_range_s),
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/demo-serve"),
    scheduling: Annotated[str | None, typer.Option(help=SCHEDULING_HELP)] = None,
) -> None:
    """Start local Ray, serve the twin pool, load it at a low and a high rate through the HTTP
    API for each policy, print the comparison, shut down."""
    import asyncio
    import json

    from rich.table import Table

    from inframind_ray.serving.app import start
    from inframind_ray.serving.loadgen import run_load

    lohi = budget_range(budget)
    cfg = _serving_cfg(config, scheduling)
    with console.status("starting Ray, the orchestrator and the model deployments"):
        session = start(cfg)
    rows = []
    try:
        for rate, duration in ((low, low_duration), (high, high_duration)):
            for pol in policies.split(","):
                with console.status(f"{pol}: {rate:g} req/min for {duration:g} s"):
                    spec = LoadSpec(rate, duration, policy=pol, budget_range_s=lohi)
                    res = asyncio.run(run_load(session.url, spec))
                rows.append(res.summary())
                console.print(f"  done: {pol} @ {rate:g} req/min -> goodput "
                              f"{rows[-1]['goodput']:.3f}, SLO {rows[-1]['slo_attainment']:.3f}")
    finally:
        with console.status("stopping"):
            session.stop()
    t = Table(title=f"demo: {cfg.name} on Ray Serve (wall clock, HTTP API, budgets "
                    f"{lohi[0]:g}-{lohi[1]:g} s, {cfg.engine.scheduling} queues)")
    for c in ("policy", "rate/min", "sent", "200", "429/503", "goodput", "SLO", "accuracy",
              "p50 s", "p95 s", "calls/q"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["policy"], f"{r['rate_per_min']:g}", str(r["sent"]), str(r["http_200"]),
                  f"{r['http_429']}/{r['http_503']}", f"{r['goodput']:.3f}",
                  f"{r['slo_attainment']:.3f}", f"{r['accuracy']:.3f}",
                  f"{r['latency_p50_s']:.2f}", f"{r['latency_p95_s']:.2f}",
                  f"{r['calls_per_query']:.2f}")
    console.print(t)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(rows, indent=2))
    console.print(f"wrote {out}/demo.json")


def overhead(
    config: Annotated[Path, typer.Option("-c", "--config", help="zero-latency pool YAML")] = Path(
        "deployments/echo_pool.yaml"),
    n: Annotated[int, typer.Option(help="measured pairs (after 20 warm-up)")] = 300,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/overhead"),
    rollouts: Annotated[bool, typer.Option(help="also the learned policy's agent steps with "
                                           "rollout recording off vs on")] = True,
) -> None:
    """Side by side: a bare deployment-handle hop vs an orchestrated agent step (zero-latency
    engine), and the cost of recording rollouts per agent step; writes OUT/overhead.json."""
    import json

    import ray

    from inframind_ray.serving.app import start

    cfg = _serving_cfg(config)
    if n < 10:
        raise ConfigError("n", "must be >= 10")
    with console.status("starting the echo pool"):
        session = start(cfg)
    try:
        with console.status(f"measuring {n} hop/step pairs"):
            res = ray.get(session.orchestrator.measure_overhead.remote(n, cfg.models[0].name,
                                                                      rollouts=rollouts))
    finally:
        session.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(res, indent=2))
    console.print(res)
    console.print(f"wrote {out}/overhead.json")
