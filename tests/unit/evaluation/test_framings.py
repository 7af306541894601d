"""Framed training copies (proxy/guardrails/framings.py), evaluation framings
(proxy/evaluation/framings.py), and the
cross-validation that trains on copies without leaking a tested row's copy into its fold."""

from __future__ import annotations

import random
import re

import numpy as np

from proxy.evaluation import framings as probes
from proxy.evaluation.training import cross_validate
from proxy.guardrails import framings

TEXTS = [f"How do I bake bread number {i}?" for i in range(400)]


def _shape(template: str) -> str:
    return re.sub(r"\{\w+\}", "#", template).lower()


def test_training_and_evaluation_framings_are_disjoint():
    training = {_shape(t) for t in framings.TRAINING_PREFIXES + framings.TRAINING_SUFFIXES}
    evaluation = {_shape(t) for t in probes.EVALUATION_PREFIXES + probes.EVALUATION_SUFFIXES}
    assert training.isdisjoint(evaluation)


def test_a_framed_copy_keeps_the_text_verbatim_with_a_prefix_a_suffix_or_both():
    [copy] = framings.training_copies(TEXTS, 1, seed=3)
    kinds = {"prefix": 0, "suffix": 0, "both": 0}
    for text, framed in zip(TEXTS, copy):
        assert text in framed and framed != text
        before, after = framed.split(text)
        kind = "both" if before and after else "prefix" if before else "suffix"
        kinds[kind] += 1
        assert not re.search(r"\{\w+\}", framed)  # every field filled
    assert 0.3 < kinds["prefix"] / len(TEXTS) < 0.5 and 0.3 < kinds["suffix"] / len(TEXTS) < 0.5
    assert 0.1 < kinds["both"] / len(TEXTS) < 0.3


def test_copies_are_deterministic_per_seed_and_differ_between_copies():
    first = framings.training_copies(TEXTS[:50], 2, seed=1)
    assert first == framings.training_copies(TEXTS[:50], 2, seed=1)
    assert first != framings.training_copies(TEXTS[:50], 2, seed=2)
    assert sum(a != b for a, b in zip(*first)) > 40
    assert framings.training_copies(TEXTS[:5], 0, seed=1) == []
    assert probes.evaluation_framed(TEXTS[:50]) == probes.evaluation_framed(TEXTS[:50])
    evaluation = probes.evaluation_framed(TEXTS[:200])
    assert all(any(part.strip() for part in framed.split(text)) for text, framed in zip(TEXTS, evaluation))


def test_cross_validation_never_trains_on_a_copy_of_a_tested_row():
    """Labels are noise, so only a leak can rank the tested rows: with exact duplicates as the
    "framed" copies, a fold that trained on the copies of its test rows would recall their labels
    (the same SVM scores its own training rows with ROC AUC ~1)."""
    from sklearn.metrics import roc_auc_score
    from sklearn.svm import SVC

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.integers(0, 2, size=200)
    fitted = SVC(C=3.0, kernel="rbf", gamma="scale", class_weight="balanced").fit(x, y)
    assert roc_auc_score(y, fitted.decision_function(x)) > 0.95  # a leak would be seen
    empty = np.zeros((0, 16))
    scores = cross_validate(x, y, y.astype(str), empty, np.zeros(0, dtype=int), empty, c=3.0, folds=5, repeats=1,
                            seed=0, progress=False, copies=[(x.copy(), empty), (x.copy(), empty)],
                            probe=(x.copy(), empty))
    assert roc_auc_score(y, scores.oof) < 0.7
    assert roc_auc_score(y, scores.probe) < 0.7
    np.testing.assert_allclose(scores.probe, scores.oof)  # probe rows are scored by the same fold models


def test_framings_are_drawn_from_the_named_lists_only():
    rng = random.Random(0)
    for _ in range(200):
        framed = framings.frame("X", rng, ["Hello {n}."], ["Bye."])
        assert re.fullmatch(r"(Hello \d{3,5}\. )?X( Bye\.)?", framed) and framed != "X"
