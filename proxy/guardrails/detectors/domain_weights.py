"""Fitted weights of the Compliance domain classifier, cached so start-up does not refit.

Fitting :class:`~proxy.guardrails.detectors.domain.DomainClassifier` means embedding every
description and example of ``policies/compliance.yaml`` (~700 texts, seconds to tens of
seconds on a loaded CPU) and a logistic regression. The result is a linear soft-max model
(:class:`LinearSoftmax`), a few kB, identified by :func:`fit_key` = SHA-256 of everything it
depends on (training texts and labels in order, domain names, C, embedding model version, fit
method). It is looked up, in order, in the shipped artefact
``proxy/guardrails/artefacts/domain-logreg.npz`` and in the user cache
(``$SONATE_CACHE_DIR`` or ``~/.cache/sonate``, file ``domain/<key>.npz``); a file whose stored
key differs is ignored, so editing the policy can never load stale weights, it only costs one
refit. Files are read with numpy only (``allow_pickle=False``).

After editing the policy's ``detector:`` block, regenerate the shipped artefact (a unit test
checks it matches ``policies/compliance.yaml``):
``python -m proxy.guardrails.detectors.domain_weights policies/compliance.yaml``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from proxy.files import atomic_write

log = logging.getLogger(__name__)

FIT_METHOD = "sklearn-logreg-lbfgs-balanced-v1"
ARTEFACT = Path(__file__).resolve().parent.parent / "artefacts" / "domain-logreg.npz"


@dataclass(frozen=True)
class LinearSoftmax:
    """A fitted multinomial logistic regression: ``p = softmax(x @ coef.T + intercept)``.

    ``coef``: (n_classes, dim) float64; ``intercept``: (n_classes,). Columns of :meth:`proba`
    follow the class order used at fit (label ids 0..n-1). Formula: scikit-learn's
    ``LogisticRegression.predict_proba`` for the multinomial loss.
    """

    coef: np.ndarray
    intercept: np.ndarray

    def proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities, shape (len(x), n_classes); rows sum to 1."""
        z = x @ self.coef.T + self.intercept
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def fit_key(texts: list[str], labels: list[int], domains: list[str], c: float, model_version: str) -> str:
    """SHA-256 hex of the fit's inputs (JSON, sorted keys): any change gives a new key."""
    blob = json.dumps(
        {"texts": texts, "labels": labels, "domains": domains, "C": c,
         "embedding": model_version, "method": FIT_METHOD},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def fit(vectors: np.ndarray, labels: list[int], c: float) -> LinearSoftmax:
    """Fit the class-balanced logistic regression (scikit-learn, lbfgs) on ``vectors`` (n, dim).

    Labels must be 0..n_classes-1, every class present. Two classes are stored as the
    equivalent two-row soft-max (logits ``[0, w·x + b]``), so :meth:`LinearSoftmax.proba` is
    the same formula for any number of classes.
    """
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, max_iter=2000, class_weight="balanced")
    model.fit(vectors, np.asarray(labels))
    order = np.argsort(model.classes_)
    coef, intercept = model.coef_.astype(np.float64), model.intercept_.astype(np.float64)
    if coef.shape[0] == 1:  # binary: sigmoid(w·x + b) == softmax([0, w·x + b])[1]
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.concatenate([[0.0], intercept])
        return LinearSoftmax(coef, intercept)
    return LinearSoftmax(coef[order], intercept[order])


def cache_dir() -> Path:
    """The user cache directory for fitted domain weights."""
    root = os.environ.get("SONATE_CACHE_DIR") or os.path.expanduser("~/.cache/sonate")
    return Path(root) / "domain"


def _read(path: Path, key: str) -> LinearSoftmax | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:
                return None
            return LinearSoftmax(data["coef"].astype(np.float64), data["intercept"].astype(np.float64))
    except (OSError, KeyError, ValueError) as exc:
        if path.exists():
            log.warning("ignoring unreadable domain weights %s: %s", path, exc)
        return None


def load(key: str) -> LinearSoftmax | None:
    """The weights stored under ``key`` (shipped artefact first, then user cache), else None."""
    for path in (ARTEFACT, cache_dir() / f"{key}.npz"):
        model = _read(path, key)
        if model is not None:
            log.info("domain classifier weights loaded from %s", path)
            return model
    return None


def dump(model: LinearSoftmax, key: str, path: Path) -> None:
    """Write ``model`` with its ``key`` to ``path`` atomically (npz). Raises ``OSError``."""
    buffer = io.BytesIO()
    np.savez(buffer, key=np.array(key), coef=model.coef, intercept=model.intercept)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue(), mode=0o644)


def store(model: LinearSoftmax, key: str) -> None:
    """Save ``model`` in the user cache; a failure is logged, never raised (the fit is kept)."""
    try:
        dump(model, key, cache_dir() / f"{key}.npz")
    except OSError as exc:
        log.warning("could not cache the domain classifier weights: %s", exc)


def main(argv: list[str] | None = None) -> int:
    """Fit the classifier of the compliance policy file ``argv[0]`` and write :data:`ARTEFACT`."""
    import sys

    import yaml

    from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

    [policy] = sys.argv[1:] if argv is None else argv
    block = yaml.safe_load(Path(policy).read_text(encoding="utf-8"))["detector"]
    classifier = DomainClassifier(DomainClassifierConfig.model_validate(block))
    dump(classifier.weights, classifier.fit_key, ARTEFACT)
    print(f"wrote {ARTEFACT} (key {classifier.fit_key})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
