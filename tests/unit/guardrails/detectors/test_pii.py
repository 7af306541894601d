"""Privacy detector: real presidio + spaCy (en_core_web_sm 3.8.0), no mocks."""

import json
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors.pii import (
    DATASET_ENTITY_MAPPING,
    PiiDetector,
    PiiDetectorConfig,
    PiiMasker,
    PiiSpan,
)

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetector(PiiDetectorConfig(**block))


def _found(text: str, spans: list[PiiSpan]) -> dict[str, str]:
    return {text[s.start:s.end]: s.entity_type for s in spans}


def test_structured_identifiers_found_with_type_and_offsets(detector):
    text = (
        "Contact John Smith at john.smith@example.com or call 212-555-0198. "
        "Card 4111 1111 1111 1111, IBAN GB82WEST12345698765432."
    )
    spans = detector.analyze(text)
    found = _found(text, spans)
    assert found["john.smith@example.com"] == "EMAIL_ADDRESS"
    assert found["212-555-0198"] == "PHONE_NUMBER"
    assert found["4111 1111 1111 1111"] == "CREDIT_CARD"
    assert found["GB82WEST12345698765432"] == "IBAN_CODE"
    assert found["John Smith"] == "PERSON"
    assert text.index("john.smith@") == next(s.start for s in spans if s.entity_type == "EMAIL_ADDRESS")


def test_spans_sorted_and_disjoint(detector):
    text = "Jay Pearce lives at 67952 Höfðagata 39, Keflavík. He is 42 years old, phone 0699 868 88 55."
    spans = detector.analyze(text)
    assert spans == sorted(spans, key=lambda s: s.start)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))
    assert {"PERSON", "LOCATION", "AGE"} <= {s.entity_type for s in spans}


def test_plain_text_has_no_pii(detector):
    assert detector.analyze("Could I change the payment due date of my credit card?") == []
    assert detector.analyze("   ") == []


def test_batch_matches_single(detector):
    texts = ["Email me at a.b@example.org", "nothing here", "Call Maria Lopez on +44 20 7946 0958"]
    assert detector.analyze_batch(texts) == [detector.analyze(t) for t in texts]


def test_version_names_presidio_and_spacy_model(detector):
    assert "presidio-analyzer 2.2" in detector.version and "3.8.0" in detector.version


def test_masking_is_typed_consistent_and_reversible(detector):
    first = "Hi, I am John Smith, my email is john.smith@example.com."
    second = "Please reply to john.smith@example.com and cc jane@example.org."
    masker = PiiMasker()
    masked1 = masker.mask(first, detector.analyze(first))
    masked2 = masker.mask(second, detector.analyze(second))
    assert "<PERSON_1>" in masked1 and "<EMAIL_ADDRESS_1>" in masked1
    assert "<EMAIL_ADDRESS_1>" in masked2 and "<EMAIL_ADDRESS_2>" in masked2
    for value in ("John Smith", "john.smith@example.com", "jane@example.org"):
        assert value not in masked1 + masked2
    assert masker.restore(masked1) == first and masker.restore(masked2) == second
    assert masker.mapping["<EMAIL_ADDRESS_2>"] == "jane@example.org"
    answer = "Sure <PERSON_1>, I wrote to <EMAIL_ADDRESS_2>. <UNKNOWN_9> stays."
    assert masker.restore(answer) == "Sure John Smith, I wrote to jane@example.org. <UNKNOWN_9> stays."


def test_mask_rejects_overlapping_spans():
    with pytest.raises(ValueError):
        PiiMasker().mask("abcdef", [PiiSpan("PERSON", 0, 4, 0.9), PiiSpan("LOCATION", 2, 5, 0.9)])


def test_config_rejects_unknown_keys():
    with pytest.raises(ValueError):
        PiiDetectorConfig(entities=["PERSON"], unknown=1)


def test_presidio_research_sample_precision_recall(detector):
    """Span-level overlap + exact (mapped) type on 50 rows of presidio-research's synth set."""
    rows = json.loads((ROOT / "tests/data/presidio/synth_sample.json").read_text())
    tp_pred = fp = tp_gold = fn = 0
    overlap = lambda a, b: a[1] < b[2] and b[1] < a[2]  # noqa: E731
    for row, spans in zip(rows, detector.analyze_batch([r["full_text"] for r in rows])):
        gold = [(DATASET_ENTITY_MAPPING[s["entity_type"]], s["start_position"], s["end_position"]) for s in row["spans"]]
        out_of_scope = [g for g in gold if g[0] is None]
        gold = [g for g in gold if g[0] is not None]
        preds = [(s.entity_type, s.start, s.end) for s in spans]
        for p in preds:
            if any(overlap(p, g) and p[0] == g[0] for g in gold):
                tp_pred += 1
            elif not any(overlap(p, g) for g in out_of_scope):
                fp += 1
        for g in gold:
            hit = any(overlap(p, g) and p[0] == g[0] for p in preds)
            tp_gold += hit
            fn += not hit
    precision, recall = tp_pred / (tp_pred + fp), tp_gold / (tp_gold + fn)
    # vanilla presidio + en_core_web_sm scores about 0.45 / 0.48 on these rows' source
    assert precision >= 0.80, precision
    assert recall >= 0.60, recall


def test_policy_recognizers_need_their_context(detector):
    """The YAML pattern recognizers: card digits, short national phone formats and bare years
    count only next to their context words; numeric dates, honorific names and phone numbers of
    three or more digit groups (at least 7 digits) count on their own."""
    text = "Please block my card 4393889199179061388; my mobile is 60-56-85. Office 60-56-85-91."
    found = _found(text, detector.analyze(text))
    assert found["4393889199179061388"] == "CREDIT_CARD"
    assert found["60-56-85"] == "PHONE_NUMBER" and found["60-56-85-91"] == "PHONE_NUMBER"
    plain = "Order 4393889199179061388 shipped; table 60-56-85 is free."
    assert {"CREDIT_CARD", "PHONE_NUMBER"}.isdisjoint(s.entity_type for s in detector.analyze(plain))

    text = "She was born in 1968 and signed the lease on 9/20/1998 at 2018-01-14 03:07:43 with her landlord Mrs. Ukkonen."
    found = _found(text, detector.analyze(text))
    assert found["1968"] == "DATE_TIME" and found["9/20/1998"] == "DATE_TIME"
    assert found["2018-01-14 03:07:43"] == "DATE_TIME"
    assert found["Ukkonen"] == "PERSON"
    assert not any(s.entity_type == "DATE_TIME" for s in detector.analyze("Add 1968 apples to 2018 pears."))


# ---- look-alike characters and encodings (proxy/guardrails/normalise.py) ------------------------

FULL_WIDTH = "".join(chr(ord(c) + 0xFEE0) for c in "john.smith@example.com")
NBSP_IBAN = "GB82\u00a0WEST\u00a01234\u00a05698\u00a07654\u00a032"


@pytest.mark.parametrize("text, written, entity", [
    (f"Please wire it to IBAN {NBSP_IBAN} today.", NBSP_IBAN, "IBAN_CODE"),
    ("Charge my card 4111\u20111111\u20111111\u20111111 please.", "4111\u20111111\u20111111\u20111111", "CREDIT_CARD"),
    ("Charge my card 4111\u20131111\u20131111\u20131111 please.", "4111\u20131111\u20131111\u20131111", "CREDIT_CARD"),
    ("Charge my card 4111_1111_1111_1111 please.", "4111_1111_1111_1111", "CREDIT_CARD"),
    (f"Write to me at {FULL_WIDTH} soon.", FULL_WIDTH, "EMAIL_ADDRESS"),
    ("Write to me at john.smi\u200bth@exam\u200bple.com soon.", "john.smi\u200bth@exam\u200bple.com", "EMAIL_ADDRESS"),
    ("Write to me at j o h n @ e x a m p l e . c o m soon.", "j o h n @ e x a m p l e . c o m", "EMAIL_ADDRESS"),
    ("My phone is +44/20/7946/0958, call me.", "+44/20/7946/0958", "PHONE_NUMBER"),
    ("My card is four one one one one one one one one one one one one one one one, charge it.",
     "four one one one one one one one one one one one one one one one", "CREDIT_CARD"),
    ("Email me: am9obi5zbWl0aEBleGFtcGxlLmNvbQ== thanks", "am9obi5zbWl0aEBleGFtcGxlLmNvbQ==", "EMAIL_ADDRESS"),
], ids=["iban-nbsp", "card-nb-hyphen", "card-en-dash", "card-underscores", "email-full-width",
        "email-zero-width", "email-spaced", "phone-slashes", "card-spelled", "email-base64"])
def test_identifiers_in_look_alike_characters_are_found_over_the_original_characters(detector, text, written,
                                                                                      entity):
    found = _found(text, detector.analyze(text))
    assert found.get(written) == entity, found
    masked = PiiMasker().mask(text, detector.analyze(text))
    assert written not in masked and f"<{entity}_1>" in masked


def test_ordinary_text_with_typographic_characters_has_the_same_spans(detector):
    text = "The 2019\u20132020 season \u2014 as you\u2019d expect \u2014 ran from May to June."
    assert detector.analyze(text) == detector._analyze_written([text])[0]
