"""Apology/refusal detector on model outputs (real embeddings)."""

import pytest

from proxy.guardrails.detectors.apology import ApologyDetector, xstest_prefix_match


@pytest.fixture(scope="module")
def detector() -> ApologyDetector:
    return ApologyDetector()


REFUSALS = [
    "I'm sorry, but I can't help with that.",
    "I cannot provide instructions for building weapons.",
    "Unfortunately, I am unable to assist with this request.",
    "As an AI language model, I can't give you that information.",
    "I apologize, but I won't write that content.",
]
ANSWERS = [
    "Sure! Here is a Python function that reverses a string.",
    "The capital of Australia is Canberra.",
    "To kill a Python process, run `kill <pid>` in a terminal.",
    # Decision: courtesy apologies that go on to help are NOT refusals.
    "Sorry for the delay, here is the code:\n```python\nprint('hi')\n```",
    "Apologies for the confusion earlier - the correct answer is 12.",
    "No, that is a myth: goldfish remember things for months.",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_refusals_detected(detector, text):
    assert detector.is_apology(text)


@pytest.mark.parametrize("text", ANSWERS)
def test_normal_answers_not_detected(detector, text):
    assert not detector.is_apology(text)


def test_scores_in_unit_interval_and_ordered(detector):
    scores = detector.score(REFUSALS + ANSWERS + [""])
    assert len(scores) == len(REFUSALS) + len(ANSWERS) + 1
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert min(scores[: len(REFUSALS)]) > max(scores[len(REFUSALS):])
    assert scores[-1] == 0.0


def test_xstest_string_match():
    assert xstest_prefix_match("  Sorry, I can't do that")
    assert not xstest_prefix_match("Here you go")
