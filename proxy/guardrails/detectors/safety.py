"""The Safety policy's detector: toxic language + harmful intent, one ``score`` call per batch.

Configured by the ``detector:`` block of a safety policy::

    detector:
      toxicity:
        model: profanity-check          # shipped in the alt-profanity-check wheel; or a manifest model id
        manifest: null                  # a JSON model manifest (default proxy/guardrails/models.json)
        models_dir: null                # default $SONATE_MODELS_DIR or ~/.cache/sonate/models
        fallback: null                  # profanity-check: used when the model is missing or mismatched
      harmful_intent:
        artefact: harm-minilm-svm-v7     # in proxy/guardrails/artefacts, or a path
      guard:                             # optional second stage (proxy.guardrails.detectors.guard)
        enabled: false                   # LLM guard for the uncertain band only; off by default

A manifest model (e.g. ``detoxify-original``) is loaded only after every file matched its
pinned sha256 (:func:`proxy.guardrails.models.verify_model`); it is never downloaded here. When
it cannot be used, start-up fails with a message naming ``sonate models fetch <id>`` — unless
the operator configured ``fallback``, which is then used, logged as a WARNING, named in the
detector's name and version (so in every Safety receipt's ``detector``) and in ``/readyz``.

Models load once in :func:`load_safety_detector`; ``SafetyDetector.score`` never loads or downloads.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from proxy.guardrails import normalise
from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.guard import GuardConfig, LlmGuard, load_guard
from proxy.guardrails.detectors.harm import (
    DEFAULT_ARTEFACT,
    DEFAULT_WINDOW_THRESHOLD,
    HarmClassifier,
    load_harm_classifier,
)
from proxy.guardrails.detectors.mentions import without_mentions
from proxy.guardrails.detectors.toxicity import (
    FALLBACKS,
    ToxicityDetector,
    load_detoxify,
)
from proxy.guardrails.models import ModelError, load_manifest, models_dir, verify_model

HARMFUL_INTENT = "harmful_intent"
#: With a guard: the harm classifier's own probability, kept next to the (possibly re-scored) one.
FIRST_STAGE = "harmful_intent_first_stage"
#: The registry-shipped toxicity detector (its model is inside the alt-profanity-check wheel).
PROFANITY_CHECK = "profanity-check"
#: Manifest loaders → the function that reads a verified model directory.
LOADERS = {"detoxify": load_detoxify}


class ToxicityConfig(BaseModel):
    """Which toxicity model, where its pinned files are, and the operator's fallback (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(PROFANITY_CHECK, min_length=1)
    manifest: Path | None = None
    models_dir: Path | None = None
    fallback: Literal["profanity-check"] | None = None


class HarmfulIntentConfig(BaseModel):
    """Which harm-classifier artefact to load (name in the shipped artefacts dir, or a path), and the
    probability from which a window of a long text counts (None: long texts judged by their
    truncated whole only; :meth:`~proxy.guardrails.detectors.harm.HarmClassifier.predict_proba_located`)."""

    model_config = ConfigDict(extra="forbid")

    artefact: str = DEFAULT_ARTEFACT
    window_threshold: Decimal | None = Field(Decimal(str(DEFAULT_WINDOW_THRESHOLD)), ge=0, le=1)


class SafetyDetectorConfig(BaseModel):
    """The ``detector:`` block of a safety policy YAML."""

    model_config = ConfigDict(extra="forbid")

    toxicity: ToxicityConfig = ToxicityConfig()
    harmful_intent: HarmfulIntentConfig = HarmfulIntentConfig()
    guard: GuardConfig = GuardConfig()


class Scores(dict):
    """One text's scores, category -> probability, plus ``located``: category -> ``{"start", "end",
    "windows"}`` (character offsets of the window of a long text that gave the score; empty for a
    text judged whole). Receipts carry ``located`` of the worst text as evidence."""

    def __init__(self, scores: dict[str, float], located: dict[str, dict[str, int | str]]) -> None:
        super().__init__(scores)
        self.located = located


class SafetyDetector:
    """Scores texts for toxic language and harmful intent.

    Attributes:
        name: active detectors, e.g. ``"profanity-check+harm-minilm-svm"``.
        version: their versions, e.g. ``"alt-profanity-check==1.9.1+harm-minilm-svm-v7@sha256:..."``.
        components: ``[{"name", "version"}, ...]`` for receipt evidence: the toxicity model, the
            harm classifier and the embedding model it reads; the toxicity entry carries
            ``"fallback_for": <model id>`` when the operator's fallback replaced the configured model.
        fallback: None, or ``{"model", "reason"}`` when the configured fallback is in use (``/readyz``).
        categories: score keys returned per text (toxicity categories + ``"harmful_intent"``, and
            ``"harmful_intent_first_stage"`` when a guard is configured).
        guard: None, or the :class:`~proxy.guardrails.detectors.guard.LlmGuard` consulted for texts
            whose harm probability lies in its band (that text's ``harmful_intent`` becomes the
            guard's verdict, 1.0 unsafe / 0.0 safe, or per its fail mode).

    Thread-safe; CPU-bound (run it in an executor from async code).
    """

    def __init__(self, toxicity: ToxicityDetector, harm: HarmClassifier, guard: LlmGuard | None = None,
                 window_threshold: float | None = DEFAULT_WINDOW_THRESHOLD) -> None:
        """Combine loaded detectors (use :func:`load_safety_detector`); ``window_threshold``: from which
        harm probability a window of a long text counts (None: no windows)."""
        self.toxicity = toxicity
        self.harm = harm
        self.window_threshold = window_threshold
        self.guard = guard
        self.name = f"{toxicity.name}+{harm.name}"
        self.version = f"{toxicity.version}+{harm.version}"
        self.fallback = getattr(toxicity, "fallback_for", None)
        toxicity_component = {"name": toxicity.name, "version": toxicity.version}
        if self.fallback is not None:
            toxicity_component["fallback_for"] = self.fallback["model"]
        self.components: list[dict[str, Any]] = [
            toxicity_component,
            {"name": harm.name, "version": harm.version},
            {"name": embeddings.MODEL_NAME, "version": embeddings.model_version()},
        ]
        self.categories = [*toxicity.categories, HARMFUL_INTENT]
        if guard is not None:
            self.components.append({"name": guard.name, "version": guard.version,
                                    "band": [str(b) for b in guard.config.band]})
            self.categories.append(FIRST_STAGE)
            self.name, self.version = f"{self.name}+{guard.name}", f"{self.version}+{guard.version}"

    def score(self, texts: list[str], answers: bool = False) -> list[Scores]:
        """Score a batch.

        Args:
            texts: n strings.
            answers: the texts are a model's answers, not a client's (only the words talked about
                differ: :func:`~proxy.guardrails.detectors.mentions.mention_spans`).

        Returns:
            n :class:`Scores` (dicts), category -> probability (float in [0, 1]); keys are
            ``self.categories`` (always including ``"toxicity"`` and ``"harmful_intent"``). A text
            longer than the embedding model reads carries ``located["harmful_intent"]``: the window
            that gave its harm probability (:meth:`HarmClassifier.predict_proba_located`). Toxic
            language is scored on the text without the words it talks about
            (:func:`~proxy.guardrails.detectors.mentions.without_mentions`: "Where does the word
            "idiot" come from?"); harmful intent on the text as written.
        """
        texts = list(texts)
        if not texts:
            return []
        columns = dict(self.toxicity.score([without_mentions(text, answers) for text in texts]))
        columns[HARMFUL_INTENT], located = self.harm.predict_proba_located(texts, self.window_threshold)
        if self.guard is not None:
            columns[FIRST_STAGE] = columns[HARMFUL_INTENT].copy()
            columns[HARMFUL_INTENT] = self._second_stage(texts, columns[FIRST_STAGE])
        clipped = {k: np.clip(np.asarray(v, dtype=np.float64), 0.0, 1.0) for k, v in columns.items()}
        return [Scores({k: float(v[i]) for k, v in clipped.items()},
                       {} if where is None else {HARMFUL_INTENT: where})
                for i, where in enumerate(located)]

    def _second_stage(self, texts: list[str], first: np.ndarray) -> np.ndarray:
        """Harm scores after consulting the guard for each text whose probability is in its band."""
        out = np.asarray(first, dtype=np.float64).copy()
        guard = self.guard
        if guard is None:
            return out
        for i, (text, probability) in enumerate(zip(texts, out)):
            if guard.in_band(float(probability)):
                out[i] = guard.rescore(float(probability), guard.classify(text))
        return out

    def detect(self, texts: list[str], answers: bool = False) -> list[Scores]:
        """The :class:`~proxy.guardrails.detector.Detector` entry point: :meth:`score` of each text and
        of its other readings (:func:`proxy.guardrails.normalise.variants`: look-alike characters
        folded, base64/hex blocks decoded, rot13 or reversal where the text asks for it), per
        category the highest; ``located`` only when the text as written gave the harm score. One
        :meth:`score` call for all readings; ``answers`` as there."""
        readings = [[text, *normalise.variants(text)] for text in texts]
        if all(len(rs) == 1 for rs in readings):
            return self.score(texts, answers)
        unique = list(dict.fromkeys(r for rs in readings for r in rs))
        scored = dict(zip(unique, self.score(unique, answers)))
        return [_highest([scored[r] for r in rs]) for rs in readings]

    def detect_answers(self, texts: list[str]) -> list[Scores]:
        """:meth:`detect` of a model's answers (``answers=True``): an answer explains a word without
        asking about it (:func:`~proxy.guardrails.detectors.mentions.mention_spans`)."""
        return self.detect(texts, answers=True)

    def warm_up(self) -> None:
        """Run one tiny batch so lazily initialised parts (the embedding model) load at start-up."""
        self.score(["warm up"])


def _highest(readings: list[Scores]) -> Scores:
    """Per category the highest score of a text's ``readings`` (the text as written first); the
    written text's ``located`` kept only where no other reading scored higher."""
    written = readings[0]
    best = {c: max(r[c] for r in readings) for c in written}
    located = {c: where for c, where in written.located.items() if best[c] == written[c]}
    return Scores(best, located)


def _load_manifest_model(config: ToxicityConfig) -> ToxicityDetector:
    """Verify a manifest model's files against their pins, then load it. Raises ModelError."""
    specs = load_manifest(config.manifest)
    spec = specs.get(config.model)
    if spec is None:
        raise ModelError(f"toxicity model {config.model!r} is neither {PROFANITY_CHECK!r} nor in the model "
                         f"manifest {config.manifest or 'proxy/guardrails/models.json'} "
                         f"(known: {', '.join(sorted(specs)) or 'none'})")
    if spec.loader not in LOADERS:
        raise ModelError(f"model {spec.id!r}: unknown loader {spec.loader!r} (known: {', '.join(LOADERS)})")
    directory = verify_model(spec, models_dir(config.models_dir))
    return LOADERS[spec.loader](spec, directory)


def _load_toxicity(config: ToxicityConfig, log: logging.Logger) -> ToxicityDetector:
    """The configured toxicity detector, or the configured fallback (named as such) when it fails.

    Raises ModelError (ToxicityUnavailableError included) when the model cannot be used and no
    fallback is configured.
    """
    if config.model == PROFANITY_CHECK:
        return FALLBACKS[PROFANITY_CHECK]()
    try:
        return _load_manifest_model(config)
    except ModelError as exc:
        if config.fallback is None:
            raise
        reason = str(exc)
    fallback = FALLBACKS[config.fallback]()
    fallback.fallback_for = {"model": config.model, "reason": reason}
    fallback.version = f"{fallback.version} (configured fallback for {config.model})"
    log.warning("toxicity detector: using the configured fallback %s (%s) instead of %s: %s",
                fallback.name, fallback.version, config.model, reason)
    return fallback


def load_safety_detector(
    config: SafetyDetectorConfig,
    log: logging.Logger = logging.getLogger(__name__),  # noqa: B008  (one logger per name)
) -> SafetyDetector:
    """Load every model the Safety policy needs, once.

    Args:
        config: the policy's ``detector:`` block.
        log: receives an INFO line naming the active detectors, and a WARNING when the configured
            toxicity fallback replaces the configured model (with the reason).

    Raises:
        proxy.guardrails.models.ModelError: the toxicity model is unknown, unpinned, missing, fails its
            sha256 or is refused by ``torch.load(weights_only=True)`` (ToxicityUnavailableError), and
            no ``fallback`` is configured; the message names ``sonate models fetch <id>``.
        proxy.guardrails.detectors.harm.ArtefactError: the harm artefact is missing or invalid.
        proxy.config.ConfigError: the guard's ``api_key`` names an unset environment variable.
    """
    harm = load_harm_classifier(config.harmful_intent.artefact)
    toxicity = _load_toxicity(config.toxicity, log)
    embeddings.warm_up()  # the embedding model loads now, not on the first request
    window = config.harmful_intent.window_threshold
    detector = SafetyDetector(toxicity, harm, load_guard(config.guard), None if window is None else float(window))
    log.info("safety detector: %s (%s)", detector.name, detector.version)
    return detector
