"""The Safety policy's detector: toxic language + harmful intent, one ``score`` call per batch.

Configured by the ``detector:`` block of a safety policy::

    detector:
      toxicity:
        model: original                 # detoxify model_type
        checkpoint: null                # optional local detoxify checkpoint
        huggingface_config_path: null   # optional local HF config/tokenizer dir for it
        fallback: profanity-check       # used (with a WARNING) when detoxify cannot load; null = fail
      harmful_intent:
        artefact: harm-minilm-svm-v2     # in proxy/guardrails/artefacts, or a path

Models load once in :func:`load_safety_detector`; ``SafetyDetector.score`` never loads or downloads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.harm import DEFAULT_ARTEFACT, HarmClassifier, load_harm_classifier
from proxy.guardrails.detectors.toxicity import (
    FALLBACKS,
    ToxicityDetector,
    ToxicityUnavailableError,
    load_detoxify,
)

HARMFUL_INTENT = "harmful_intent"


class ToxicityConfig(BaseModel):
    """detoxify settings and the explicit fallback (see module docstring)."""

    model_config = ConfigDict(extra="forbid")

    model: Literal["original", "unbiased", "multilingual", "original-small", "unbiased-small"] = "original"
    checkpoint: Path | None = None
    huggingface_config_path: Path | None = None
    fallback: Literal["profanity-check"] | None = "profanity-check"


class HarmfulIntentConfig(BaseModel):
    """Which harm-classifier artefact to load (name in the shipped artefacts dir, or a path)."""

    model_config = ConfigDict(extra="forbid")

    artefact: str = DEFAULT_ARTEFACT


class SafetyDetectorConfig(BaseModel):
    """The ``detector:`` block of a safety policy YAML."""

    model_config = ConfigDict(extra="forbid")

    toxicity: ToxicityConfig = ToxicityConfig()
    harmful_intent: HarmfulIntentConfig = HarmfulIntentConfig()


class SafetyDetector:
    """Scores texts for toxic language and harmful intent.

    Attributes:
        name: active detectors, e.g. ``"profanity-check+harm-minilm-svm"``.
        version: their versions, e.g. ``"alt-profanity-check==1.9.1+harm-minilm-svm-v2@sha256:..."``.
        components: ``[{"name", "version"}, ...]`` for receipt evidence: the toxicity model, the
            harm classifier and the embedding model it reads.
        categories: score keys returned per text (toxicity categories + ``"harmful_intent"``).

    Thread-safe; CPU-bound (run it in an executor from async code).
    """

    def __init__(self, toxicity: ToxicityDetector, harm: HarmClassifier) -> None:
        """Combine loaded detectors (use :func:`load_safety_detector`)."""
        self.toxicity = toxicity
        self.harm = harm
        self.name = f"{toxicity.name}+{harm.name}"
        self.version = f"{toxicity.version}+{harm.version}"
        self.components = [
            {"name": toxicity.name, "version": toxicity.version},
            {"name": harm.name, "version": harm.version},
            {"name": embeddings.MODEL_NAME, "version": embeddings.model_version()},
        ]
        self.categories = [*toxicity.categories, HARMFUL_INTENT]

    def score(self, texts: list[str]) -> list[dict[str, float]]:
        """Score a batch.

        Args:
            texts: n strings.

        Returns:
            n dicts, category -> probability (float in [0, 1]); keys are ``self.categories``
            (always including ``"toxicity"`` and ``"harmful_intent"``).
        """
        texts = list(texts)
        if not texts:
            return []
        columns = dict(self.toxicity.score(texts))
        columns[HARMFUL_INTENT] = self.harm.predict_proba(texts)
        clipped = {k: np.clip(np.asarray(v, dtype=np.float64), 0.0, 1.0) for k, v in columns.items()}
        return [{k: float(v[i]) for k, v in clipped.items()} for i in range(len(texts))]

    def detect(self, texts: list[str]) -> list[dict[str, float]]:
        """The :class:`~proxy.guardrails.detector.Detector` entry point: :meth:`score`."""
        return self.score(texts)

    def warm_up(self) -> None:
        """Run one tiny batch so lazily initialised parts (the embedding model) load at start-up."""
        self.score(["warm up"])


def _load_toxicity(config: ToxicityConfig, log: logging.Logger) -> ToxicityDetector:
    try:
        return load_detoxify(config.model, config.checkpoint, config.huggingface_config_path)
    except Exception as exc:  # detoxify surfaces URLError/OSError/ValueError/RuntimeError alike
        reason = f"{type(exc).__name__}: {exc}"
        if config.fallback is None:
            raise ToxicityUnavailableError(
                f"detoxify ({config.model}, checkpoint={config.checkpoint}) could not be loaded and "
                f"no fallback is configured: {reason}"
            ) from exc
        fallback = FALLBACKS[config.fallback]()
        log.warning(
            "toxicity detector: using fallback %s (%s) because detoxify %s (checkpoint=%s) "
            "could not be loaded: %s",
            fallback.name, fallback.version, config.model, config.checkpoint, reason,
        )
        return fallback


def load_safety_detector(
    config: SafetyDetectorConfig,
    log: logging.Logger = logging.getLogger(__name__),
) -> SafetyDetector:
    """Load every model the Safety policy needs, once.

    Args:
        config: the policy's ``detector:`` block.
        log: receives an INFO line naming the active detectors, and a WARNING when the toxicity
            fallback replaces detoxify (with the reason).

    Raises:
        ToxicityUnavailableError: detoxify failed and ``fallback`` is null.
        proxy.guardrails.detectors.harm.ArtefactError: the harm artefact is missing or invalid.
    """
    harm = load_harm_classifier(config.harmful_intent.artefact)
    toxicity = _load_toxicity(config.toxicity, log)
    embeddings.warm_up()  # the embedding model loads now, not on the first request
    detector = SafetyDetector(toxicity, harm)
    log.info("safety detector: %s (%s)", detector.name, detector.version)
    return detector
