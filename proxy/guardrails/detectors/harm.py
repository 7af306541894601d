"""Harmful-intent classifier: logistic regression over all-MiniLM-L6-v2 sentence embeddings.

The model is trained by :mod:`proxy.guardrails.training` and shipped as two files in
``proxy/guardrails/artefacts``:

- ``<artefact>.npz``: ``coef`` float64 (384,), ``intercept`` float64 () — read with numpy only
  (``allow_pickle=False``), no scikit-learn or pickle at run time;
- ``<artefact>.json``: metadata (name, version, embedding model, training-data sources with the
  sha256 of each input file, hyper-parameters, cross-validated metrics, recommended thresholds,
  and ``weights_sha256``, the sha256 of the .npz, checked at load).

Score: ``p(harmful | text) = sigmoid(embed(text) · coef + intercept)`` in [0, 1].
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from proxy.guardrails.detectors import embeddings

ARTEFACT_DIR = Path(__file__).resolve().parent.parent / "artefacts"
DEFAULT_ARTEFACT = "harm-minilm-lr-v1"

_log = logging.getLogger(__name__)


class ArtefactError(RuntimeError):
    """A harm-classifier artefact is missing, corrupt, or does not match this embedding model."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (streamed; any size). Raises OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function, elementwise; same shape as ``z``."""
    out = np.empty_like(z, dtype=np.float64)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


class HarmClassifier:
    """Linear harmful-intent classifier over sentence embeddings.

    Attributes:
        name: model family, e.g. ``"harm-minilm-lr"``.
        version: artefact version plus a prefix of the weights' sha256, e.g.
            ``"harm-minilm-lr-v1@sha256:1a2b3c4d5e6f"`` — pins the exact weights in receipts.
        metadata: the artefact's JSON metadata (sources, hyper-parameters, CV metrics, thresholds).

    Thread-safe: the weights are read-only; embedding is serialised inside ``embeddings.embed``.
    """

    def __init__(self, coef: np.ndarray, intercept: float, metadata: dict) -> None:
        """Build from weights.

        Args:
            coef: float array of shape (384,) (``embeddings.DIMENSIONS``).
            intercept: scalar bias.
            metadata: artefact metadata; needs ``name`` and ``version``.

        Raises:
            ArtefactError: on a shape mismatch or missing metadata fields.
        """
        coef = np.asarray(coef, dtype=np.float64)
        if coef.shape != (embeddings.DIMENSIONS,):
            raise ArtefactError(
                f"harm classifier weights have shape {coef.shape}, expected ({embeddings.DIMENSIONS},)"
            )
        if not np.all(np.isfinite(coef)) or not np.isfinite(intercept):
            raise ArtefactError("harm classifier weights contain NaN or infinity")
        for key in ("name", "version"):
            if key not in metadata:
                raise ArtefactError(f"harm classifier metadata lacks {key!r}")
        self.coef = coef
        self.intercept = float(intercept)
        self.metadata = metadata
        self.name: str = metadata["name"]
        digest = metadata.get("weights_sha256", "")
        self.version: str = f"{metadata['version']}@sha256:{digest[:12]}" if digest else metadata["version"]

    def predict_proba_embeddings(self, vectors: np.ndarray) -> np.ndarray:
        """Probabilities for precomputed embeddings.

        Args:
            vectors: float array (n, 384), rows L2-normalised as produced by ``embeddings.embed``.

        Returns:
            float64 array (n,), each in [0, 1].
        """
        vectors = np.asarray(vectors, dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[1] != self.coef.shape[0]:
            raise ValueError(f"expected embeddings of shape (n, {self.coef.shape[0]}), got {vectors.shape}")
        return _sigmoid(vectors @ self.coef + self.intercept)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """Probability that each text expresses intent to cause harm.

        Args:
            texts: n strings (any length; the embedding model truncates at 256 word pieces).

        Returns:
            float64 array (n,), each in [0, 1]; empty input gives shape (0,).
        """
        if not texts:
            return np.zeros(0, dtype=np.float64)
        return self.predict_proba_embeddings(embeddings.embed(list(texts)))


def artefact_paths(artefact: str | Path, artefact_dir: Path = ARTEFACT_DIR) -> tuple[Path, Path]:
    """Resolve an artefact reference to its (.npz, .json) paths.

    Args:
        artefact: a name in ``artefact_dir`` (``"harm-minilm-lr-v1"``) or a path to either file or
            to the common stem (``/x/harm-minilm-lr-v1``).
        artefact_dir: directory searched for bare names.
    """
    ref = Path(artefact)
    if ref.suffix in (".npz", ".json"):
        ref = ref.with_suffix("")
    elif not ref.is_absolute() and len(ref.parts) == 1:
        ref = artefact_dir / ref
    return ref.with_name(ref.name + ".npz"), ref.with_name(ref.name + ".json")


def load_harm_classifier(artefact: str | Path = DEFAULT_ARTEFACT, artefact_dir: Path = ARTEFACT_DIR) -> HarmClassifier:
    """Load a harm-classifier artefact with numpy only (no pickle).

    Args:
        artefact: artefact name or path (see :func:`artefact_paths`).
        artefact_dir: directory searched for bare names (default: the shipped artefacts).

    Returns:
        A ready :class:`HarmClassifier` (the embedding model itself loads on first use or via
        ``embeddings.warm_up()``).

    Raises:
        ArtefactError: a file is missing or unreadable, the weights' sha256 differs from the
            metadata, the arrays are malformed, or the artefact was trained on another embedding
            dimension. A different embedding *version* only logs a warning.
    """
    npz_path, json_path = artefact_paths(artefact, artefact_dir)
    for path in (npz_path, json_path):
        if not path.is_file():
            raise ArtefactError(
                f"harm classifier artefact file not found: {path} "
                "(train one with `sonate train safety --data-dir ... --out ...`)"
            )
    try:
        metadata = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtefactError(f"cannot read harm classifier metadata {json_path}: {exc}") from exc
    expected = metadata.get("weights_sha256")
    actual = sha256_file(npz_path)
    if expected != actual:
        raise ArtefactError(f"{npz_path} has sha256 {actual}, metadata {json_path.name} says {expected}")
    try:
        with np.load(npz_path, allow_pickle=False) as arrays:
            coef = np.array(arrays["coef"])
            intercept = float(np.asarray(arrays["intercept"]).reshape(()))
    except (OSError, KeyError, ValueError) as exc:
        raise ArtefactError(f"cannot read harm classifier weights {npz_path}: {exc}") from exc
    trained_on = metadata.get("embedding_model")
    if trained_on and trained_on != embeddings.model_version():
        _log.warning(
            "harm classifier %s was trained on embeddings %s, running with %s",
            metadata.get("version"), trained_on, embeddings.model_version(),
        )
    return HarmClassifier(coef, intercept, metadata)
