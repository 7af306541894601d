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
    strict = DomainClassifier(_config(threshold=0.99, margin=0.98, ambiguous="escalate"))
    lenient = DomainClassifier(_config(threshold=0.99, margin=0.98, ambiguous="allow"))
    text = ["Is it safe to take two aspirin a day?"]
    s, l = strict.classify(text)[0], lenient.classify(text)[0]
    assert s.ambiguous and l.ambiguous
    assert s.regulated and not l.regulated


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
