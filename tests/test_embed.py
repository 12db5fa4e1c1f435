"""MiniLM embeddings from the packaged model, cached on disk."""

from __future__ import annotations

import numpy as np

from inframind_ray import embed


def test_embeddings_cached(tmp_path, monkeypatch):
    """Real 384-d unit vectors; the second call reads the cache without the model."""
    monkeypatch.setenv("INFRAMIND_CACHE", str(tmp_path))
    ids = np.array([1, 2, 3])
    texts = ["What is 2+2?", "Capital of France?", "What is 2 + 2?"]
    a = embed.embed_items(ids, texts, name="t")
    assert a.shape == (3, 384)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-2)
    assert a[0] @ a[2] > a[0] @ a[1]  # paraphrases are closer
    monkeypatch.setattr(embed, "_model", lambda: (_ for _ in ()).throw(AssertionError("no")))
    b = embed.embed_items(ids, texts, name="t")
    assert np.allclose(a, b, atol=1e-3)
