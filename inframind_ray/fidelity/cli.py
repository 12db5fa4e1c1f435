"""``inframind twin profile | refit | validate | rescore``: parse the options and delegate (vLLM
is imported only when an engine starts, so ``inframind --help`` stays fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from inframind_ray.errors import ConfigError
from inframind_ray.fidelity.specs import GridSpec, ProfileSpec, ValidateSpec

twin_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Calibrate the twin on a real engine and measure its fidelity.")

ConfigOpt = Annotated[Path, typer.Option("-c", "--config", help="deployment YAML")]
ModelOpt = Annotated[str, typer.Option("--model", help="model name in the deployment file")]
PinOpt = Annotated[bool, typer.Option(
    help="keep this process off the vLLM CPU worker's cores (VLLM_CPU_OMP_THREADS_BIND)")]
V = ValidateSpec  # the defaults of `validate`
ENTRY_HELP = ("requests of the Poisson case that fits the entry delay (busy / idle engine); "
              "0 = none")


def _rate(case: str, note: str = "") -> Any:
    """The option of one case's arrival rate."""
    return typer.Option(help=f"rate of the {case} case, req/min (0 = skip{note})")


def _kv_engine(what: str, unit: str = "") -> Any:
    """An option of the KV-pressure case's engine."""
    return typer.Option(help=f"{what} of the KV-pressure engine{unit}")


def _csv(vals: tuple[float, ...]) -> str:
    """A default tuple as its option text ("60,180,300")."""
    return ",".join(f"{v:g}" for v in vals)


def _ints(text: str, field: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise ConfigError(field, f"expected integers >= 1, got {text!r}")
    return vals


def _range(text: str, field: str) -> tuple[int, int]:
    vals = _ints(text, field)
    if len(vals) != 2 or vals[0] > vals[1]:
        raise ConfigError(field, f"expected LO,HI with LO <= HI, got {text!r}")
    return vals[0], vals[1]


def _floats(text: str, field: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals or min(vals) <= 0:
        raise ConfigError(field, f"expected numbers > 0, got {text!r}")
    return vals


@twin_app.command()
def profile(
    config: ConfigOpt,
    model: ModelOpt,
    out: Annotated[Path | None, typer.Option(
        help="profile JSON (default runs/fidelity/profile-MODEL.json); raw rows go next to it "
             "as .parquet")] = None,
    batches: Annotated[str, typer.Option(help="batch sizes (requests sent at once)")] = _csv(
        GridSpec.batches),
    prompts: Annotated[str, typer.Option(help="prompt lengths, tokens")] = _csv(GridSpec.prompts),
    outputs: Annotated[str, typer.Option(help="output lengths, tokens")] = _csv(GridSpec.outputs),
    repeats: Annotated[int, typer.Option(help="repetitions of the grid")] = GridSpec.repeats,
    prompt_jitter: Annotated[float, typer.Option(
        help="draw each prompt length within +-this fraction of its cell's length, so every "
             "prefill has a new token count as in real traffic (0 = exact lengths)")] = (
        GridSpec.prompt_jitter),
    key: Annotated[str | None, typer.Option(
        help="profile key in the file (default MODEL@HOST-ENGINE)")] = None,
    hardware: Annotated[str | None, typer.Option(
        help="hardware label (default: this machine's CPU model)")] = None,
    num_gpus: Annotated[int, typer.Option(help="GPUs per replica (label only)")] = (
        ProfileSpec.num_gpus),
    pin: PinOpt = ProfileSpec.pin,
    entry_requests: Annotated[int, typer.Option(help=ENTRY_HELP)] = ProfileSpec.entry_requests,
    per_batch: Annotated[bool, typer.Option(
        help="also fit a decode factor per measured batch size (for engines whose step time "
             "is not linear in the batch; docs/fidelity.md)")] = ProfileSpec.per_batch,
) -> None:
    """Drive the served model through a grid of batch sizes and prompt/output lengths, record
    per-request TTFT, TPOT and E2E plus the engine's own metrics, and fit the twin's iteration
    profile (c0, c_prefill, c_decode, c_kv and a per-request front-end delay).

    The engine is the one the deployment file names, started in this process with
    max_num_seqs = the largest batch size.
    """
    grid = GridSpec(_ints(batches, "batches"), _ints(prompts, "prompts"),
                    _ints(outputs, "outputs"), repeats, prompt_jitter)
    if repeats < 1:
        raise ConfigError("repeats", "must be >= 1")
    if not 0 <= prompt_jitter < 1:
        raise ConfigError("prompt-jitter", "must be in [0, 1)")
    from inframind_ray.fidelity.calibrate import profile_model

    profile_model(ProfileSpec(config, model, grid, out=out, key=key, hardware=hardware,
                              num_gpus=num_gpus, pin=pin, entry_requests=entry_requests,
                              per_batch=per_batch))


@twin_app.command()
def refit(
    raw: Annotated[Path, typer.Argument(help="raw rows (.parquet) written by `twin profile`")],
    profile: Annotated[Path, typer.Option(
        "--profile", help="the profile JSON those rows were fitted into (labels, grid)")],
    out: Annotated[Path, typer.Option(help="new profile JSON")],
    per_batch: Annotated[bool, typer.Option(
        help="also fit a decode factor per measured batch size")] = False,
) -> None:
    """Refit a profile from recorded `twin profile` measurements, without an engine (e.g. with
    or without per-batch decode factors). The source profile's entry delay is carried over."""
    from inframind_ray.fidelity.calibrate import refit_profile

    refit_profile(raw, profile, out, per_batch)


@twin_app.command()
def validate(
    config: ConfigOpt,
    model: ModelOpt,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="profile JSON from `twin profile` (or --calibrate)")] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = V.out,
    rates: Annotated[str, typer.Option(help="Poisson rates, req/min (light to saturated)")] = (
        _csv(V.rates)),
    requests: Annotated[int, typer.Option(help="requests per case")] = V.requests,
    trace_rate: Annotated[float, _rate("trace:azure_conv replay")] = V.trace_rate,
    edf_rate: Annotated[float, _rate("mixed-deadline EDF")] = V.edf_rate,
    kv_rate: Annotated[float, _rate("KV-pressure", "; vllm engines only")] = V.kv_rate,
    kv_cache_bytes: Annotated[int, _kv_engine("KV cache", ", bytes")] = V.kv_cache_bytes,
    kv_max_num_seqs: Annotated[int, _kv_engine("sequence slots")] = V.kv_max_num_seqs,
    kv_block_size: Annotated[int, _kv_engine("KV block size", " (tokens)")] = V.kv_block_size,
    profile_key: Annotated[str | None, typer.Option(
        help="profile key when the file holds several")] = None,
    seed: Annotated[int, typer.Option(help="seed of arrivals, lengths and deadlines")] = V.seed,
    pin: PinOpt = V.pin,
    anchor: Annotated[bool, typer.Option(
        help="re-anchor the profile's speed per case with lone probe requests run just before "
             "and after it (the fixed profile's errors are reported beside)")] = V.anchor,
    calibrate: Annotated[bool, typer.Option(
        help="instead of --profile, profile each engine (the default grid, batches up to its "
             "slots) right before its cases, on the same engine; the fits go to "
             "OUT/profile-ENGINE.json")] = V.calibrate,
    prompts: Annotated[str, typer.Option(
        help="prompt lengths of the cases, LO,HI tokens (log-uniform)")] = _csv(V.prompts),
    outputs: Annotated[str, typer.Option(
        help="output lengths of the cases, LO,HI tokens (uniform)")] = _csv(V.outputs),
    kv_prompts: Annotated[str, typer.Option(
        help="prompt lengths of the KV-pressure case, LO,HI tokens")] = _csv(V.kv_prompts),
    kv_outputs: Annotated[str, typer.Option(
        help="output lengths of the KV-pressure case, LO,HI tokens")] = _csv(V.kv_outputs),
    grid_prompts: Annotated[str, typer.Option(
        help="prompt lengths of the --calibrate grid, tokens")] = _csv(V.grid_prompts),
    entry_requests: Annotated[int, typer.Option(
        help=f"with --calibrate: {ENTRY_HELP}")] = V.entry_requests,
) -> None:
    """Replay the same arrivals (Poisson per rate, a bursty trace, mixed deadlines, a small KV
    cache) against the real engine and the twin with the fitted profile; report per-request TTFT
    and E2E error, queue depth, completion order and throughput.

    Writes OUT/validate.json (one row per case), OUT/requests.parquet, OUT/samples.parquet,
    OUT/latency_cdf.png and OUT/queue_depth.png, and prints a table.
    """
    spec = ValidateSpec(
        config, model, profile, out, _floats(rates, "rates"), requests, trace_rate, edf_rate,
        kv_rate, kv_cache_bytes, kv_max_num_seqs, kv_block_size, profile_key, seed, pin, anchor,
        calibrate, _range(prompts, "prompts"), _range(outputs, "outputs"),
        _range(kv_prompts, "kv-prompts"), _range(kv_outputs, "kv-outputs"),
        _ints(grid_prompts, "grid-prompts"), entry_requests)
    from inframind_ray.fidelity.validate import run_validation

    run_validation(spec)


@twin_app.command()
def rescore(
    run: Annotated[Path, typer.Argument(help="folder of a recorded `twin validate` run")],
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="profile JSON to score (default: the run's own --calibrate "
                          "profiles, RUN/profile-ENGINE.json)")] = None,
    out: Annotated[Path, typer.Option(help="output folder")] = Path("runs/fidelity/rescore"),
    profile_key: Annotated[str | None, typer.Option(
        help="profile key if the file holds several")] = None,
    entry: Annotated[bool, typer.Option(
        help="use the profile's fitted entry delay (--no-entry: plain front-end delay d)"
    )] = True,
) -> None:
    """Replay the real side of a recorded `twin validate` run on the twin with another profile,
    without an engine: the same arrivals, token counts and deadlines, the same table and files
    as `validate` (no speed anchoring)."""
    from inframind_ray.fidelity.recorded import rescore_run

    rescore_run(run, out, profile, profile_key, entry)
