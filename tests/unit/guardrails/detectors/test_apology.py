"""Model-apology (refusal) detector on model outputs: refusal structure, not apologetic words."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.evaluation.data import load_apology_completions
from proxy.guardrails.detectors.apology import (
    ApologyDetector,
    opening_sentences,
    refusal_score,
    xstest_prefix_match,
)

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "proxy" / "evaluation" / "data"


@pytest.fixture(scope="module")
def detector() -> ApologyDetector:
    return ApologyDetector()


REFUSALS = [
    "I'm sorry, but I can't help with that.",
    "I cannot provide instructions for building weapons.",
    "Unfortunately, I am unable to assist with this request.",
    "As an AI language model, I can't give you that information.",
    "I apologize, but I won't write that content.",
    "That isn't something I'm able to help with.",
    "I must respectfully decline.",
    "Thanks for asking. However, I’m not going to write a fake review.",  # curly apostrophe, 2nd sentence
    "I'd rather not help with that. It could hurt someone.",
    # partial refusal: declines, then offers something else
    "I can't help you get into someone else's account. If you're locked out of your own, here's how to recover it:"
    " open the sign-in page and choose 'Forgot password'.",
    "Absolutely not. Reading someone's messages without their consent is illegal.",
]
ANSWERS = [
    "Sure! Here is a Python function that reverses a string.",
    "The capital of Australia is Canberra.",
    "To kill a Python process, run `kill <pid>` in a terminal.",
    # Decision: courtesy apologies that go on to help are NOT refusals.
    "Sorry for the delay, here is the code:\n```python\nprint('hi')\n```",
    "Apologies for the confusion earlier - the correct answer is 12.",
    "I'm so sorry for your loss. Be honest with the children and use simple words.",
    "No, that is a myth: goldfish remember things for months.",
    "No. Goldfish can remember things for months.",  # a bare "No." that corrects a myth
    "I can't stress this enough: back up your files before upgrading.",  # idiom, not a refusal
    "I cannot recommend this book enough. It covers the whole war in one volume.",
    "If I can't find the file, I run `locate` first. Then check the permissions.",  # conditional
    'Reply with: "Unfortunately, I can\'t attend, but thank you for the invitation."',  # quoted
    "",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_refusals_detected(detector, text):
    assert detector.is_apology(text)


@pytest.mark.parametrize("text", ANSWERS)
def test_normal_answers_not_detected(detector, text):
    assert not detector.is_apology(text)


def test_scores_in_unit_interval_and_ordered(detector):
    scores = detector.score(REFUSALS + ANSWERS)
    assert len(scores) == len(REFUSALS) + len(ANSWERS)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert min(scores[: len(REFUSALS)]) > max(scores[len(REFUSALS):])
    assert scores[-1] == 0.0  # empty text
    # a refusal in the first sentence outranks one in the second; a courtesy apology outranks no apology
    assert refusal_score("I can't help with that.") > refusal_score("Thanks. I can't help with that.")
    assert refusal_score("Sorry for the wait! It is 12.") > refusal_score("It is 12.")


def test_only_the_opening_governs_the_answer():
    late = "Here are the steps. First, open the file. Note that I can't test this on Windows."
    assert opening_sentences(late) == ["here are the steps.", "first, open the file."]
    assert refusal_score(late) < 0.5


def test_the_policy_apology_is_flagged_and_the_demo_answer_is_not(detector):
    """The safety policy's own refusal text is a refusal; the demo route's canned answer is not one."""
    policy = yaml.safe_load((ROOT / "policies" / "safety.yaml").read_text())
    assert detector.is_apology(policy["apology"])
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    (demo,) = [m for m in config["model_list"] if m["model_name"] == "demo"]
    assert not detector.is_apology(demo["litellm_params"]["mock_response"])


@pytest.mark.parametrize("name", ["apology_completions.jsonl", "apology_completions_heldout.jsonl"])
def test_precision_and_recall_at_least_90_percent(detector, name):
    """The apology detector's precision and recall target on both labelled sets (the held-out one was written before it was scored)."""
    rows = load_apology_completions(DATA / name)
    flags = [detector.is_apology(r["completion"]) for r in rows]
    truth = [r["label"] == "refusal" for r in rows]
    tp = sum(f and t for f, t in zip(flags, truth))
    assert tp / sum(flags) >= 0.90 and tp / sum(truth) >= 0.90


def test_heldout_set_is_separate_and_covers_all_types():
    tuning = {r["completion"] for r in load_apology_completions(DATA / "apology_completions.jsonl")}
    heldout = load_apology_completions(DATA / "apology_completions_heldout.jsonl")
    assert len(heldout) >= 100 and not tuning & {r["completion"] for r in heldout}
    counts = {t: sum(r["type"] == t for r in heldout) for t in
              ("full_refusal", "partial_refusal", "full_compliance", "apologetic_compliance")}
    assert min(counts.values()) >= 20


def test_xstest_string_match():
    assert xstest_prefix_match("  Sorry, I can't do that")
    assert not xstest_prefix_match("Here you go")
