"""Toxic-language detectors: detoxify (primary) and alt-profanity-check (explicit fallback).

- detoxify (unitaryai/detoxify; Jigsaw toxic-comment models) is loaded through its own loading
  code, ``detoxify.Detoxify(model_type, checkpoint, device, huggingface_config_path)``. Without a
  local ``checkpoint`` it downloads the weights from GitHub releases, which fails on offline
  machines.
- alt-profanity-check ships a trained linear SVM (calibrated) over a bag-of-words vectoriser
  (trained on, among others, Davidson et al. 2017 tweets); ``profanity_check.predict_prob``.

Both return per-category probabilities in [0, 1]; category ``"toxicity"`` is always present.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from proxy import offline  # noqa: F401  (HF_HUB_OFFLINE before transformers/detoxify)

# detoxify's "unbiased" model also predicts identity *mentions* (male, muslim, black, ...):
# those say who a text is about, not whether it is toxic, so they are not reported as scores.
IDENTITY_MENTION_CLASSES = frozenset({
    "male", "female", "homosexual_gay_or_lesbian", "christian", "jewish", "muslim", "black",
    "white", "psychiatric_or_mental_illness",
})
DETOXIFY_BATCH = 32


class ToxicityUnavailableError(RuntimeError):
    """No toxicity detector could be loaded (detoxify failed and no fallback is configured)."""


class ToxicityDetector(Protocol):
    """What the safety detector needs from a toxic-language model."""

    name: str
    version: str

    def score(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Map category -> float64 array (len(texts),) of probabilities in [0, 1]."""


def _short_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


class DetoxifyToxicity:
    """detoxify model wrapper: batched, thread-safe scoring.

    Attributes:
        name: ``"detoxify:<model_type>"`` or ``"detoxify:checkpoint"``.
        version: ``"detoxify==<pkg>; <weights file>[@sha256:<12 hex>]"`` — the weights file is the
            release asset name (carries its own hash) or the local checkpoint with its sha256 prefix.
        categories: class names reported (detoxify's names, identity mentions removed).
    """

    def __init__(self, model, name: str, version: str) -> None:
        """Wrap a loaded ``detoxify.Detoxify`` instance (use :func:`load_detoxify`).

        Raises:
            ToxicityUnavailableError: the model has no ``"toxicity"`` class.
        """
        self._model = model
        self._lock = threading.Lock()  # fast tokenizers are not safe to share across threads
        self.name = name
        self.version = version
        self.categories = [c for c in model.class_names if c not in IDENTITY_MENTION_CLASSES]
        if "toxicity" not in self.categories:
            raise ToxicityUnavailableError(
                f"detoxify model {name} has classes {model.class_names}; a 'toxicity' class is required"
            )

    def score(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Score texts in batches of ``DETOXIFY_BATCH``.

        Args:
            texts: n strings (truncated by the tokenizer at the model's max length).

        Returns:
            category -> float64 array (n,) of sigmoid probabilities in [0, 1].
        """
        out = {c: np.zeros(len(texts), dtype=np.float64) for c in self.categories}
        for start in range(0, len(texts), DETOXIFY_BATCH):
            batch = list(texts[start:start + DETOXIFY_BATCH])
            with self._lock:
                result = self._model.predict(batch)
            for category in self.categories:
                # detoxify squeezes a batch of one to a bare float
                out[category][start:start + len(batch)] = np.atleast_1d(np.asarray(result[category], dtype=np.float64))
        return out


class ProfanityCheckToxicity:
    """alt-profanity-check's trained linear model as a single-category toxicity detector.

    Attributes:
        name: ``"profanity-check"``.
        version: ``"alt-profanity-check==<version>"`` (the weights ship inside the wheel).
    """

    name = "profanity-check"

    def __init__(self) -> None:
        """Import the package (loads its vectoriser and model from the wheel, ~1.5 s).

        Raises:
            ImportError: alt-profanity-check is not installed.
        """
        import profanity_check

        self._predict_prob = profanity_check.predict_prob
        self.version = f"alt-profanity-check=={importlib.metadata.version('alt-profanity-check')}"
        self.categories = ["toxicity"]

    def score(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Args: n strings. Returns ``{"toxicity": float64 array (n,)}`` in [0, 1]."""
        if not texts:
            return {"toxicity": np.zeros(0, dtype=np.float64)}
        return {"toxicity": np.asarray(self._predict_prob(list(texts)), dtype=np.float64)}


def load_detoxify(
    model_type: str = "original",
    checkpoint: Path | None = None,
    huggingface_config_path: Path | None = None,
) -> DetoxifyToxicity:
    """Load detoxify through its own loading code on CPU.

    Args:
        model_type: detoxify model type (``original``, ``unbiased``, ``multilingual``, ...); used to
            pick the release download when ``checkpoint`` is None.
        checkpoint: local detoxify checkpoint (``torch.save`` of ``{"config": ..., "state_dict": ...}``).
        huggingface_config_path: local directory with the HF config + tokenizer for the checkpoint.

    Raises:
        Whatever detoxify/torch/transformers raise (URLError offline, OSError, ValueError, ...);
        ToxicityUnavailableError if the model lacks a ``toxicity`` class.
    """
    import detoxify
    from detoxify.detoxify import MODEL_URLS

    model = detoxify.Detoxify(
        model_type=model_type,
        checkpoint=str(checkpoint) if checkpoint is not None else None,
        device="cpu",
        huggingface_config_path=str(huggingface_config_path) if huggingface_config_path is not None else None,
    )
    package = f"detoxify=={importlib.metadata.version('detoxify')}"
    if checkpoint is not None:
        path = Path(checkpoint)
        return DetoxifyToxicity(model, "detoxify:checkpoint", f"{package}; {path.name}@sha256:{_short_sha256(path)}")
    weights = MODEL_URLS.get(model_type, model_type).rsplit("/", 1)[-1]
    return DetoxifyToxicity(model, f"detoxify:{model_type}", f"{package}; {weights}")


FALLBACKS = {"profanity-check": ProfanityCheckToxicity}
