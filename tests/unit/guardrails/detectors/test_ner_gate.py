"""Privacy detector's NER gate (``ner_gate``): spaCy's NER only where its spans are kept,
and no parse at all for a general question whose spans the context rule drops whatever the parse.

Real presidio + spaCy, no mocks. The gate is exact for the context rule (``person_head`` off):
the same spans as NER on every window, on the
presidio sample (tests/data/presidio, every text also lower-cased and turned into a general
question), the TruthfulQA sample's questions and hand-written cases; general requests skip NER,
personal texts do not. With the person head on, the gate still keeps NER off a general question or
request without a capitalised word after its first, and off every one when
``question_name_threshold`` is unset (its names are left, the head never judges them): that is
where the two differ. A request with no personal cue that names someone is parsed with NER, and
its names judged at ``question_name_threshold``: a colleague named in a note to forward is masked,
colleges to rank are left.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors.context_enhancer import LemmaBound
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig

pytestmark = pytest.mark.models
ROOT = Path(__file__).resolve().parents[4]
SAMPLE = [row["full_text"] for row in json.loads((ROOT / "tests/data/presidio/synth_sample.json").read_text())]
CASES = [
    "What is the capital of Portugal?",                                 # general question: names dropped
    "Tell me about the history of Lisbon and Porto.",                   # instruction
    "Who was Ada Lovelace? Email the answer to ada.fan@example.org",    # a direct identifier: personal
    "my name is margaret thompson and i live in leeds",                 # lower case, first person
    "Margaret Thompson lives in Leeds.",                                # a statement
    "Dear John, the meeting moved to Friday.",                          # a greeting
    "Can you ask my neighbour Peter Brown to call me?",                 # a relation cue
    "Summarise the French revolution in three bullet points.",
    "List five Italian painters of the Renaissance, with Giotto first.",
    "Is 10 Downing Street in London?",
    "Call 212-555-0198 to reach the Paris office.",
]
WEAK_SHAPE = "Request 17 (2ed30f5c). What is the capital of Portugal?"  # a weak licence-number shape
RAISED_SHAPE = "Is the driver license number 2ed30f5c valid?"  # ... that its context words raise
IBAN_QUESTION = "What is the IBAN DE89 3704 0044 0532 0130 00 used for?"  # a direct identifier in a question
CASES += [WEAK_SHAPE, RAISED_SHAPE, "Which licensing body issued A1234567 and when?",  # lemma "license"
          IBAN_QUESTION, "Who is Ada Lovelace?",
          "What happened in Paris on Tuesday, July 14th?",  # dates: contextual, not asked for
          "Is https://example.org/page safe for a 12 year old?"]  # a URL and an age, likewise
QUESTIONS = [row["Question"] for row in csv.DictReader(
    (ROOT / "tests/data/truthfulqa/truthfulqa_sample.csv").open(encoding="utf-8"))]


def _detector(**overrides) -> PiiDetector:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetector(PiiDetectorConfig(**{**block, **overrides}))


def _rule_only(**overrides) -> PiiDetector:
    """The detector with the context rule alone deciding (no person head), as the gate's exactness is stated."""
    context = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"].get("context", {})
    return _detector(context={**context, "person_head": False}, **overrides)


@pytest.fixture(scope="module")
def gated() -> PiiDetector:
    return _rule_only()


@pytest.fixture(scope="module")
def headed() -> PiiDetector:
    return _detector()


@pytest.fixture(scope="module")
def ungated() -> PiiDetector:
    return _rule_only(ner_gate=False)


def test_with_the_person_head_a_general_question_names_nobody_without_the_question_threshold() -> None:
    head = _detector(question_name_threshold=None)
    before = head.ner_windows_skipped
    assert head.analyze("Is Tomasz Wrona still angry about the dent in the door?") == []  # no NER: nothing judged
    assert head.ner_windows_skipped == before + 1


@pytest.mark.parametrize("text, names", [
    ("Please forward to Marek: Halina Borowska from accounts needs the signed invoices by Wednesday. "
     "Borowska says she won't approve anything unsigned.", {"Marek", "Halina Borowska", "Borowska"}),
    ("Tell the night shift that Oksana Melnyk from facilities replaces the badge readers tonight.",
     {"Oksana Melnyk"}),
    ("Please reship the order for maria garcia to the new address on Friday.", {"maria garcia"}),  # lower case
    ("is the parcel for jakub nowakowski still at the depot in Gdansk?", {"jakub nowakowski"}),
    ("The rosa parks exhibit opens at the museum in May.", set()),  # "parks" is a dictionary word
    ("Sort these colleges by founding year: Yale, Dartmouth, Cornell, Brown.", set()),
    ("Write a short bio of Marie Curie for a school poster.", set()),
    # a post: NER reads "Lmaoo RT @patpatbush:", "RT" and the link as persons; none is written as a name
    ("RT @Zeb_Qx: Lmaoo RT @patpatbush: that was wild. &#58386;&#58386; RT\"@Zeb_Qx: Wait... http://t.co/e0MTosPl6k\"",
     set()),
])
def test_a_request_without_a_personal_cue_is_parsed_for_the_names_in_it(headed: PiiDetector, text: str,
                                                                       names: set[str]) -> None:
    before = headed.ner_windows_skipped
    assert {text[s.start:s.end] for s in headed.analyze(text) if s.entity_type == "PERSON"} == names
    if names:
        assert headed.ner_windows_skipped == before  # NER ran: the head judged what it found


def test_the_gate_finds_exactly_what_ner_everywhere_finds(gated: PiiDetector, ungated: PiiDetector) -> None:
    texts = (CASES + SAMPLE + [t.lower() for t in SAMPLE] + [f"What does this mean: {t}?" for t in SAMPLE]
             + QUESTIONS + [f"{t.lower().rstrip('.')}?" for t in SAMPLE])
    skipped, unparsed = gated.ner_windows_skipped, gated.parses_skipped
    assert gated.analyze_batch(texts) == ungated.analyze_batch(texts)
    assert gated.ner_windows_skipped > skipped  # and it did skip NER somewhere
    assert gated.parses_skipped - unparsed >= len(QUESTIONS) // 2  # and the parse of most general questions
    assert ungated.ner_windows_skipped == ungated.parses_skipped == 0


def test_a_general_question_skips_ner_and_a_personal_text_does_not(gated: PiiDetector) -> None:
    before = gated.ner_windows_skipped
    assert gated.analyze("What is the capital of Portugal?") == []
    assert gated.ner_windows_skipped == before + 1
    text = "My neighbour is Margaret Thompson and she lives in Leeds."
    found = {text[s.start:s.end]: s.entity_type for s in gated.analyze(text)}
    assert found.get("Margaret Thompson") == "PERSON" and found.get("Leeds") == "LOCATION"
    assert gated.ner_windows_skipped == before + 1


def test_a_question_is_parsed_when_a_span_could_be_a_direct_identifier(gated: PiiDetector) -> None:
    before = gated.parses_skipped
    assert gated.analyze(WEAK_SHAPE) == []  # the licence shape cannot reach its threshold: no parse
    assert gated.parses_skipped == before + 1
    found = {RAISED_SHAPE[s.start:s.end]: s.entity_type for s in gated.analyze(RAISED_SHAPE)}
    assert found == {"2ed30f5c": "US_DRIVER_LICENSE"}  # context words raise the shape over its threshold
    assert [IBAN_QUESTION[s.start:s.end] for s in gated.analyze(IBAN_QUESTION)] == ["DE89 3704 0044 0532 0130 00"]
    assert gated.parses_skipped == before + 1


def test_the_lemma_bound_holds_every_lemma_the_pipeline_gives(gated: PiiDetector) -> None:
    nlp = gated.analyzer().analyzer_engine.nlp_engine.get_nlp("en")
    bound = LemmaBound(nlp)
    texts = CASES + SAMPLE + QUESTIONS + ["The children went driving; mice were better at it than geese."]
    for doc in nlp.pipe(texts):
        assert {t.lemma_.lower() for t in doc} <= set(bound.lemmas(nlp.make_doc(doc.text))), doc.text
    assert {"child", "go", "drive", "mouse", "good", "goose"} <= set(bound.lemmas(nlp.make_doc(texts[-1])))


def test_the_gate_is_off_when_the_context_rule_is_off() -> None:
    detector = _detector(context={"enabled": False})
    text = "Who was Ada Lovelace?"
    assert {text[s.start:s.end] for s in detector.analyze(text)} == {"Ada Lovelace"}
    assert detector.ner_windows_skipped == 0


def test_a_general_question_asks_only_for_the_types_of_spans_always_kept(gated: PiiDetector) -> None:
    decisive = set(gated._decisive_entities)
    assert {"EMAIL_ADDRESS", "PHONE_NUMBER", "US_SSN", "IBAN_CODE"} <= decisive  # direct identifiers
    assert {"LOCATION", "PERSON"} <= decisive  # street addresses, titled persons (always_recognizers)
    assert not decisive & {"DATE_TIME", "AGE", "URL", "NRP"}  # contextual whatever finds them
    before = gated.parses_skipped
    assert gated.analyze("What happened in Paris on Tuesday, July 14th?") == []
    assert gated.parses_skipped == before + 1
