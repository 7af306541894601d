"""Names the Privacy policy failed to recognise at all: a message's addressee, a form field's value,
a rare name standing with the writer (real presidio + spaCy + person head, no mocks)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig
from proxy.guardrails.detectors.privacy_context import ContextConfig, ContextRule
from proxy.guardrails.detectors.privacy_names import NameGazetteerRecognizer, english_words, gazetteer, romanisations
from tests.support.proxy import ROOT
from tests.unit.guardrails.detectors.test_privacy_context import _block
from tests.unit.guardrails.detectors.test_privacy_names import _nlp, _recognized

CHECKS = json.loads((ROOT / "tests" / "data" / "privacy" / "recognition-checks.json").read_text(encoding="utf-8"))
#: Names masked per kind of the check set (0/20, 3/18, 2/20 and 2/18 before the slots were read; 50/71 and 22/32
#: before the kin nouns, the speaking, telling, "who" and copula roles and the accent-free lookup; 56/71 and
#: 24/32 before a message's recipient was judged at the head's own threshold and its sender read as a person).
FLOORS = {"lowercase_first_name": 19, "romanised_name": 13, "no_cue_instruction": 19, "form_field": 16,
          "task_prompt": 59, "statement": 26}


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector(PiiDetectorConfig(**_block()))


def _masked(detector: PiiDetector, text: str) -> list[tuple[int, int, str]]:
    return [(s.start, s.end, s.entity_type) for s in detector.analyze(text)]


def test_the_private_names_of_the_check_set_are_masked(detector):
    found: Counter[str] = Counter()
    for row in CHECKS["private"]:
        spans = _masked(detector, row["text"])
        for name in row["names"]:
            start = row["text"].index(name)
            found[row["kind"]] += any(a <= start and b >= start + len(name) and kind == "PERSON"
                                      for a, b, kind in spans)
    assert {kind: found[kind] for kind in FLOORS} == FLOORS


def test_the_near_misses_of_the_check_set_are_left_untouched(detector):
    touched = [row["text"] for row in CHECKS["untouched"]
               if _masked(detector, row["text"]) and "known_touch" not in row]
    assert touched == []


@pytest.mark.parametrize("text", [
    "tell everyone the build is green", "Let them know the office is closed.", "Tell me about Athens.",
    "Summary: the build failed twice", "Explain the message to them.",
    "Write a letter to Santa asking for a bicycle.",  # a message noun is no cue: a writing exercise as often
])
def test_no_addressee_or_name_field_without_a_name_in_the_slot(text):
    cues = ContextRule.from_config(ContextConfig()).personal_cues(text)
    assert "addressee" not in cues and "name_field" not in cues


@pytest.mark.parametrize(("text", "names"), [
    ("remind tomasz to water the plants before friday", ["tomasz"]),
    ("Warn Levan that the gate code changed.", ["Levan"]),  # NER runs the verb into the name
    ("Invite Sunniva and Halvard to the barbecue on Saturday.", ["Sunniva", "Halvard"]),  # NER: organisations
    ("Guardian: Hamid Sadeghi\nSchool: Riverside Primary", ["Hamid Sadeghi"]),
    ("Witness: Orla Brennan\nStatement: saw the cyclist fall", ["Orla Brennan"]),  # not across the line
    ("Thanasis and I are driving to the airport at six.", ["Thanasis"]),
    ("Giorgos left his jacket at the office yesterday.", ["Giorgos"]),
    ("My two sons, Arjun and Vikram, should share the flat equally.", ["Arjun", "Vikram"]),  # NER: one organisation
    ("I want my savings split between my nieces, Ananya and Kavitha.", ["Ananya", "Kavitha"]),  # NER: places
    ("Our twins, Ishaan and Vihaan, start school in September.", ["Ishaan", "Vihaan"]),
    ("[08:10] Kojo: is the van loaded?\n[08:11] Efua: almost, ten minutes\n[08:11] Kojo: ok", ["Efua"]),  # a speaker
    ("Help me respond to Tevita, who says I owe him money for the concert tickets.", ["Tevita"]),  # NER: organisation
    ("How should I apologise to Ines for missing her party?", ["Ines"]),
    ("Write a short welcome post for Anouk, who joins the choir this week.", ["Anouk"]),  # NER: nothing
    ("Decline the invitation from Halvard politely.", ["Halvard"]),  # NER: a place; a message's sender
])
def test_names_in_an_addressee_slot_a_field_value_or_beside_the_writer_are_recognised(detector, text, names):
    assert set(names) <= set(_recognized(detector, text))


@pytest.mark.parametrize(("text", "word"), [
    ("Subject: Quarterly Report\nPriority: High", "Quarterly Report"),
    ("Status: Open\nAssignee: Backend Team", "Backend Team"),
    ("Tell SQLAlchemy to echo every query.", "SQLAlchemy"),
    ("ask the team whether the demo works", "team"),
    ("Location: San Francisco\nVenue: Moscone Center", "San Francisco"),
    ("[10:01] Nginx: restarted\n[10:02] Postgres: accepting connections", "Nginx"),  # no speaker is a name
    ("Explain to Congress why the budget matters, in the voice of a senator.", "Congress"),
    ("A postcard from Paris arrived this morning.", "Paris"),
    ("Translate the message from Berlin into English.", "Berlin"),
])
def test_dictionary_words_code_names_and_places_are_no_slot_name(detector, text, word):
    assert word not in _recognized(detector, text)


@pytest.mark.parametrize(("word", "spellings"), [
    ("Γιώργος", {"giorgos"}), ("Θανάσης", {"thanasis"}), ("Σταυρούλα", {"stavroula", "stafroula"}),
    ("Дмитрий", {"dmitriy", "dmitry"}), ("ქეთევან", {"ketevan"}), ("Սիմոն", {"simon"}),
    ("Tomasz", set()), ("王", set()),
])
def test_names_in_greek_cyrillic_georgian_and_armenian_letters_are_romanised(word, spellings):
    assert romanisations(word) == spellings


def test_the_gazetteer_holds_the_romanised_names_of_fakers_unromanised_lists():
    first, last = gazetteer()
    assert {"giorgos", "tornike", "ketevan", "zurab"} <= first and {"papadopoulos", "beridze"} <= last


def test_a_name_after_a_house_number_is_a_street(detector):
    nlp = _nlp(detector)
    recognizer = NameGazetteerRecognizer(words=english_words(nlp))
    assert not recognizer._fits(nlp("They live at 14 Tornike Ridge."), 4, 6)
    assert recognizer._fits(nlp("They live with Tornike Beridze."), 3, 5)
