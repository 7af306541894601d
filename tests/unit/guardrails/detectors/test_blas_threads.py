"""The BLAS cap of the serving process: numpy's OpenBLAS runs one thread per call."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from proxy.guardrails.detectors.embeddings import BLAS_THREADS, limit_blas_threads


def _blas() -> list[dict]:
    return [info for info in threadpool_info() if info.get("user_api") == "blas"]


def test_the_cap_covers_numpys_blas_and_outlives_the_call():
    threadpool_limits(limits=2, user_api="blas")  # as OpenBLAS starts on a 2-core machine
    try:
        reported = limit_blas_threads(1)
        seen = _blas()
        assert any(i["internal_api"] == "openblas" and "numpy" in i["filepath"] for i in seen)
        assert [i["num_threads"] for i in seen] == [1] * len(seen)
        assert [i["filepath"] for i in reported] == [i["filepath"] for i in seen]
        a = np.arange(384 * 64, dtype=np.float32).reshape(64, 384) / 1e4
        np.testing.assert_allclose(a @ a.T, np.einsum("ik,jk->ij", a, a), rtol=1e-5)
    finally:
        limit_blas_threads(BLAS_THREADS)
