"""The RBF kernel the guardrails' support-vector machines (Safety's harm classifier, Compliance's
domain classifier) evaluate against their support vectors. Pure numpy and ONNX Runtime, no I/O.

The cost of a kernel is reading the support vectors: one text multiplies one 384-vector by every
support vector (the harm classifier's two SVMs hold 3,041 and 2,506, the domain classifier 1,586),
and a float32 copy takes 4.7, 3.9 and 2.4 MB, read from memory on every call. :class:`SupportVectors`
stores them instead as two int8 levels (a value and its rounding residual, 2 bytes a value: half
the bytes) and multiplies with ONNX Runtime's int8 ``MatMulInteger``, whose integer products are
exact (the same session settings as the int8 encoder: ``embeddings.exact_int8_settings``), so the
dot products differ from the exact ones only by the two levels' rounding (bounded in
:class:`SupportVectors`: < 2e-4 for these embeddings, at most 1.3e-5 measured on the tuning
texts, against 7e-7 for float32), and no decision changed on the 1,984 tuning texts. ``SONATE_SVM_PRODUCT=float32`` (or no onnxruntime) keeps the float32
product.
"""

from __future__ import annotations

import os

import numpy as np

#: ``SONATE_SVM_PRODUCT``: ``int8x2`` (default: two int8 levels, :class:`SupportVectors`) or
#: ``float32`` (numpy's float32 product over a float32 copy).
PRODUCT_ENV = "SONATE_SVM_PRODUCT"
PRODUCTS = ("int8x2", "float32")
#: Largest magnitude of a quantised level (symmetric int8 range).
LEVEL = 127


def product_kind() -> str:
    """The product :data:`PRODUCT_ENV` selects (default ``int8x2``); raises ValueError for another value."""
    kind = os.environ.get(PRODUCT_ENV, "int8x2").strip().lower() or "int8x2"
    if kind not in PRODUCTS:
        raise ValueError(f"{PRODUCT_ENV}={kind!r}: expected one of {', '.join(PRODUCTS)}")
    return kind


def two_levels(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row of ``values`` (n, d) as ``s·high + t·low`` with int8 ``high``, ``low`` (n, d) in
    [-127, 127] and float64 scales ``s``, ``t`` (n,).

    ``s = max|row| / 127``, ``high = round(row / s)``; the residual ``row - s·high`` lies within
    ``±s/2``, so ``t = s / 254`` and ``low = round(residual / t)`` fit the range. The
    reconstruction's error per value is at most ``t/2 = max|row| / 64,516`` (residual quantisation,
    as in two-stage vector quantisers: Gray & Neuhoff, "Quantization", IEEE Trans. Inf. Theory 44,
    1998, section V). A zero row gets scales 1 and zero levels.
    """
    values = np.asarray(values, dtype=np.float64)
    peak = np.abs(values).max(axis=1) if values.size else np.zeros(len(values))
    s = np.where(peak > 0, peak / LEVEL, 1.0)
    high = np.clip(np.rint(values / s[:, None]), -LEVEL, LEVEL)
    t = s / (2 * LEVEL)
    low = np.clip(np.rint((values - s[:, None] * high) / t[:, None]), -LEVEL, LEVEL)
    return high.astype(np.int8), low.astype(np.int8), s, t


#: ONNX tensor element types (onnx.proto ``TensorProto.DataType``).
_UINT8, _INT8, _INT32 = 2, 3, 6


def _varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf base-128 varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    """One protobuf field: an int as a varint (wire type 0), bytes or str length-delimited (type 2)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode("utf-8") if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _tensor_type(elem_type: int, dims: list[int | str]) -> bytes:
    """An ONNX ``TypeProto`` of a tensor: element type and dimensions (int: a size, str: a named one)."""
    shape = b"".join(_field(1, _field(1, d) if isinstance(d, int) else _field(2, d)) for d in dims)
    return _field(1, _field(1, elem_type) + _field(2, shape))


def matmul_integer_model(levels: np.ndarray) -> bytes:
    """The serialised ONNX model (``ModelProto``, IR version 8, opset 13) of one ``MatMulInteger``:
    input ``x`` uint8 (n, d) with zero point 128, times the constant int8 ``levels`` (d, m)
    → ``y`` int32 (n, m).

    Written field by field in protobuf's wire format (field numbers of onnx.proto: ModelProto
    ir_version 1, graph 7, opset_import 8; GraphProto node 1, name 2, initializer 5, input 11,
    output 12; NodeProto input 1, output 2, op_type 4; TensorProto dims 1, data_type 2, name 8,
    raw_data 9): the ``onnx`` package, which would build it, is an export-time dependency only
    (a test compares this with ``onnx.helper``'s model). Raises ValueError unless ``levels`` is a
    2-D int8 array.
    """
    if levels.ndim != 2 or levels.dtype != np.int8:
        raise ValueError(f"levels must be a 2-D int8 array, got {levels.dtype} {levels.shape}")
    d, m = levels.shape
    node = b"".join(_field(1, name) for name in ("x", "levels", "zero")) + _field(2, "y") + _field(4, "MatMulInteger")
    weights = (_field(1, d) + _field(1, m) + _field(2, _INT8) + _field(8, "levels")
               + _field(9, np.ascontiguousarray(levels).tobytes()))
    zero = _field(2, _UINT8) + _field(8, "zero") + _field(9, bytes([128]))
    graph = (_field(1, node) + _field(2, "support_vector_products") + _field(5, weights) + _field(5, zero)
             + _field(11, _field(1, "x") + _field(2, _tensor_type(_UINT8, ["n", d])))
             + _field(12, _field(1, "y") + _field(2, _tensor_type(_INT32, ["n", m]))))
    return _field(1, 8) + _field(7, graph) + _field(8, _field(1, "") + _field(2, 13))


def _int8_session(levels: np.ndarray, entries: dict[str, str]):
    """An ONNX Runtime session of :func:`matmul_integer_model`. One thread, no thread pool (safe to
    run in a forked worker, as the encoder's session), no memory arena, plus the session config
    ``entries``."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return onnxruntime.InferenceSession(matmul_integer_model(levels), options, providers=["CPUExecutionProvider"])


class SupportVectors:
    """Support vectors (k, d) ready for dot products with query rows: :meth:`dots`.

    ``int8x2`` (default, :func:`product_kind`): each support vector is stored as two int8 levels
    (:func:`two_levels`), ``[high | low]`` as one (d, 2k) int8 matrix, and each query row likewise;
    one ``MatMulInteger`` run multiplies the query's two levels by both (4 exact integer products,
    the memory read once), combined in float64 as
    ``x·sv = sx·(s·Y[hh] + t·Y[hl]) + tx·(s·Y[lh] + t·Y[ll])``. For rows of norm ≤ 1 (the
    L2-normalised embeddings) each reconstructed value is within max|row|/64,516 of the exact one
    (:func:`two_levels`), so a dot product is within ``(|x|₁·max|sv| + |sv|₁·max|x|) / 64,516``
    of the exact one (< 2e-4 for unit rows of 384 values whose largest is ≤ 0.3, as these
    embeddings'). ``float32``: a float32 copy and numpy's product (float32 rounding, ~1e-7
    relative). The integer products are exact, so a row's dot products do not depend on the other
    rows of the call.

    Thread-safe (ONNX Runtime sessions are; the arrays are read-only). Raises ValueError for a
    support-vector array that is not 2-D, or an unknown :data:`PRODUCT_ENV`.
    """

    def __init__(self, support_vectors: np.ndarray, kind: str | None = None) -> None:
        support_vectors = np.asarray(support_vectors)
        if support_vectors.ndim != 2:
            raise ValueError(f"support vectors must be 2-D, got shape {support_vectors.shape}")
        self.kind = kind or product_kind()
        if self.kind not in PRODUCTS:
            raise ValueError(f"unknown support-vector product {self.kind!r}: expected one of {', '.join(PRODUCTS)}")
        self.count, self.dim = support_vectors.shape
        self._session = None
        if self.kind == "int8x2":
            try:
                from proxy.guardrails.detectors.embeddings import exact_int8_settings

                high, low, s, t = two_levels(support_vectors)
                levels = np.ascontiguousarray(np.concatenate([high, low]).T)  # (d, 2k)
                self._session = _int8_session(levels, exact_int8_settings())
                self._scales = (s, t)
            except ImportError:  # no onnxruntime: the float32 product
                self.kind = "float32"
        if self._session is None:
            self._sv32 = np.ascontiguousarray(support_vectors, dtype=np.float32)

    @property
    def nbytes(self) -> int:
        """Bytes a product reads from the stored support vectors (2 per value for ``int8x2``, 4 for ``float32``)."""
        return self.count * self.dim * (2 if self._session is not None else 4)

    def dots(self, x: np.ndarray) -> np.ndarray:
        """``x @ svᵀ`` for query rows ``x`` (n, d): float64 (n, k), within the class docstring's bound."""
        x = np.asarray(x, dtype=np.float64)
        if self._session is None:
            return (x.astype(np.float32) @ self._sv32.T).astype(np.float64)
        n, k = len(x), self.count
        high, low, sx, tx = two_levels(x)
        rows = (np.concatenate([high, low]).astype(np.int16) + 128).astype(np.uint8)  # (2n, d)
        (y,) = self._session.run(None, {"x": rows})
        s, t = self._scales
        y = y.astype(np.float64)
        by_high = s * y[:n, :k] + t * y[:n, k:]
        by_low = s * y[n:, :k] + t * y[n:, k:]
        return sx[:, None] * by_high + tx[:, None] * by_low


def rbf_kernel(x: np.ndarray, support_vectors: SupportVectors, sv_sq: np.ndarray, gamma: float) -> np.ndarray:
    """``exp(-gamma * ||x - sv||²)`` for every row of ``x`` (n, d) and support vector, shape (n, n_sv).

    ``support_vectors`` the stored support vectors (:class:`SupportVectors`: their dot products
    with ``x``, within its bound of the exact ones) and ``sv_sq`` (n_sv,) their squared norms in
    float64. The squared distance is expanded as ``|x|² - 2 x·sv + |sv|²`` (scikit-learn's
    ``euclidean_distances``), clipped at 0 against rounding.
    """
    x = np.asarray(x, dtype=np.float64)
    sq = (x * x).sum(axis=1)[:, None] - 2.0 * support_vectors.dots(x) + sv_sq[None, :]
    return np.exp(-gamma * np.maximum(sq, 0.0))
