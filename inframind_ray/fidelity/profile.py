"""The twin's view of a real engine: a fitted iteration profile, its entry delay, and the
profile file that carries them.

The profile file has the layout of ``inframind_ray/data/profiles.json`` (``profiles`` -> key ->
``c0_s``, ``c_prefill_s``, ``c_decode_s``, ``c_kv_s``, ``hardware``, ``num_gpus``, ``fit``) plus
``request_overhead_s`` (the front-end delay ``d``) and the engine's scheduler limits under
``engine``; the grid that measured it is under ``fit.grid`` (``specs.GridSpec``), the fit method
in ``fidelity.fit``.

Entry delay (optional ``entry_delay`` in the file; see ``EntryDelay``): ``d`` is fitted on the
grid's lone requests, each sent the moment the one before it finished. A request that finds the
engine busy reaches it sooner (``d - busy_cut_s``: the engine core takes it in between two steps
it runs anyway), one that finds it idle for a while later (``d + wake``: vLLM's processes have
gone from polling to sleeping). ``twin validate`` and ``twin profile`` fit both on a separate
Poisson calibration case replayed on the twin (``fidelity.entry.fit_entry``).
"""

from __future__ import annotations

import bisect
import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inframind_ray.core.profile import IterationProfile
from inframind_ray.errors import ConfigError

if TYPE_CHECKING:
    from inframind_ray.fidelity.specs import GridSpec

COEFFS = ("c0_s", "c_prefill_s", "c_decode_s", "c_kv_s")


@dataclass(frozen=True)
class EntryDelay:
    """How long after it is sent a request reaches the engine, by the engine's state then.

    ``d - busy_cut_s`` when the engine has a request running or waiting; ``d + idle_wake_s[k]``
    when it has been idle for a time in bin ``k`` of ``idle_edges_s`` (ascending edges, seconds;
    ``len(idle_wake_s) == len(idle_edges_s) + 1``). The default (no cut, no wake) is the plain
    front-end delay ``d``."""

    busy_cut_s: float = 0.0
    idle_edges_s: tuple[float, ...] = ()
    idle_wake_s: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        if len(self.idle_wake_s) != len(self.idle_edges_s) + 1:
            raise ValueError("idle_wake_s needs one value per idle bin (len(edges) + 1)")

    def delay(self, d: float, idle_for_s: float | None) -> float:
        """Entry delay of a request; ``idle_for_s`` None = the engine is busy."""
        if idle_for_s is None:
            return max(0.0, d - self.busy_cut_s)
        return max(0.0, d + self.idle_wake_s[bisect.bisect_right(self.idle_edges_s, idle_for_s)])

    @property
    def trivial(self) -> bool:
        """True when every request gets plain ``d``."""
        return self.busy_cut_s == 0 and not any(self.idle_wake_s)

    def as_dict(self) -> dict:
        """As written in a profile file's ``entry_delay``."""
        return dict(busy_cut_s=round(self.busy_cut_s, 9),
                    idle_edges_s=list(self.idle_edges_s),
                    idle_wake_s=[round(w, 9) for w in self.idle_wake_s])


@dataclass(frozen=True)
class FittedProfile:
    """Fitted coefficients plus the front-end delay and its state-dependent entry delay."""

    profile: IterationProfile
    request_overhead_s: float
    fit: dict
    entry: EntryDelay = EntryDelay()


def predict_lone(fp: FittedProfile, prompt_tokens: int, output_tokens: int,
                 batch: int = 1) -> tuple[float, float]:
    """(TTFT, E2E) of a static batch of ``batch`` equal requests started together."""
    pr = fp.profile
    kv = batch * prompt_tokens
    ttft = fp.request_overhead_s + pr.iteration_time(batch * prompt_tokens, 0, kv)
    n = max(0, output_tokens - 1)
    decode = n * pr.iteration_time(0, batch, batch * (prompt_tokens + output_tokens / 2))
    return ttft, ttft + decode


def hardware_name() -> str:
    """CPU model of this machine (or its architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def profile_document(key: str, fp: FittedProfile, *, model: str, hardware: str, num_gpus: int,
                     engine: dict, grid: GridSpec) -> dict:
    """The profile file (profiles.json layout, one entry)."""
    pr = fp.profile
    entry = dict(
        measured_model=model, hardware=hardware, num_gpus=num_gpus,
        c0_s=round(pr.c0, 9), c_prefill_s=round(pr.c_prefill, 12),
        c_decode_s=round(pr.c_decode, 12), c_kv_s=round(pr.c_kv, 14),
        **({"decode_factors": [list(bf) for bf in pr.decode_factors]}
           if pr.decode_factors else {}),
        request_overhead_s=round(fp.request_overhead_s, 9),
        **({} if fp.entry.trivial else {"entry_delay": fp.entry.as_dict()}),
        engine=engine,
        fit={**fp.fit, "grid": grid.as_dict()},
    )
    return {
        "model": "t_iter = c0 + c_prefill*P + c_decode*B + c_kv*K (seconds); TTFT and E2E also "
                 "carry request_overhead_s once per request",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "profiles": {key: entry},
    }


def _decode_factors(v: object, where: str) -> tuple[tuple[int, float], ...]:
    """Validate a profile's optional ``decode_factors``: [[batch size >= 1, factor > 0], ...]
    with ascending batch sizes."""
    ok = isinstance(v, list) and all(
        isinstance(e, list) and len(e) == 2 and isinstance(e[0], int) and e[0] >= 1
        and not isinstance(e[0], bool) and isinstance(e[1], int | float)
        and not isinstance(e[1], bool) and math.isfinite(e[1]) and e[1] > 0 for e in v)
    if not ok or [e[0] for e in v] != sorted({e[0] for e in v}):
        raise ConfigError("profile", f"{where} must be [[batch size, factor > 0], ...] with "
                          f"ascending batch sizes, got {v!r}")
    return tuple((int(b), float(f)) for b, f in v)


def load_profile(path: str | Path, key: str | None = None) -> tuple[str, dict, FittedProfile]:
    """Read a profile file (ours or profiles.json); ConfigError("profile", ...) if malformed."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("profile", f"no profile file {str(path)!r}")
    try:
        doc = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("profile", f"{p}: not valid JSON ({e})") from None
    profs = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profs, dict) or not profs:
        raise ConfigError("profile", f"{p}: expected an object with a non-empty 'profiles' map")
    if key is None:
        if len(profs) != 1:
            raise ConfigError("profile", f"{p} holds {len(profs)} profiles; pick one with "
                              f"--profile-key ({', '.join(sorted(profs)[:5])}, ...)")
        key = next(iter(profs))
    if key not in profs:
        raise ConfigError("profile", f"{p}: no profile {key!r}")
    entry = profs[key]
    if not isinstance(entry, dict):
        raise ConfigError("profile", f"{p}: profile {key!r} is not an object")
    vals = {}
    for c in (*COEFFS, "request_overhead_s"):
        v = entry.get(c, 0.0 if c == "request_overhead_s" else None)
        if v is None:
            raise ConfigError("profile", f"{p}: profile {key!r} lacks coefficient {c!r}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ConfigError("profile", f"{p}: {key}.{c} must be a finite number >= 0, got {v!r}")
        vals[c] = float(v)
    if vals["c0_s"] <= 0:
        raise ConfigError("profile", f"{p}: {key}.c0_s must be > 0")
    prof = IterationProfile(c0=vals["c0_s"], c_prefill=vals["c_prefill_s"],
                            c_decode=vals["c_decode_s"], c_kv=vals["c_kv_s"],
                            decode_factors=_decode_factors(entry.get("decode_factors", []),
                                                           f"{p}: {key}.decode_factors"))
    return key, entry, FittedProfile(prof, vals["request_overhead_s"], entry.get("fit", {}),
                                     _entry_delay(entry.get("entry_delay"), f"{p}: {key}"))


def _entry_delay(v: object, where: str) -> EntryDelay:
    """Validate a profile's optional ``entry_delay`` (absent: plain ``d`` for every request)."""
    if v is None:
        return EntryDelay()

    def nums(x: object) -> bool:
        return isinstance(x, list) and all(
            isinstance(e, int | float) and not isinstance(e, bool) and math.isfinite(e)
            for e in x)

    ok = (isinstance(v, dict) and isinstance(v.get("busy_cut_s"), int | float)
          and not isinstance(v.get("busy_cut_s"), bool) and math.isfinite(v["busy_cut_s"])
          and v["busy_cut_s"] >= 0 and nums(v.get("idle_edges_s")) and nums(v.get("idle_wake_s"))
          and len(v["idle_wake_s"]) == len(v["idle_edges_s"]) + 1
          and all(e > 0 for e in v["idle_edges_s"])
          and list(v["idle_edges_s"]) == sorted(set(v["idle_edges_s"])))
    if not ok:
        raise ConfigError("profile", f"{where}.entry_delay must be {{busy_cut_s >= 0, "
                          "idle_edges_s: ascending seconds > 0, idle_wake_s: one more "
                          f"number}}, got {v!r}")
    return EntryDelay(float(v["busy_cut_s"]), tuple(float(e) for e in v["idle_edges_s"]),
                      tuple(float(w) for w in v["idle_wake_s"]))
