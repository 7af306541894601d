"""The SVM kernels' stored support vectors: two int8 levels and their ONNX Runtime product."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.guardrails.detectors import harm, kernels
from proxy.guardrails.detectors.domain_weights import PairwiseRbfSvm


def _unit_rows(n: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, 384))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_two_levels_reconstruct_within_their_bound():
    rows = np.vstack([_unit_rows(40, 0), np.zeros((1, 384)), 1e-9 * _unit_rows(1, 1)])
    high, low, s, t = kernels.two_levels(rows)
    assert high.dtype == low.dtype == np.int8
    assert np.abs(high.astype(int)).max() <= 127 and np.abs(low.astype(int)).max() <= 127
    error = np.abs(s[:, None] * high + t[:, None] * low - rows)
    bound = np.abs(rows).max(axis=1) / 64_516
    assert np.all(error <= bound[:, None] + 1e-15)
    assert not high[40].any() and not low[40].any()  # a zero row stays zero


def test_int8_product_is_within_its_bound_of_the_exact_product():
    sv, x = _unit_rows(300, 2), _unit_rows(7, 3)
    stored = kernels.SupportVectors(sv, "int8x2")
    assert stored.kind == "int8x2" and stored.nbytes == 300 * 384 * 2
    exact = x @ sv.T
    bound = (np.abs(x).sum(1)[:, None] * np.abs(sv).max(1)[None, :]
             + np.abs(sv).sum(1)[None, :] * np.abs(x).max(1)[:, None]) / 64_516
    error = np.abs(stored.dots(x) - exact)
    assert np.all(error <= bound)
    assert error.max() < 2e-5  # far inside the bound for such rows


def test_a_rows_products_do_not_depend_on_the_other_rows_of_the_call():
    sv, x = _unit_rows(120, 4), _unit_rows(9, 5)
    stored = kernels.SupportVectors(sv, "int8x2")
    together = stored.dots(x)
    for i in range(len(x)):
        assert np.array_equal(stored.dots(x[i:i + 1])[0], together[i])


def test_the_environment_switch_selects_the_float32_product(monkeypatch):
    sv = _unit_rows(50, 6)
    monkeypatch.setenv(kernels.PRODUCT_ENV, "float32")
    stored = kernels.SupportVectors(sv)
    assert stored.kind == "float32" and stored.nbytes == 50 * 384 * 4
    assert np.abs(stored.dots(sv[:2]) - sv[:2] @ sv.T).max() < 1e-6
    monkeypatch.setenv(kernels.PRODUCT_ENV, "float16")
    with pytest.raises(ValueError, match=kernels.PRODUCT_ENV):
        kernels.SupportVectors(sv)


def test_the_hand_written_model_is_the_one_onnx_helper_builds():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    levels = np.random.default_rng(7).integers(-127, 128, (6, 4)).astype(np.int8)
    ours = onnx.load_from_string(kernels.matmul_integer_model(levels))
    onnx.checker.check_model(ours, full_check=True)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "levels", "zero"], ["y"])], "support_vector_products",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n", 6])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["n", 4])],
        [numpy_helper.from_array(levels, "levels"), numpy_helper.from_array(np.array(128, np.uint8), "zero")])
    theirs = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    assert ours.graph == theirs.graph and list(ours.opset_import) == list(theirs.opset_import)
    assert ours.ir_version == theirs.ir_version
    with pytest.raises(ValueError):
        kernels.matmul_integer_model(levels.astype(np.int16))


def test_shipped_harm_classifier_gives_the_float32_probabilities(monkeypatch):
    """Probabilities of embeddings near the support vectors (where the kernel matters most) with
    the int8 product and with the float32 one agree to 2e-3, on either side of no threshold the
    policy uses."""
    exact = harm.load_harm_classifier()
    monkeypatch.setenv(kernels.PRODUCT_ENV, "float32")
    reference = harm.load_harm_classifier()
    assert exact.views[0]._sv.kind == "int8x2" and reference.views[0]._sv.kind == "float32"
    svs = np.load(harm.artefact_paths(harm.DEFAULT_ARTEFACT)[0])["support_vectors"][::50].astype(np.float64)
    noisy = svs + np.random.default_rng(8).normal(scale=0.03, size=svs.shape)
    vectors = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    vectors = np.stack([vectors, vectors[::-1]], axis=1)  # (n, 2, 384): both views
    ours, theirs = exact.predict_proba_embeddings(vectors), reference.predict_proba_embeddings(vectors)
    assert np.abs(ours - theirs).max() < 2e-3
    assert np.abs(exact.window_proba(vectors) - reference.window_proba(vectors)).max() < 2e-3


def test_domain_svm_products_follow_the_switch(monkeypatch):
    sv = _unit_rows(30, 9)
    model = PairwiseRbfSvm(sv, np.ones((1, 30)), np.zeros(1), np.array([15, 15]), 1.0, np.ones(1), np.zeros(1))
    monkeypatch.setenv(kernels.PRODUCT_ENV, "float32")
    reference = PairwiseRbfSvm(sv, np.ones((1, 30)), np.zeros(1), np.array([15, 15]), 1.0, np.ones(1), np.zeros(1))
    assert reference._stored.kind == "float32"
    monkeypatch.delenv(kernels.PRODUCT_ENV)
    assert model._stored.kind == "int8x2"
    x = _unit_rows(4, 10)
    assert np.abs(model.proba(x) - reference.proba(x)).max() < 1e-4
