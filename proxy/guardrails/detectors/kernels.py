"""The RBF kernel the guardrails' support-vector machines (Safety's harm classifier, Compliance's
domain classifier) evaluate against their support vectors. Pure numpy, no I/O."""

from __future__ import annotations

import numpy as np


def rbf_kernel(x: np.ndarray, support_vectors32: np.ndarray, sv_sq: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(-gamma * ||x - sv||²)`` for every row of ``x`` (n, d) and support vector, shape (n, n_sv).

    ``support_vectors32`` (n_sv, d) float32 and ``sv_sq`` (n_sv,) their squared norms. The dot
    products run in float32: one text reads the support vectors from memory once, so a float64
    copy took about twice as long; kernel values differ from float64 by < 1e-6. The squared
    distance is expanded as ``|x|² - 2 x·sv + |sv|²`` (scikit-learn's ``euclidean_distances``),
    clipped at 0 against rounding.
    """
    x = np.asarray(x, dtype=np.float64)
    dots = (x.astype(np.float32) @ support_vectors32.T).astype(np.float64)
    sq = (x * x).sum(axis=1)[:, None] - 2.0 * dots + sv_sq[None, :]
    return np.exp(-gamma * np.maximum(sq, 0.0))
