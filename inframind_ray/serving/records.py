"""Parquet records of the serving plane: one row per agent call and one per query."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FLUSH_EVERY = 500


class RecordWriter:
    """Buffers rows and writes them as Parquet part files under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.buffers: dict[str, list[dict]] = {"calls": [], "queries": []}
        self._part = 0
        self.written: list[Path] = []

    def add(self, kind: str, row: dict) -> None:
        """Append a row; flush when a buffer is full."""
        self.buffers[kind].append(row)
        if len(self.buffers[kind]) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> list[Path]:
        """Write every non-empty buffer to a new part file."""
        out = []
        for kind, rows in self.buffers.items():
            if not rows:
                continue
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.root / f"{kind}-{int(time.time())}-{os.getpid()}-{self._part:04d}.parquet"
            self._part += 1
            pq.write_table(pa.Table.from_pylist(rows), path)
            rows.clear()
            out.append(path)
        self.written += out
        return out
