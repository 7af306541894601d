"""Toxic-language detectors: alt-profanity-check (shipped in its wheel) and detoxify (pinned, opt-in).

- detoxify (unitaryai/detoxify; Jigsaw toxic-comment models): files pinned by sha256 in a model
  manifest (:mod:`proxy.guardrails.models`), fetched only by ``sonate models fetch``, read with
  ``torch.load(weights_only=True)`` and assembled with detoxify's ``get_model_and_tokenizer``
  from the local config directory. Never downloaded at start.
- alt-profanity-check ships a trained linear SVM (calibrated) over a bag-of-words vectoriser
  (trained on, among others, Davidson et al. 2017 tweets); scored with numpy from arrays exported
  once (:mod:`.toxicity_export`), equal to ``profanity_check.predict_prob``.

Both return per-category probabilities in [0, 1]; category ``"toxicity"`` is always present.
"""

from __future__ import annotations

import importlib.metadata
import re
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from proxy import offline  # noqa: F401  (HF_HUB_OFFLINE before transformers/detoxify)
from proxy.guardrails.detectors.exported import ensure_export, file_sha256
from proxy.guardrails.models import ModelError

# detoxify's "unbiased" model also predicts identity *mentions* (male, muslim, black, ...):
# those say who a text is about, not whether it is toxic, so they are not reported as scores.
IDENTITY_MENTION_CLASSES = frozenset({
    "male", "female", "homosexual_gay_or_lesbian", "christian", "jewish", "muslim", "black",
    "white", "psychiatric_or_mental_illness",
})
DETOXIFY_BATCH = 32


class ToxicityUnavailableError(ModelError):
    """No toxicity detector could be loaded (a checkpoint was refused, or no fallback is configured)."""


class ToxicityDetector(Protocol):
    """What the safety detector needs from a toxic-language model."""

    name: str
    version: str
    categories: list[str]
    """The keys :meth:`score` returns (always including ``"toxicity"``)."""

    def score(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Map category -> float64 array (len(texts),) of probabilities in [0, 1]."""


class DetoxifyToxicity:
    """detoxify model wrapper: batched, thread-safe scoring.

    Attributes:
        name: ``"detoxify:<manifest model id>"``.
        version: ``"detoxify==<pkg>; <checkpoint file>@sha256:<12 hex>"``.
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

    Scores with numpy only (the package's TF-IDF vectorizer and calibrated linear SVM, exported to
    arrays once by :mod:`~.toxicity_export`: no scikit-learn or SciPy in the serving process).

    Attributes:
        name: ``"profanity-check"``.
        version: ``"alt-profanity-check==<version>"`` (the weights ship inside the wheel); with
            `` (configured fallback for <model id>)`` appended when it stands in for another model.
        fallback_for: None, or ``{"model", "reason"}`` when used as the operator's fallback.
    """

    name = "profanity-check"
    fallback_for: dict[str, str] | None = None

    def __init__(self, models_root: Path | None = None) -> None:
        """Load the exported arrays (:func:`profanity_weights`; exported first when missing).

        Raises:
            ExportError: the export failed (alt-profanity-check not installed, or an unexpected
                vectorizer) or the cached file does not match its recorded sha256.
        """
        with np.load(profanity_weights(models_root), allow_pickle=False) as data:
            self._columns = {term: i for i, term in enumerate(data["terms"].tolist())}
            self._idf = data["idf"]
            self._stop_words = frozenset(data["stop_words"].tolist())
            self._weights = (data["coef"], data["intercept"], data["a"], data["b"])
        self.version = f"alt-profanity-check=={importlib.metadata.version('alt-profanity-check')}"
        self.categories = ["toxicity"]

    def tfidf(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        r"""(column indices, values) of ``text``'s L2-normalised TF-IDF row, as the package's
        ``TfidfVectorizer.transform`` computes it: lower-cased, tokens ``(?u)\b\w\w+\b``, English
        stop words dropped, raw counts × idf over the vocabulary's terms, then L2 norm (scikit-learn
        user guide, "Tf–idf term weighting"). Empty arrays when no term is in the vocabulary."""
        counts: dict[int, int] = {}
        for token in _TOKEN.findall(text.lower()):
            column = self._columns.get(token) if token not in self._stop_words else None
            if column is not None:
                counts[column] = counts.get(column, 0) + 1
        columns = np.fromiter(counts, dtype=np.int64, count=len(counts))
        values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts)) * self._idf[columns]
        norm = np.sqrt(values @ values)
        return columns, values / norm if norm else values

    def score(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Args: n strings. Returns ``{"toxicity": float64 array (n,)}`` in [0, 1] — the same
        numbers as ``profanity_check.predict_prob`` (a test checks them on Davidson's tweets)."""
        coef, intercept, a, b = self._weights
        decision = np.empty((len(texts), len(intercept)))
        for row, text in enumerate(texts):
            columns, values = self.tfidf(text)
            decision[row] = coef[:, columns] @ values + intercept
        return {"toxicity": platt_mean(decision, a, b)}


_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def profanity_weights(models_root: Path | None = None) -> Path:
    """The verified ``.npz`` of alt-profanity-check's model for the installed package version
    (``<models_dir>/profanity-check/alt-profanity-check-<version>.npz``), exported first when missing.
    Raises ExportError (see :func:`~.exported.ensure_export`)."""
    from proxy.guardrails.models import models_dir

    version = importlib.metadata.version("alt-profanity-check")
    path = models_dir(models_root) / "profanity-check" / f"alt-profanity-check-{version}.npz"
    return ensure_export(path, "proxy.guardrails.detectors.toxicity_export", "alt-profanity-check's model",
                         "alt-profanity-check and scikit-learn")


def calibrated_linear_weights(model: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(coef (k, d), intercept (k,), sigmoid a (k,), sigmoid b (k,)) of a binary
    ``CalibratedClassifierCV(LinearSVC, method="sigmoid")`` with k calibrated folds.

    Raises ValueError for any other model (another method, estimator or class count).
    """
    folds = getattr(model, "calibrated_classifiers_", None)
    if getattr(model, "method", None) != "sigmoid" or not folds or len(getattr(model, "classes_", [])) != 2:
        raise ValueError(f"not a binary sigmoid-calibrated linear model: {type(model).__name__}")
    coef = np.stack([np.asarray(f.estimator.coef_, dtype=np.float64).ravel() for f in folds])
    intercept = np.array([float(np.ravel(f.estimator.intercept_)[0]) for f in folds])
    a = np.array([float(f.calibrators[0].a_) for f in folds])
    b = np.array([float(f.calibrators[0].b_) for f in folds])
    return coef, intercept, a, b


def platt_mean(decision: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mean over k calibrated folds of Platt's sigmoid ``p_k = 1 / (1 + exp(a_k f_k + b_k))`` for
    decisions ``decision`` (n, k) (Platt 1999; scikit-learn's ``_SigmoidCalibration``, averaged as
    ``CalibratedClassifierCV.predict_proba`` with ``ensemble=True``). Returns float64 (n,)."""
    return (1.0 / (1.0 + np.exp(a * decision + b))).mean(axis=1)


#: detoxify's class-name standardisation (detoxify/detoxify.py, ``load_checkpoint``).
_DETOXIFY_NAMES = {"toxic": "toxicity", "identity_hate": "identity_attack", "severe_toxic": "severe_toxicity"}


def _read_checkpoint(path: Path) -> dict:
    """``torch.load`` a detoxify checkpoint with ``weights_only=True`` (tensors and plain data only).

    A checkpoint that needs any other pickled object (a class, a callable: code) is refused;
    PyTorch docs, "torch.load" (``weights_only``).

    Raises:
        ToxicityUnavailableError: unpickling was refused, or ``config``/``state_dict`` is missing.
    """
    import pickle

    import torch

    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise ToxicityUnavailableError(f"{path}: refused to load (weights_only=True): {exc}") from None
    if not isinstance(loaded, dict) or "config" not in loaded or "state_dict" not in loaded:
        raise ToxicityUnavailableError(f"{path}: a detoxify checkpoint holds {{'config', 'state_dict'}}")
    return loaded


def load_detoxify(spec, model_dir: Path) -> DetoxifyToxicity:
    """Load a verified detoxify model (:func:`proxy.guardrails.models.verify_model` first) on CPU.

    Reads the checkpoint with ``weights_only=True`` (never detoxify's own ``load_checkpoint``,
    which unpickles with ``weights_only=False`` and downloads when given no file), then builds
    the network and tokenizer with detoxify's ``get_model_and_tokenizer`` from the local
    Hugging Face config directory only (``local_files_only``; no hub look-up).

    Args:
        spec: the manifest entry (:class:`proxy.guardrails.models.ModelSpec`); its options name
            ``checkpoint`` (file) and ``huggingface_config`` (directory), relative to ``model_dir``.
        model_dir: the verified model directory.

    Raises:
        ToxicityUnavailableError: the checkpoint is refused, malformed, or has no toxicity class;
        transformers' errors (OSError, ValueError) for an unusable config or tokenizer.
    """
    import detoxify
    from detoxify.detoxify import get_model_and_tokenizer

    checkpoint = model_dir / spec.options["checkpoint"]
    hf_dir = model_dir / spec.options["huggingface_config"]
    loaded = _read_checkpoint(checkpoint)
    args = dict(loaded["config"]["arch"]["args"])
    args["model_type"] = str(hf_dir)  # read the pinned local config, never the hub
    model, tokenizer = get_model_and_tokenizer(**args, state_dict=loaded["state_dict"],
                                               huggingface_config_path=str(hf_dir))
    wrapper = detoxify.Detoxify.__new__(detoxify.Detoxify)  # detoxify's predict() over our loaded parts
    wrapper.model, wrapper.tokenizer, wrapper.device = model.to("cpu"), tokenizer, "cpu"
    wrapper.class_names = [_DETOXIFY_NAMES.get(c, c) for c in loaded["config"]["dataset"]["args"]["classes"]]
    version = (f"detoxify=={importlib.metadata.version('detoxify')}; "
               f"{checkpoint.name}@sha256:{file_sha256(checkpoint)[:12]}")
    return DetoxifyToxicity(wrapper, f"detoxify:{spec.id}", version)


FALLBACKS = {"profanity-check": ProfanityCheckToxicity}
