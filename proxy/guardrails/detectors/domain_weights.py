"""Fitted weights of the Compliance domain classifier, cached so start-up does not refit.

Fitting :class:`~proxy.guardrails.detectors.domain.DomainClassifier` means embedding every
description and example of ``policies/compliance.yaml`` and their framed copies (~2,500 texts,
seconds to tens of seconds on a loaded CPU) and a support-vector machine. The result is a :class:`PairwiseRbfSvm`
(support vectors, their dual coefficients and the pairwise Platt sigmoids, ~2 MB), identified by
:func:`fit_key` = SHA-256 of everything it depends on (training texts and labels in order, domain
names, C, embedding model version, fit method). It is looked up, in order, in the shipped artefact
``proxy/guardrails/artefacts/domain-svm.npz`` and in the user cache (``$SONATE_CACHE_DIR`` or
``~/.cache/sonate``, file ``domain/<key>.npz``); a file whose stored key differs is ignored, so
editing the policy can never load stale weights, it only costs one refit. Files are read with
numpy only (``allow_pickle=False``); the serving process never imports scikit-learn.

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
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from proxy.files import atomic_write
from proxy.guardrails.detectors.kernels import rbf_kernel

log = logging.getLogger(__name__)

FIT_METHOD = "sklearn-svc-rbf-ovo-platt-balanced-v1"
ARTEFACT = Path(__file__).resolve().parent.parent / "artefacts" / "domain-svm.npz"
#: libsvm's bounds on a pairwise probability (``svm_predict_probability``: min_prob = 1e-7).
MIN_PROB = 1e-7
#: The arrays a stored model consists of (besides its ``key``).
FIELDS = ("support_vectors", "dual_coef", "intercept", "n_support", "gamma", "prob_a", "prob_b")


@dataclass(frozen=True)
class PairwiseRbfSvm:
    """A fitted multi-class C-SVM with an RBF kernel, one-vs-one, with Platt-coupled probabilities.

    Attributes (scikit-learn ``SVC`` names in brackets): ``support_vectors`` (n_sv, dim) float32
    (embeddings, as the encoder gives them), grouped by class [``support_vectors_``]; ``dual_coef``
    (n_classes - 1, n_sv) [``dual_coef_``]; ``intercept`` (n_pairs,) [``intercept_``]; ``n_support``
    (n_classes,) int [``n_support_``]; ``gamma`` () the kernel's resolved width [``_gamma``];
    ``prob_a``, ``prob_b`` (n_pairs,) the pairwise Platt sigmoids [``probA_``, ``probB_``]. Pairs
    are ``(i, j)``, i < j, in class order.

    :meth:`proba` follows libsvm's ``svm_predict_probability`` (what scikit-learn's
    ``SVC.predict_proba`` runs): the decision value of each pair (Chang & Lin, "LIBSVM: a library
    for support vector machines", ACM TIST 2011, section 8), Platt's sigmoid of it (Platt 1999, as
    improved by Lin, Lin & Weng 2007, bounded to [1e-7, 1 - 1e-7]), and the pairwise probabilities
    coupled into class probabilities by Wu, Lin & Weng, "Probability estimates for multi-class
    classification by pairwise coupling", JMLR 5 (2004), method 2 (:func:`couple`: solved exactly,
    where libsvm iterates to a tolerance).
    """

    support_vectors: np.ndarray
    dual_coef: np.ndarray
    intercept: np.ndarray
    n_support: np.ndarray
    gamma: float
    prob_a: np.ndarray
    prob_b: np.ndarray

    @property
    def n_classes(self) -> int:
        """Number of classes (columns of :meth:`proba`)."""
        return len(self.n_support)

    @cached_property
    def _pair_coef(self) -> np.ndarray:
        """(n_sv, n_pairs): column ``(i, j)`` holds the dual coefficients of class i's support vectors
        against j (``dual_coef[j - 1]``) and of class j's against i (``dual_coef[i]``), zeros elsewhere
        (the layout libsvm and scikit-learn document for ``dual_coef_``)."""
        start = np.concatenate([[0], np.cumsum(self.n_support)])
        out = np.zeros((len(self.support_vectors), len(self.intercept)))
        pair = 0
        for i in range(self.n_classes):
            for j in range(i + 1, self.n_classes):
                si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
                out[si, pair], out[sj, pair] = self.dual_coef[j - 1, si], self.dual_coef[i, sj]
                pair += 1
        return out

    @cached_property
    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs ``(i, j)``, i < j, in class order, as index arrays (``np.triu_indices``)."""
        return np.triu_indices(self.n_classes, 1)

    @cached_property
    def _sv_norms(self) -> np.ndarray:
        """(n_sv,) squared norms of the support vectors, summed in float64."""
        return np.square(self.support_vectors, dtype=np.float64).sum(axis=1)

    @cached_property
    def _sv32(self) -> np.ndarray:
        """The support vectors as one contiguous float32 array (no copy when they are one already)."""
        return np.ascontiguousarray(self.support_vectors, dtype=np.float32)

    def decision(self, x: np.ndarray) -> np.ndarray:
        """One-vs-one decision values, shape (len(x), n_pairs): positive favours the pair's first
        class (scikit-learn's ``decision_function`` with ``decision_function_shape="ovo"``; the
        kernel in float32 dot products, :func:`~.kernels.rbf_kernel`: within 1e-5 of it)."""
        return rbf_kernel(x, self._sv32, self._sv_norms, self.gamma) @ self._pair_coef + self.intercept

    def proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities of ``x`` (n, dim), shape (n, n_classes); rows sum to 1."""
        k = self.n_classes
        f = self.decision(x) * self.prob_a + self.prob_b
        pairwise = np.clip(1.0 / (1.0 + np.exp(np.clip(f, -700.0, 700.0))), MIN_PROB, 1.0 - MIN_PROB)
        i, j = self._pairs
        r = np.zeros((len(x), k, k))
        r[:, i, j], r[:, j, i] = pairwise, 1.0 - pairwise
        return couple(r)


def couple(r: np.ndarray) -> np.ndarray:
    """Class probabilities from pairwise ones: ``r`` (n, k, k) with ``r[:, i, j]`` = P(i | i or j)
    → (n, k), rows summing to 1.

    Wu, Lin & Weng (2004), method 2: ``p`` minimises ``pᵀQp`` subject to ``Σp = 1``, with
    ``Q[t, t] = Σ_{j≠t} r[j, t]²`` and ``Q[t, j] = -r[j, t]·r[t, j]`` (their eq. 21), solved exactly
    as the linear system ``[[Q, 1], [1ᵀ, 0]]·[p; b] = [0; 1]`` (one batched solve). libsvm's
    ``multiclass_probability`` (scikit-learn's ``predict_proba``) approaches the same minimiser
    iteratively and stops once its gradient is within 0.005/k, so its probabilities differ from
    these by < 5e-3 (tests/unit/guardrails/detectors/test_domain.py). The solution is non-negative (their Theorem 2);
    rounding below 0 is clipped and the row renormalised.
    """
    n, k, _ = r.shape
    diagonal = np.arange(k)
    q = -np.swapaxes(r, 1, 2) * r
    q[:, diagonal, diagonal] = (r * r).sum(axis=1) - r[:, diagonal, diagonal] ** 2
    system = np.zeros((n, k + 1, k + 1))
    system[:, :k, :k] = q
    system[:, :k, k] = system[:, k, :k] = 1.0
    rhs = np.zeros((n, k + 1, 1))
    rhs[:, k] = 1.0
    p = np.clip(np.linalg.solve(system, rhs)[:, :k, 0], 0.0, None)
    return p / p.sum(axis=1, keepdims=True)


def fit_key(texts: list[str], labels: list[int], domains: list[str], c: float, model_version: str) -> str:
    """SHA-256 hex of the fit's inputs (JSON, sorted keys): any change gives a new key."""
    blob = json.dumps(
        {"texts": texts, "labels": labels, "domains": domains, "C": c,
         "embedding": model_version, "method": FIT_METHOD},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def fit(vectors: np.ndarray, labels: list[int], c: float) -> PairwiseRbfSvm:
    """Fit the class-balanced RBF C-SVM with probability estimates (scikit-learn ``SVC``, gamma
    "scale", the pairwise Platt parameters from libsvm's internal 5-fold CV with a fixed seed) on
    ``vectors`` (n, dim). Labels must be 0..n_classes-1 with every class present; raises
    ValueError otherwise."""
    from sklearn.svm import SVC

    y = np.asarray(labels)
    if sorted(set(y.tolist())) != list(range(int(y.max()) + 1)):
        raise ValueError("labels must be 0..n_classes-1 with every class present")
    model = SVC(C=c, kernel="rbf", gamma="scale", class_weight="balanced", probability=True, random_state=0)
    with warnings.catch_warnings():
        # scikit-learn 1.9 deprecates probability=True (removal planned for 1.11; requirements pin
        # 1.9.1). Its suggested replacement, CalibratedClassifierCV, calibrates one-vs-rest scores:
        # another model than the pairwise coupling served here.
        warnings.simplefilter("ignore", FutureWarning)
        model.fit(vectors, y)
        prob_a, prob_b = model.probA_, model.probB_
    # scikit-learn negates dual_coef_ and intercept_ of a two-class SVC (its decision_function then
    # favours classes_[1]); libsvm's own signs, which its probability estimate uses, are kept here.
    sign = -1.0 if len(model.classes_) == 2 else 1.0
    return PairwiseRbfSvm(np.ascontiguousarray(model.support_vectors_, dtype=np.float32),
                          sign * model.dual_coef_.astype(np.float64), sign * model.intercept_.astype(np.float64),
                          model.n_support_.astype(np.int64), float(model._gamma), prob_a.astype(np.float64),
                          prob_b.astype(np.float64))


def cache_dir() -> Path:
    """The user cache directory for fitted domain weights."""
    root = os.environ.get("SONATE_CACHE_DIR") or os.path.expanduser("~/.cache/sonate")
    return Path(root) / "domain"


def _read(path: Path, key: str) -> PairwiseRbfSvm | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:
                return None
            arrays = {name: data[name] for name in FIELDS}
        return PairwiseRbfSvm(**{name: (float(v) if name == "gamma" else
                                        v.astype(np.int64 if name == "n_support" else
                                                 np.float32 if name == "support_vectors" else np.float64))
                                 for name, v in arrays.items()})
    except (OSError, KeyError, ValueError) as exc:
        if path.exists():
            log.warning("ignoring unreadable domain weights %s: %s", path, exc)
        return None


def load(key: str) -> PairwiseRbfSvm | None:
    """The weights stored under ``key`` (shipped artefact first, then user cache), else None."""
    for path in (ARTEFACT, cache_dir() / f"{key}.npz"):
        model = _read(path, key)
        if model is not None:
            log.info("domain classifier weights loaded from %s", path)
            return model
    return None


def dump(model: PairwiseRbfSvm, key: str, path: Path) -> None:
    """Write ``model`` with its ``key`` to ``path`` atomically (npz). Raises ``OSError``."""
    buffer = io.BytesIO()
    arrays = {name: np.asarray(getattr(model, name)) for name in FIELDS}
    # The support vectors are embeddings, float32 as the encoder gives them: stored without loss at half the size.
    arrays["support_vectors"] = arrays["support_vectors"].astype(np.float32)
    np.savez(buffer, key=np.array(key), **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue(), mode=0o644)


def store(model: PairwiseRbfSvm, key: str) -> None:
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
