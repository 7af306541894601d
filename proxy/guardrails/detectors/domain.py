"""Regulated-domain classifier for Compliance routing (legal / health / finance vs the rest).

Method: every domain in the ``detector:`` block of ``policies/compliance.yaml`` has a
description and typical user questions written for this task. At construction the
classifier embeds them with all-MiniLM-L6-v2 (:mod:`.embeddings`) and fits a class-balanced
RBF support-vector machine, one-vs-one with Platt-coupled probabilities (scikit-learn; served
with numpy, :class:`~.domain_weights.PairwiseRbfSvm`), on those examples only: nothing else is
trained on, nothing is downloaded. The fitted weights are cached by a hash of everything they depend on
(:mod:`.domain_weights`), so only the first start with a given policy pays for the fit.
A query's domain is the arg-max class; it is routed as regulated when the summed
probability of the regulated domains reaches ``threshold``, and it is *ambiguous* when
that sum lies within ``margin`` below the threshold; ``ambiguous`` then decides: escalate to
a human, forward with a notice (``notice``), or allow — except that an ambiguous query asking
about the writer's own situation (``personal_escalates``;
:func:`~.privacy_context.personal_request`: "should I stop taking my medication?", "draft my
will") is escalated: a request for personal legal, medical or financial advice is the riskier
kind, an information question in the band ("is it legal to marry your cousin in the US?") the
milder one. How threshold, margin and C were chosen: the comment in policies/compliance.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.guardrails import framings
from proxy.guardrails.detectors import domain_weights, embeddings
from proxy.guardrails.detectors.privacy_context import personal_request

GENERAL = "general"


class DomainSpec(BaseModel):
    """One domain: what it covers, whether it is regulated, typical user questions."""

    model_config = ConfigDict(extra="forbid")
    description: str
    regulated: bool
    examples: list[str] = Field(min_length=3)


class DomainClassifierConfig(BaseModel):
    """The ``detector:`` block of ``policies/compliance.yaml``.

    Attributes:
        domains: name -> spec; must contain the non-regulated ``general`` contrast domain and
            at least one regulated domain.
        threshold: summed probability (0..1) of the regulated domains from which a query is
            routed as regulated.
        margin: width (0..1) of the band below ``threshold`` where the decision is ambiguous.
        ambiguous: what an ambiguous query does: ``escalate`` (to a human, model not called),
            ``notice`` (forwarded; the client is shown ``ambiguous_notice``) or ``allow``.
        personal_escalates: an ambiguous query that asks about the writer's own situation
            (:func:`~.privacy_context.personal_request`) is escalated whatever ``ambiguous`` says.
        ambiguous_notice: the notice text for ``notice``; ``{domain}`` is replaced by the
            most probable regulated domain. Printable ASCII (it travels in an HTTP header).
        regularization: the SVM's C (inverse regularisation strength; scikit-learn SVC).
        framed_copies: copies of every description and example with a greeting, reference or
            sign-off around it (:func:`proxy.guardrails.framings.training_copies`, seed 0) trained
            on as well, so a friendly line around a regulated question does not dilute it (0: none).
    """

    model_config = ConfigDict(extra="forbid")
    domains: dict[str, DomainSpec]
    threshold: float = Field(default=0.5, gt=0.0, le=1.0)
    margin: float = Field(default=0.1, ge=0.0, lt=1.0)
    ambiguous: Literal["escalate", "notice", "allow"] = "escalate"
    personal_escalates: bool = True
    ambiguous_notice: str = (
        "This answer touches a regulated domain ({domain}): it is general information, not "
        "professional {domain} advice."
    )
    regularization: float = Field(default=3.0, gt=0.0)
    framed_copies: int = Field(default=1, ge=0, le=4)

    @field_validator("ambiguous_notice")
    @classmethod
    def _header_safe(cls, value: str) -> str:
        if not value.strip() or not all(32 <= ord(c) < 127 for c in value):
            raise ValueError("must be non-empty printable ASCII (sent in the x-sonate-notice header)")
        try:
            value.format(domain="health")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"only the {{domain}} placeholder is allowed: {exc}") from None
        return value

    @model_validator(mode="after")
    def _has_contrast(self) -> "DomainClassifierConfig":
        if GENERAL not in self.domains or self.domains[GENERAL].regulated:
            raise ValueError("domains must include a non-regulated 'general' domain")
        if not any(d.regulated for d in self.domains.values()):
            raise ValueError("at least one domain must be regulated")
        return self


@dataclass(frozen=True)
class DomainResult:
    """Classification of one query.

    ``domain``: arg-max domain name; ``confidence``: its probability in [0, 1];
    ``scores``: probability per domain (sums to 1); ``regulated``: route to a human (the
    regulated probability reached the threshold, or the query is ambiguous and the policy
    escalates ambiguous queries, or the query is ambiguous and ``personal``); ``ambiguous``: the
    regulated probability fell in the margin band just below the threshold; ``personal``: an
    ambiguous query that asks about the writer's own situation and ``personal_escalates`` is on
    (always False outside the band); ``notice``: the notice text (``ambiguous_notice``
    with the domain filled in) when the query is ambiguous and the policy forwards such queries
    with a notice, else None. When ``regulated`` or ``notice`` is true but the arg-max domain is
    not regulated, ``domain`` is the most probable regulated domain.
    """

    domain: str
    confidence: float
    scores: dict[str, float]
    regulated: bool
    ambiguous: bool
    notice: str | None = None
    personal: bool = False


class DomainClassifier:
    """Embedding + support-vector-machine domain classifier, fitted (or loaded from the weights
    cache, :mod:`.domain_weights`) once at construction.

    Attributes: ``weights`` (:class:`~.domain_weights.PairwiseRbfSvm`), ``fit_key`` (SHA-256 of
    the fit's inputs, :func:`~.domain_weights.fit_key`), ``version`` (for receipts).
    Thread-safe after construction (read-only model; embedding calls are serialised by
    :mod:`.embeddings`). CPU-bound: on an event loop, call it in an executor.
    """

    name = "domain-svm"

    def __init__(self, config: DomainClassifierConfig):
        self.config = config
        self.domains = list(config.domains)
        self._regulated = np.array([config.domains[d].regulated for d in self.domains])
        texts: list[str] = []
        labels: list[int] = []
        for index, name in enumerate(self.domains):
            spec = config.domains[name]
            for text in [spec.description, *spec.examples]:
                texts.append(text)
                labels.append(index)
        for copy in framings.training_copies(texts, config.framed_copies, seed=0):  # part of the fit key
            texts, labels = texts + copy, labels + labels[:len(copy)]
        embedding_version = embeddings.model_version()
        key = domain_weights.fit_key(texts, labels, self.domains, config.regularization, embedding_version)
        model = domain_weights.load(key)
        if model is None:  # first start with this policy: fit (embeds every example), then cache
            model = domain_weights.fit(embeddings.embed(texts, remember=False), labels, config.regularization)
            domain_weights.store(model, key)
        self.weights = model
        self.fit_key = key
        self.version = (
            f"{embedding_version} + svm-rbf(C={config.regularization}, "
            f"n={len(texts)}, domains={len(self.domains)})@sha256:{key[:12]}"
        )

    def probabilities(self, texts: list[str]) -> np.ndarray:
        """Domain probabilities, shape (len(texts), n_domains), columns in ``self.domains`` order.

        A text longer than the embedding model reads (256 word pieces) is routed by its truncated
        whole. Routing by its most regulated sentence window (as Safety scores windows) escalated 59
        of 66 long benign texts that the whole did not (bench/long_inputs.py; 11 even at a window
        threshold of 0.995): a long text nearly always holds one sentence about law, health or money.
        """
        if not texts:
            return np.zeros((0, len(self.domains)))
        return self.weights.proba(embeddings.embed(texts).astype(np.float64))

    def classify(self, texts: list[str]) -> list[DomainResult]:
        """One :class:`DomainResult` per text, same order."""
        results = []
        cfg = self.config
        for text, row in zip(texts, self.probabilities(texts)):
            regulated_p = float(row[self._regulated].sum())
            ambiguous = cfg.threshold - cfg.margin <= regulated_p < cfg.threshold
            personal = ambiguous and cfg.personal_escalates and personal_request(text)
            regulated = regulated_p >= cfg.threshold or (ambiguous and (cfg.ambiguous == "escalate" or personal))
            best = int(np.argmax(row))
            with_notice = ambiguous and not regulated and cfg.ambiguous == "notice"
            if (regulated or with_notice) and not self._regulated[best]:
                best = int(np.argmax(np.where(self._regulated, row, -1.0)))
            notice = cfg.ambiguous_notice.format(domain=self.domains[best]) if with_notice else None
            results.append(
                DomainResult(
                    domain=self.domains[best],
                    confidence=round(float(row[best]), 4),
                    scores={d: round(float(p), 4) for d, p in zip(self.domains, row)},
                    regulated=regulated,
                    ambiguous=ambiguous,
                    notice=notice,
                    personal=personal,
                )
            )
        return results

    def detect(self, texts: list[str]) -> list[DomainResult]:
        """The :class:`~proxy.guardrails.detector.Detector` entry point: :meth:`classify`."""
        return self.classify(texts)
