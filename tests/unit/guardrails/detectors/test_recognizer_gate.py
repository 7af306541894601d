"""Privacy's recognizer gate (``patterns.skip_where_unmatchable``): presidio's digit and e-mail
recognizers do not run on a text without the characters each of their matches holds, and the
spans are the same as with every recognizer running.

Real presidio + spaCy, no mocks: the gated recognizers' own patterns find nothing on random texts
without those characters (the table's claim), and the detector with the gate gives the same spans
as without it on the presidio sample and hand-written texts, each with and without digits and "@".
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig

pytestmark = pytest.mark.models
ROOT = Path(__file__).resolve().parents[4]
SAMPLE = [row["full_text"] for row in json.loads((ROOT / "tests/data/presidio/synth_sample.json").read_text())]
TEXTS = [
    "What is the capital of Portugal?",
    "Write a short birthday message for my colleague Priya.",
    "My name is Jonas Berg and my phone number is 040 123 4567, can you draft a reply to my landlord?",
    "Please send the invoice to maria.lopez@example.com by Friday.",
    "My card is 4111 1111 1111 1111 and my SSN 078-05-1120; IBAN DE89 3704 0044 0532 0130 00.",
    "The server at 192.168.0.12 and fe80::1ff:fe23:4567:890a, also :: and ::ab alone.",
    "Passport A12345678, licence D1234567, account 123456789012.",
    "Reach me at jonas at example dot com or on five five five, one two three four.",
]


def _detector() -> PiiDetector:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetector(PiiDetectorConfig(**block))


def _without(text: str, characters: str) -> str:
    """``text`` with every digit (for "digit") or the given characters replaced by letters."""
    return "".join("x" if (c.isdigit() and characters.startswith("digit")) or c in characters.replace("digit", "")
                   else c for c in text)


def test_could_match_reads_the_needed_characters():
    assert patterns.could_match("digit", "room 4") and not patterns.could_match("digit", "room four")
    assert patterns.could_match("digit", "room \u0664")  # an Arabic-Indic digit is a digit too
    assert patterns.could_match("digit:", "a::b") and not patterns.could_match("digit:", "a-b")
    assert patterns.could_match("@", "a@b") and not patterns.could_match("@", "a at b")


def test_could_match_is_str_isdigit_on_ascii_and_other_texts():
    """The ASCII shortcut answers as the per-character ``str.isdigit`` walk does, on ASCII texts and
    on texts with other digits (superscripts, Arabic-Indic, full-width) or none."""
    rng = random.Random(7)
    alphabet = string.printable + "\u00b2\u0664\uff17\u00e9\u2460:"
    texts = ["", "abc", "a:b", "x\u00b2", "\uff17", "caf\u00e9 1", "caf\u00e9"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    for needs in ("digit", "digit:"):
        extra = needs[len("digit"):]
        for text in texts:
            assert patterns.could_match(needs, text) == any(c.isdigit() or c in extra for c in text), (needs, text)


@pytest.fixture(scope="module")
def detectors(tmp_path_factory):
    """The detector with the gate, and one built with ``SONATE_PII_RECOGNIZER_GATE=0``."""
    gated = _detector()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(patterns.RECOGNIZER_GATE_ENV, "0")
        ungated = _detector()
    return gated, ungated


def test_every_listed_recognizer_is_gated_and_off_by_the_switch(detectors):
    gated, ungated = detectors
    names = {r.name for r in gated.analyzer().analyzer_engine.registry.recognizers
             if "gated" in getattr(r.analyze, "__qualname__", "")}
    assert names == set(patterns.UNMATCHABLE_WITHOUT)
    assert not any("gated" in getattr(r.analyze, "__qualname__", "")
                   for r in ungated.analyzer().analyzer_engine.registry.recognizers)


def test_gated_recognizers_find_nothing_without_their_characters(detectors):
    """The table's claim, on the ungated recognizers: 3,000 random texts of letters, punctuation,
    separators and the other needed characters, none holding the recognizer's own."""
    _, ungated = detectors
    rng = random.Random(0)
    alphabet = string.ascii_letters + " .-:/@+()#,;_%" + "ÀéßЖ" + string.digits
    recognizers = [r for r in ungated.analyzer().analyzer_engine.registry.recognizers
                   if r.name in patterns.UNMATCHABLE_WITHOUT]
    for recognizer in recognizers:
        needs = patterns.UNMATCHABLE_WITHOUT[recognizer.name][0]
        for _ in range(3000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
            text = _without(text, needs)
            assert not recognizer.analyze(text=text, entities=recognizer.supported_entities, nlp_artifacts=None), \
                (recognizer.name, text)


def test_same_spans_with_and_without_the_gate(detectors):
    gated, ungated = detectors
    texts = [*TEXTS, *SAMPLE]
    texts += [_without(t, "digit") for t in texts] + [_without(t, "@") for t in texts] + [t.lower() for t in texts]
    assert any(not patterns.could_match("digit", t) for t in texts)
    assert any(not patterns.could_match("@", t) for t in texts)
    assert gated.analyze_batch(texts) == ungated.analyze_batch(texts)
    found = {s.entity_type for spans in gated.analyze_batch(TEXTS) for s in spans}
    assert {"PHONE_NUMBER", "EMAIL_ADDRESS", "CREDIT_CARD", "IP_ADDRESS"} <= found  # the gate lets matches through
