"""Loaders for the compact data the package ships (``inframind_ray/data``), cached per process."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

DATA = Path(str(resources.files("inframind_ray") / "data"))
TRACES = ("azure_conv", "azure_code", "mooncake_conv")


@lru_cache(maxsize=1)
def questions() -> dict[str, np.ndarray | list]:
    """MMLU-Pro questions sorted by id: question_id, category, question, options, answer, split."""
    t = pq.read_table(DATA / "mmlu_pro" / "questions.parquet")
    return {
        "question_id": t.column("question_id").to_numpy(),
        "category": np.array(t.column("category").to_pylist()),
        "question": t.column("question").to_pylist(),
        "options": t.column("options").to_pylist(),
        "answer": np.array(t.column("answer").to_pylist()),
        "split": np.array(t.column("split").to_pylist()),
    }


@lru_cache(maxsize=1)
def item_embeddings() -> np.ndarray | None:
    """MiniLM embeddings of every item, aligned with ``questions()`` (float32, (n, 384)); None
    when the derived file (scripts/derive_embeddings.py) is absent."""
    path = DATA / "mmlu_pro" / "embeddings.npz"
    if not path.exists():
        return None
    with np.load(path) as z:
        if not np.array_equal(z["question_id"], questions()["question_id"]):
            raise ValueError(f"{path} does not match questions.parquet; re-derive it")
        return z["q"].astype(np.float32) * z["scale"][:, None]


@lru_cache(maxsize=1)
def outcomes() -> dict[str, dict[str, np.ndarray]]:
    """Recorded answers per model, each array aligned with ``questions()['question_id']``."""
    t = pq.read_table(DATA / "mmlu_pro" / "outcomes.parquet")
    qids = questions()["question_id"]
    models = np.array(t.column("model").to_pylist())
    out: dict[str, dict[str, np.ndarray]] = {}
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in
            ("question_id", "pred", "correct", "gen_words")}
    for m in np.unique(models):
        sel = models == m
        q = cols["question_id"][sel]
        if not np.array_equal(q, qids):
            raise ValueError(f"outcomes of {m} are not aligned with the questions")
        out[str(m)] = {k: cols[k][sel] for k in ("pred", "correct", "gen_words")}
    return out


@lru_cache(maxsize=1)
def profiles() -> dict:
    """Fitted iteration-time profiles and model architectures (``profiles.json``)."""
    return json.loads((DATA / "profiles.json").read_text())


@lru_cache(maxsize=4)
def trace(name: str) -> np.ndarray:
    """Arrival times (seconds from the first request) of a shipped request trace."""
    if name not in TRACES:
        raise ValueError(f"unknown trace {name!r}; choose from {', '.join(TRACES)}")
    return pq.read_table(DATA / "traces" / f"{name}.parquet").column("t_s").to_numpy()


TASK_FAMILIES = ("gsm8k", "math", "humaneval", "mbpp")
"""Task families beside MMLU-Pro whose items and recorded outcomes ship under data/tasks/."""


def _family_dir(family: str) -> Path:
    if family not in TASK_FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose from {', '.join(TASK_FAMILIES)}")
    return DATA / "tasks" / family


@lru_cache(maxsize=8)
def task_items(family: str) -> dict[str, np.ndarray | list]:
    """Items of a family sorted by item_id: item_id, split, text, reference and the family's own
    columns (tests, entry points, worked solutions)."""
    t = pq.read_table(_family_dir(family) / "items.parquet")
    out: dict[str, np.ndarray | list] = {}
    for c in t.column_names:
        col = t.column(c)
        if c == "item_id":
            out[c] = col.to_numpy().astype(np.int64)
        elif c in ("split", "recorded"):
            out[c] = np.array(col.to_pylist())
        else:
            out[c] = col.to_pylist()
    return out


@lru_cache(maxsize=8)
def task_outcomes(family: str) -> dict[str, dict[str, np.ndarray]]:
    """Recorded outcomes per model, each array aligned with ``task_items(family)['item_id']``:
    ``correct`` (bool) and ``output_words`` for GSM8K and MATH; ``pass_at_1`` (NaN where the item
    is not recorded) and ``solution_chars`` for HumanEval and MBPP; ``recorded`` marks the rows
    the model has. (The ZeroEval answer strings in the file are not read.)"""
    path = _family_dir(family) / "outcomes.parquet"
    t = pq.read_table(path, columns=[c for c in pq.read_schema(path).names if c != "answer"])
    ids = task_items(family)["item_id"]
    models = np.array(t.column("model").to_pylist())
    rows = np.searchsorted(ids, t.column("item_id").to_numpy())  # ids are sorted
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names
            if c not in ("model", "item_id")}
    fill = {"f": np.nan, "b": False, "i": 0, "u": 0}
    out: dict[str, dict[str, np.ndarray]] = {}
    for m in np.unique(models):
        sel = models == m
        rec = {}
        for c, v in cols.items():
            a = np.full(len(ids), fill[v.dtype.kind], v.dtype)  # numeric columns only
            a[rows[sel]] = v[sel]
            rec[c] = a
        rec["recorded"] = np.zeros(len(ids), bool)
        rec["recorded"][rows[sel]] = True
        out[str(m)] = rec
    return out


@lru_cache(maxsize=8)
def task_embeddings(family: str) -> np.ndarray | None:
    """MiniLM embeddings of a family's items aligned with ``task_items`` (None if not derived)."""
    path = _family_dir(family) / "embeddings.npz"
    if not path.exists():
        return None
    with np.load(path) as z:
        if not np.array_equal(z["item_id"], task_items(family)["item_id"]):
            raise ValueError(f"{path} does not match items.parquet; re-derive it")
        return z["q"].astype(np.float32) * z["scale"][:, None]
