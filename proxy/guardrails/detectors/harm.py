"""Harmful-intent classifier over all-MiniLM-L6-v2 sentence embeddings.

The model is trained by :mod:`proxy.evaluation.training` and shipped as two files in
``proxy/guardrails/artefacts``; both are read with numpy only (``allow_pickle=False``), no
scikit-learn or pickle at run time:

- ``<artefact>.npz``: the weights, one of two forms —
  *RBF support-vector machine* (``harm-minilm-svm-v*``): ``support_vectors`` float32 (k, 384),
  ``dual_coef`` float64 (k,), ``gamma``, ``intercept``, ``platt_a``, ``platt_b`` float64 (), over
  the sentence embedding (the last layer); from v7 also the same six arrays prefixed ``layer5_``:
  a second SVM over the fifth layer's pooled vector (:func:`~.embeddings.embed_layers`);
  *linear* (``harm-minilm-lr-v1``): ``coef`` float64 (384,), ``intercept`` float64 ();
- ``<artefact>.json``: metadata (name, version, embedding model, training-data sources with the
  sha256 of each input file, hyper-parameters, cross-validated metrics, recommended thresholds,
  and ``weights_sha256``, the sha256 of the .npz, checked at load).

Scores (x = the L2-normalised embedding):

- RBF SVM: decision ``f(x) = sum_i dual_coef_i * exp(-gamma * ||x - sv_i||^2) + intercept``
  (libsvm's C-SVC decision function, Chang & Lin 2011, LIBSVM §4), turned into a probability by
  Platt scaling ``p = sigmoid(platt_a * f(x) + platt_b)`` (Platt 1999), fitted on
  cross-validated decision values; with a second SVM, the probability is the geometric mean of the
  two SVMs' probabilities (an ensemble of two views of one encoder: out of fold, XSTest unsafe caught
  75 → 84 of 96 and safe refused 9 → 5 of 120 at the same AdvBench recall, docs/evaluation.md);
- linear: ``p = sigmoid(x · coef + intercept)``.

A text longer than the embedding model reads (256 word pieces) is also scored window by window
(:mod:`proxy.guardrails.detectors.windows`); its probability is the maximum of its truncated whole
and the windows that reach a stricter window threshold. A window (a sentence or a wrapped line's
fragment of a long text) is scored by the last layer's SVM alone (:meth:`HarmClassifier.window_proba`):
the fifth layer's scores such fragments higher ("Killing a worker mid-write is safe:" 0.9965 against
0.9943), and with both views a window threshold that kept the ordinary texts of
``bench/long_inputs.py`` and the tests passing (0.996) caught 86% of requests inserted into long
prose, against 95% for the last layer alone at 0.9975 (docs/evaluation.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from pathlib import Path

import numpy as np

from proxy.guardrails.detectors import embeddings, windows
from proxy.guardrails.detectors.kernels import rbf_kernel
from proxy.guardrails.detectors.patterns import pause_point

ARTEFACT_DIR = Path(__file__).resolve().parent.parent / "artefacts"
DEFAULT_ARTEFACT = "harm-minilm-svm-v7"
#: Prefix of the second (fifth-layer) SVM's arrays in a v7 artefact.
LAYER5_PREFIX = "layer5_"
#: Probability from which a window of a long text counts (policies/safety.yaml documents the fit).
DEFAULT_WINDOW_THRESHOLD = 0.9998
#: The first stage of a window (:meth:`HarmClassifier.predict_proba_located`): a window whose
#: approximate fifth-layer probability stays below this is not embedded on its own. Measured by
#: bench/window_gate.py on 761 windows of texts built from the written safety exemplars (half with
#: a harmful sentence among benign ones): the 152 windows scoring >= 0.9998 alone had approximate
#: probabilities of at least 0.0012, and 55% of all windows stayed below 0.001.
WINDOW_GATE = 0.001
#: The lowest ``window_threshold`` the first stage is used for: at lower thresholds every window
#: is embedded on its own (the gate was measured against windows that count from 0.99).
GATED_FROM = 0.99
#: ``SONATE_WINDOW_GATE=0`` embeds every window on its own (the benchmark's lever switch).
WINDOW_GATE_ON = os.environ.get("SONATE_WINDOW_GATE", "1") != "0"

#: Rows of the kernel an SVM computes at a time (:meth:`_Svm.decision`). Bounds the kernel's memory
#: (256 x 3,609 float64 = 7.4 MB, where 20,000 windows at once took 578 MB) and puts a pause point
#: between the groups of a screen's many windows, so an abandoned screen stops within one group.
KERNEL_ROWS = 256

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


def combine_views(probabilities: list[np.ndarray]) -> np.ndarray:
    """One probability per text from each view's: their geometric mean, shape of each input (n,).

    An ensemble of the SVMs over the last and the fifth layer (module docstring); the geometric
    mean is high only when both views are, and chosen, with the mean and the minimum, out of fold
    (docs/evaluation.md). Training (:mod:`proxy.evaluation.training`) combines with this function too.
    """
    return np.prod(probabilities, axis=0) ** (1.0 / len(probabilities))


def _views(vectors: np.ndarray, needed: int) -> np.ndarray:
    """``vectors`` (n, 384) or (n, views, 384) as float64 (n, views, 384) with at least ``needed``
    views; raises ValueError otherwise."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim == 2:
        vectors = vectors[:, None, :]
    if vectors.ndim != 3 or vectors.shape[1] < needed or vectors.shape[2] != embeddings.DIMENSIONS:
        raise ValueError(f"expected embeddings of shape (n, {embeddings.DIMENSIONS}) or "
                         f"(n, {needed}, {embeddings.DIMENSIONS}), got {vectors.shape}")
    return vectors


class _Svm:
    """One RBF SVM with its Platt link, from the arrays of an artefact (keys with ``prefix``)."""

    def __init__(self, arrays: dict[str, np.ndarray], prefix: str = "") -> None:
        """Raises KeyError for a missing array, ArtefactError for mismatched shapes."""
        dim = embeddings.DIMENSIONS
        support_vectors = arrays[prefix + "support_vectors"]
        self.dual_coef = arrays[prefix + "dual_coef"].reshape(-1)
        self.gamma = float(arrays[prefix + "gamma"].reshape(()))
        self.intercept = float(arrays[prefix + "intercept"].reshape(()))
        self.platt = (float(arrays[prefix + "platt_a"].reshape(())), float(arrays[prefix + "platt_b"].reshape(())))
        if support_vectors.ndim != 2 or support_vectors.shape[1] != dim \
                or self.dual_coef.shape != (support_vectors.shape[0],):
            raise ArtefactError(
                f"harm classifier {prefix}support vectors have shape {support_vectors.shape} and dual "
                f"coefficients {self.dual_coef.shape}, expected (k, {dim}) and (k,)")
        self._sv_sq = (support_vectors ** 2).sum(axis=1)
        # only a float32 copy is kept for the dot products (3x faster on one text than float64,
        # decision values differ < 1e-6; the artefact stores them as float32 anyway): v7's 4,748
        # support vectors take 7 MB instead of 22 MB
        self._sv32 = np.ascontiguousarray(support_vectors, dtype=np.float32)

    def decision(self, vectors: np.ndarray) -> np.ndarray:
        """Decision values (n,) of embeddings (n, 384), :data:`KERNEL_ROWS` rows at a time with a
        :func:`~proxy.guardrails.detectors.patterns.pause_point` between groups (whatever the pause
        hook raises propagates). A row's value differs from the whole batch's at once by float32
        rounding only (< 1e-6, as a text scored alone differs from the same text in a batch)."""
        out = np.empty(len(vectors))
        for start in range(0, len(vectors), KERNEL_ROWS):
            if start:
                pause_point()
            rows = vectors[start:start + KERNEL_ROWS]
            out[start:start + KERNEL_ROWS] = rbf_kernel(rows, self._sv32, self._sv_sq, self.gamma) @ self.dual_coef
        return out + self.intercept

    def proba(self, vectors: np.ndarray) -> np.ndarray:
        """Platt probabilities (n,) of embeddings (n, 384)."""
        return _sigmoid(self.platt[0] * self.decision(vectors) + self.platt[1])


class HarmClassifier:
    """Harmful-intent classifier over sentence embeddings (RBF SVM + Platt, two of them over two
    layers from v7, or linear).

    Attributes:
        name: model family, e.g. ``"harm-minilm-svm"``.
        version: artefact version plus a prefix of the weights' sha256, e.g.
            ``"harm-minilm-svm-v7@sha256:1a2b3c4d5e6f"`` — pins the exact weights in receipts.
        metadata: the artefact's JSON metadata (sources, hyper-parameters, CV metrics, thresholds).

    Thread-safe: the weights are read-only; embedding is serialised inside ``embeddings.embed``.
    """

    def __init__(self, weights: dict[str, np.ndarray], metadata: dict) -> None:
        """Build from the arrays of an artefact's .npz.

        Args:
            weights: either ``{"coef" (384,), "intercept" ()}`` (linear) or
                ``{"support_vectors" (k, 384), "dual_coef" (k,), "gamma", "intercept",
                "platt_a", "platt_b"}`` (RBF SVM), optionally with the same keys prefixed
                ``layer5_`` (the fifth layer's SVM); see the module docstring.
            metadata: artefact metadata; needs ``name`` and ``version``.

        Raises:
            ArtefactError: unknown form, a shape mismatch, NaN/inf weights, or missing metadata.
        """
        for key in ("name", "version"):
            if key not in metadata:
                raise ArtefactError(f"harm classifier metadata lacks {key!r}")
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        if not all(np.all(np.isfinite(a)) for a in arrays.values()):
            raise ArtefactError("harm classifier weights contain NaN or infinity")
        dim = embeddings.DIMENSIONS
        try:
            if "support_vectors" in arrays:
                self.kind = "rbf-svm"
                #: One SVM per embedding view: the last layer's, then (v7) the fifth layer's.
                self.views = [_Svm(arrays)] + ([_Svm(arrays, LAYER5_PREFIX)] if LAYER5_PREFIX + "support_vectors"
                                               in arrays else [])
            elif "coef" in arrays:
                self.kind = "linear"
                self.coef = arrays["coef"]
                self.intercept = float(arrays["intercept"].reshape(()))
                if self.coef.shape != (dim,):
                    raise ArtefactError(f"harm classifier weights have shape {self.coef.shape}, expected ({dim},)")
            else:
                raise ArtefactError(f"harm classifier weights hold neither coef nor support_vectors: {sorted(arrays)}")
        except KeyError as exc:
            raise ArtefactError(f"harm classifier weights lack {exc}") from None
        self.metadata = metadata
        self.name: str = metadata["name"]
        digest = metadata.get("weights_sha256", "")
        self.version: str = f"{metadata['version']}@sha256:{digest[:12]}" if digest else metadata["version"]

    @property
    def layers(self) -> int:
        """Embedding views the classifier reads per text: 2 for a v7 artefact, else 1."""
        return len(self.views) if self.kind == "rbf-svm" else 1

    def predict_proba_embeddings(self, vectors: np.ndarray) -> np.ndarray:
        """Probabilities for precomputed embeddings.

        Args:
            vectors: float array (n, 384) (one view) or (n, :attr:`layers`, 384) as produced by
                ``embeddings.embed_layers`` (a one-view classifier reads view 0, the last layer);
                rows L2-normalised.

        Returns:
            float64 array (n,), each in [0, 1]: the Platt probability, or with two views the
            geometric mean of both views' (module docstring).

        Raises:
            ValueError: wrong shape.
        """
        vectors = _views(vectors, self.layers)
        if self.kind == "linear":
            return _sigmoid(vectors[:, 0] @ self.coef + self.intercept)
        return combine_views([svm.proba(vectors[:, view]) for view, svm in enumerate(self.views)])

    def window_proba(self, vectors: np.ndarray) -> np.ndarray:
        """Probabilities (n,) of the windows of long texts: the last layer's SVM alone (module
        docstring); ``vectors`` as for :meth:`predict_proba_embeddings` (only view 0 is read).
        Raises ValueError for a wrong shape."""
        if self.kind == "linear":
            return self.predict_proba_embeddings(vectors)
        return self.views[0].proba(_views(vectors, 1)[:, 0])

    def _embed(self, texts: list[str], remember: bool = True) -> np.ndarray:
        """The embeddings this classifier reads: (n, 384), or (n, 2, 384) for two views."""
        return embeddings.embed_layers(texts, remember) if self.layers > 1 else embeddings.embed(texts, remember)

    def predict_proba(self, texts: list[str], window_threshold: float | None = DEFAULT_WINDOW_THRESHOLD) -> np.ndarray:
        """Probability that each text expresses intent to cause harm (see :meth:`predict_proba_located`).

        Args:
            texts: n strings of any length.
            window_threshold: as in :meth:`predict_proba_located`.

        Returns:
            float64 array (n,), each in [0, 1]; empty input gives shape (0,).
        """
        return self.predict_proba_located(texts, window_threshold)[0]

    def predict_proba_located(
        self, texts: list[str], window_threshold: float | None = DEFAULT_WINDOW_THRESHOLD,
    ) -> tuple[np.ndarray, list[dict[str, int | str] | None]]:
        """Probability that each text expresses intent to cause harm, and where a long text scored it.

        A text of one sentence that fits the embedding model (256 word pieces) is embedded whole.
        Any other scores the maximum over its (truncated) whole and those of its
        :func:`~proxy.guardrails.detectors.windows.windows` (its sentences) that reach
        ``window_threshold``, so a request after or inside harmless prose is judged on its own.
        A window below it is not counted: a long text has ~one window per 60 characters, and ordinary
        sentences score up to 0.9975 alone ("Generate a bank statement for an online transaction of
        $100."), so windows counted at the whole's threshold (0.76) refused 40 of 70 long benign texts
        (bench/long_inputs.py). The windows of all texts are embedded in one batch. Windows go
        through a first stage (two-view classifiers, ``window_threshold`` >=
        :data:`GATED_FROM`): the mean of the whole pass's fifth-layer vectors of a window's word
        pieces (:meth:`~proxy.guardrails.detectors.embeddings.TokenVectors.pooled`), scored by the
        fifth layer's SVM; a window below :data:`WINDOW_GATE` there is not embedded on its own and
        cannot count. Windows past the whole pass's truncation are always embedded.

        Args:
            texts: n strings of any length.
            window_threshold: the probability from which a window counts (policies/safety.yaml
                ``detector.harmful_intent.window_threshold``); None: long texts are judged by their
                truncated whole only (no windows are embedded).

        Returns:
            ``(probabilities, located)``: float64 array (n,), each in [0, 1] (shape (0,) for no
            texts); ``located[i]`` is None for a text judged whole, else ``{"start", "end"}``
            (character offsets of the window that gave the maximum; ``start`` 0 and ``end`` the
            text's length when the truncated whole did), ``"windows"`` (how many were cut) and
            ``"window_max"`` (the highest probability of the windows embedded on their own, counted or
            not, as a 4-decimal string; 0 when the first stage passed over every window).
        """
        texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.float64), []
        probabilities = self.predict_proba_embeddings(self._embed(texts))
        located: list[dict[str, int | str] | None] = [None] * len(texts)
        if window_threshold is None:
            return probabilities, located
        cut = [(i, w) for i, text in enumerate(texts) for w in windows.windows(text)]
        if not cut:
            return probabilities, located
        for i, count in Counter(i for i, _ in cut).items():
            located[i] = {"start": 0, "end": len(texts[i]), "windows": count}
        cut = [cut[k] for k in self._past_first_stage(texts, cut, window_threshold)]
        scored = self.window_proba(self._embed([texts[i][w.start:w.end] for i, w in cut], remember=False))
        highest = np.zeros(len(texts))
        for (i, window), probability in zip(cut, scored):
            highest[i] = max(highest[i], probability)
            where = located[i]  # set above for every text that has windows
            if where is not None and probability >= window_threshold and probability > probabilities[i]:
                probabilities[i] = probability
                where.update(start=window.start, end=window.end)
        for i, where in enumerate(located):
            if where is not None:
                where["window_max"] = f"{highest[i]:.4f}"  # a string: receipts hold no floats
        return probabilities, located

    def _past_first_stage(self, texts: list[str], cut: list[tuple[int, windows.Window]],
                          window_threshold: float) -> list[int]:
        """Indexes into ``cut`` (``(text index, window)`` pairs) of the windows to embed on their own:
        all of them unless the first stage applies (:meth:`predict_proba_located`), else those it
        cannot judge (no kept word-piece vectors, past the truncation) and those reaching
        :data:`WINDOW_GATE`."""
        if not WINDOW_GATE_ON or self.kind != "rbf-svm" or len(self.views) < 2 or window_threshold < GATED_FROM:
            return list(range(len(cut)))
        kept = {i: embeddings.token_vectors(texts[i]) for i in {i for i, _ in cut}}
        approximated: list[int] = []
        vectors: list[np.ndarray] = []
        for k, (i, window) in enumerate(cut):
            pieces = kept[i]
            vector = pieces.pooled(window.start, window.end) if pieces is not None else None
            if vector is not None:
                approximated.append(k)
                vectors.append(vector)
        if not vectors:
            return list(range(len(cut)))
        passed_over = {k for k, p in zip(approximated, self.views[1].proba(np.stack(vectors))) if p < WINDOW_GATE}
        return [k for k in range(len(cut)) if k not in passed_over]


def artefact_paths(artefact: str | Path, artefact_dir: Path = ARTEFACT_DIR) -> tuple[Path, Path]:
    """Resolve an artefact reference to its (.npz, .json) paths.

    Args:
        artefact: a name in ``artefact_dir`` (``"harm-minilm-svm-v7"``) or a path to either file or
            to the common stem (``/x/harm-minilm-svm-v7``).
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
            weights = {key: np.array(arrays[key]) for key in arrays.files}
    except (OSError, KeyError, ValueError) as exc:
        raise ArtefactError(f"cannot read harm classifier weights {npz_path}: {exc}") from exc
    trained_on = metadata.get("embedding_model")
    if trained_on and trained_on != embeddings.model_version():
        _log.warning(
            "harm classifier %s was trained on embeddings %s, running with %s",
            metadata.get("version"), trained_on, embeddings.model_version(),
        )
    return HarmClassifier(weights, metadata)
