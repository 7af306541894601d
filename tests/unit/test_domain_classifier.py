"""Compliance domain classifier: real all-MiniLM-L6-v2 embeddings, config from the policy file."""

import csv
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

ROOT = Path(__file__).resolve().parents[2]
REGULATED_CATEGORIES = {"Law", "Health", "Finance", "Economics", "Nutrition"}


def _config(**overrides) -> DomainClassifierConfig:
    block = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    return DomainClassifierConfig(**{**block, **overrides})


@pytest.fixture(scope="module")
def classifier() -> DomainClassifier:
    return DomainClassifier(_config())


@pytest.mark.parametrize(
    "question, domain",
    [
        ("Can my employer legally make me work overtime without pay?", "legal"),
        ("What is the maximum daily dose of paracetamol?", "health"),
        ("Should I move my pension savings into an ETF?", "finance"),
    ],
)
def test_regulated_questions_route_to_their_domain(classifier, question, domain):
    [result] = classifier.classify([question])
    assert result.regulated and result.domain == domain
    assert result.scores[domain] == result.confidence


@pytest.mark.parametrize(
    "question",
    ["Who painted the Mona Lisa?", "How do I centre a div with CSS?", "Why do leaves change colour in autumn?"],
)
def test_general_questions_are_not_regulated(classifier, question):
    [result] = classifier.classify([question])
    assert not result.regulated and result.domain in {"general", "code"}


def test_scores_are_probabilities(classifier):
    results = classifier.classify(["Is it legal to jaywalk?", "What is the capital of Peru?"])
    for r in results:
        assert set(r.scores) == set(classifier.domains)
        assert abs(sum(r.scores.values()) - 1.0) < 1e-3
    assert classifier.classify([]) == []


def test_ambiguous_band_follows_policy():
    band = dict(threshold=1.0, margin=0.99)  # every probability in [0.01, 1.0) is ambiguous
    strict = DomainClassifier(_config(**band, ambiguous="escalate"))
    lenient = DomainClassifier(_config(**band, ambiguous="allow"))
    noticed = DomainClassifier(_config(**band, ambiguous="notice", ambiguous_notice="About {domain}."))
    text = ["Is it safe to take two aspirin a day?"]
    s, l, n = strict.classify(text)[0], lenient.classify(text)[0], noticed.classify(text)[0]
    assert s.ambiguous and l.ambiguous and n.ambiguous
    assert s.regulated and not l.regulated and not n.regulated
    assert s.notice is None and l.notice is None
    assert n.domain == "health" and n.notice == "About health."


@pytest.mark.parametrize("bad", [dict(ambiguous="sometimes"), dict(ambiguous_notice="Caf\u00e9 {domain}"),
                                 dict(ambiguous_notice="{domain} {other}"), dict(ambiguous_notice=" ")])
def test_ambiguous_options_are_validated(bad):
    with pytest.raises(ValueError):
        _config(**bad)


@pytest.mark.parametrize("task", [
    "Write a thank-you card for the nurse who looked after my grandmother.",
    "Suggest three names for a food truck that sells tacos.",
    "Make a list of things to pack for a beach holiday, including sunscreen and snacks.",
])
def test_everyday_tasks_that_mention_food_money_or_health_are_not_regulated(classifier, task):
    [result] = classifier.classify([task])
    assert not result.regulated, result


def test_config_requires_general_domain():
    block = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    del block["domains"]["general"]
    with pytest.raises(ValueError):
        DomainClassifierConfig(**block)


def test_truthfulqa_sample_routing(classifier):
    """60 TruthfulQA questions: regulated categories vs the rest (labels by category)."""
    with open(ROOT / "tests/data/truthfulqa/truthfulqa_sample.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    results = classifier.classify([r["Question"] for r in rows])
    regulated = [res.regulated for r, res in zip(rows, results) if r["Category"] in REGULATED_CATEGORIES]
    general = [res.regulated for r, res in zip(rows, results) if r["Category"] not in REGULATED_CATEGORIES]
    recall = sum(regulated) / len(regulated)
    false_escalation = sum(general) / len(general)
    assert recall >= 0.75, recall
    assert false_escalation <= 0.20, false_escalation
