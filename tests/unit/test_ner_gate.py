"""Privacy detector's NER gate (``ner_gate``, issue 9): spaCy's NER only where a name could be.

Real presidio + spaCy, no mocks: a window with no digit and no capitalised word (other than "I"
and sentence starts) skips NER, and still gets its pattern entities, its mood and context words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig, needs_ner

pytestmark = pytest.mark.models
ROOT = Path(__file__).resolve().parents[2]


def _detector(**overrides) -> PiiDetector:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetector(PiiDetectorConfig(**{**block, **overrides}))


@pytest.fixture(scope="module")
def gated() -> PiiDetector:
    return _detector()


@pytest.mark.parametrize("text, expected", [
    ("what is the capital of portugal?", False),
    ("Hello there. How are you? I think I'm fine!", False),
    ("\"Hello,\" she said. \"Goodbye.\"", False),
    ("Write a haiku.\nMake it about cats.", False),
    ("What is the capital of Portugal?", True),   # a capital inside the sentence
    ("tell me about Ada", True),
    ("call me at five, room 12", True),           # a digit
    ("note: Zoé arrives tomorrow", True),         # a capital after a colon counts
    ("I met O'Neill. He was late.", True),
])
def test_needs_ner(text: str, expected: bool) -> None:
    assert needs_ner(text) is expected


def test_names_are_still_found_when_the_gate_lets_ner_run(gated: PiiDetector) -> None:
    text = "My neighbour is Margaret Thompson and she lives in Leeds."
    found = {text[s.start:s.end]: s.entity_type for s in gated.analyze(text)}
    assert found.get("Margaret Thompson") == "PERSON" and found.get("Leeds") == "LOCATION"


def test_a_gated_window_keeps_pattern_entities_mood_and_context(gated: PiiDetector) -> None:
    # No digit, no inner capital: NER is skipped; the e-mail (a pattern) is always personal data,
    # and the weekday is masked because the text is personal ("my", "i was born"): mood and
    # context come from the rest of the pipeline.
    text = "i was born on a sunday, write to me at ada.byron@example.org"
    assert not needs_ner(text)
    spans = gated.analyze(text)
    found = {text[s.start:s.end]: s.entity_type for s in spans}
    assert found.get("ada.byron@example.org") == "EMAIL_ADDRESS"
    assert found.get("sunday") == "DATE_TIME"
    assert spans == _detector(ner_gate=False).analyze(text)


def test_a_general_question_without_names_is_left_alone(gated: PiiDetector) -> None:
    assert gated.analyze("how do i bake sourdough bread on a friday?") == []
