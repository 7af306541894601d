"""Names spaCy's NER misses are found from a gazetteer (detectors/privacy_names.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata

import numpy as np
import pytest

from proxy.guardrails.detectors import privacy_names
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig
from proxy.guardrails.detectors.privacy_names import (
    NameGazetteerRecognizer,
    could_name_a_person,
    diminutive_of,
    english_words,
    gazetteer,
)
from tests.support.proxy import ROOT
from tests.unit.guardrails.detectors.test_privacy_context import _block, _found


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector(PiiDetectorConfig(**_block()))


def _nlp(detector: PiiDetector):
    return detector.analyzer().analyzer_engine.nlp_engine.get_nlp("en")


@dataclass
class _Artifacts:
    tokens: object


def _recognized(detector: PiiDetector, text: str, **parse) -> list[str]:
    nlp = _nlp(detector)
    recognizer = NameGazetteerRecognizer(words=english_words(nlp))
    results = recognizer.analyze(text, ["PERSON"], _Artifacts(nlp(text, **parse)))
    return [text[r.start:r.end] for r in results]


def test_the_gazetteer_holds_first_names_and_surnames_of_many_languages():
    first, last = gazetteer()
    assert {"leocadia", "sunniva", "hedda", "ingrid"} <= first and {"nielsen", "kowalski"} <= last
    assert all(" " not in name and name == name.casefold() for name in first | last)


def test_the_shipped_gazetteer_is_the_one_faker_gives_and_is_read_without_faker():
    record = json.loads(privacy_names.GAZETTEER.read_text(encoding="utf-8"))
    assert record["faker"] == metadata.version("faker")  # else: python -m proxy.guardrails.detectors.privacy_names
    assert gazetteer() == privacy_names.faker_gazetteer() == (frozenset(record["first"]), frozenset(record["last"]))
    probe = ("import sys; from proxy import offline; offline.keep_torch_out_of_presidio(); "  # as the server
             "from proxy.guardrails.detectors.privacy_names import gazetteer; gazetteer(); "
             "print(sorted(m for m in sys.modules if m.startswith('faker')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_a_list_from_another_faker_version_is_not_read(tmp_path):
    stale = tmp_path / "name-gazetteer.json"
    stale.write_text(json.dumps({"faker": "0.0.1", "first": ["zzfirst"], "last": ["zzlast"]}))
    assert privacy_names.read_gazetteer(stale) == privacy_names.faker_gazetteer()
    current = tmp_path / "current.json"
    current.write_text(json.dumps({"faker": metadata.version("faker"), "first": ["zzfirst"], "last": ["zzlast"]}))
    assert privacy_names.read_gazetteer(current) == (frozenset({"zzfirst"}), frozenset({"zzlast"}))


@pytest.mark.parametrize("text, name", [
    ("Leocadia forgot her umbrella in my car again.", "Leocadia"),  # NER finds nobody
    ("Our three tutors, Hedda, Greta and Olav, mark the exams together.", "Hedda"),  # a list with persons
    ("my cousin ingrid and her friend are staying with us this weekend", "ingrid"),  # a lower-case text
    ("my friend dagny keeps ignoring my texts, how do I bring it up?", "dagny"),  # lower case but for "I"
    ("Björn forgot his lunch box at school again.", "Björn"),  # tagged a common noun, opening the sentence
])
def test_a_private_name_ner_misses_is_masked(detector, text, name):
    assert _found(detector, text).get(name) == "PERSON"


@pytest.mark.parametrize("word, base", [
    ("marzenka", "marzena"),  # a suffix and a vowel
    ("stefanek", "stefan"),  # the stem as is
    ("olly", "olle"),  # another suffix, another vowel
])
def test_a_diminutive_is_traced_to_its_first_name(word, base):
    first, _ = gazetteer()
    assert word not in first and base in first
    assert diminutive_of(word, first) == base
    assert diminutive_of("vodka", first) is None and diminutive_of("ika", first) is None  # stem too short


@pytest.mark.parametrize("text, name", [
    ("Marzenka borrowed my bike and has not brought it back.", "Marzenka"),  # a diminutive
    ('Agent:"How can I help?"\nGrzegorz:"My card was charged twice."', "Grzegorz"),  # glued to punctuation
    ("my neighbour said: call me jarosław when you need the ladder", "jarosław"),  # a slot, lower case
    ("hi, this is raul from flat 4b, my heater is broken again", "raul"),  # a writer's introduction
    ("my landlord obinwa ekwueme wants the rent early", "obinwa ekwueme"),  # unknown words, lower case
])
def test_diminutives_glued_names_and_lower_case_slots_are_found(detector, text, name):
    assert name in _recognized(detector, text)


@pytest.mark.parametrize("text", [
    "Chance is what my whole plan depends on.",  # a dictionary word opening a sentence
    "I met the Prince Regent at a charity dinner last year.",  # a determiner before: a title
    "My flat is at Kaplanova 12, so drop the keys there.",  # a number after: a street
    "We met outside Ivana Station at noon.",  # a place word after
    "We danced a Polka at my cousin's wedding.",  # a dictionary word that looks like a diminutive
    "i called mom after lunch and we talked for ages",  # a slot before a dictionary word
    "hi, this is kubernetes running on my laptop, how do i update it",  # an introduction of no first name
    "i watched netflix with my wife and the kids last night",  # one unknown word, lower case
    "get the logs from ftp://nowak.example.org/files before Monday",  # names glued inside an address
])
def test_words_that_only_look_like_names_are_not_reported(detector, text):
    assert _recognized(detector, text) == []


def test_a_span_of_dictionary_words_only_names_no_one():
    words = frozenset({"hello", "excuse", "me", "good", "morning", "rose", "baker", "will"})
    first, last = frozenset({"rose", "will"}), frozenset({"baker"})
    assert not could_name_a_person("Hello", words, first, last)
    assert not could_name_a_person("Good Morning", words, first, last)
    assert could_name_a_person("Rose Baker", words, first, last)  # dictionary words, and names
    assert could_name_a_person("Will's", words, first, last)  # the possessive dropped
    assert could_name_a_person("Hello Oyelaran", words, first, last)  # one word outside the dictionary
    assert could_name_a_person("Hello", frozenset(), first, last)  # no dictionary: nothing to judge


@pytest.mark.parametrize("text, masked", [
    ("Customer: Hello, I want to return the shoes I bought.", {}),  # a speaker label, then a greeting
    ("Customer: Thanks, that fixed my order.", {}),
    ("Customer: Rose Baker says the parcel never came and wants a refund.", {"Rose Baker": "PERSON"}),
])
def test_a_record_field_before_a_greeting_masks_nothing(detector, text, masked):
    assert {k: v for k, v in _found(detector, text).items() if v == "PERSON"} == masked


@pytest.mark.parametrize("text, name", [
    ("Yesterday Zebulona's nephew broke the kitchen window.", "Zebulona"),  # NER: a place; possessor of a kin noun
    ("My flatmate Okwuosa left the oven on again.", "Okwuosa"),  # NER: a group; after a relation noun
    ("I am taking my kid Brontavy to the zoo.", "Brontavy"),  # NER: a group; in apposition
    ("Kestrova always pays late, and she never says sorry.", "Kestrova"),  # NER: an organisation; "she" after it
    ("In the meeting, Priyamvada said the launch is delayed.", "Priyamvada"),  # NER: an organisation; a speaker
    ('Fix the grammar: "Tahmina and me is going to the market tomorrow."', "Tahmina"),  # a place; with the writer
    ("Write a short welcome post for Anouk, who joins the choir this week.", "Anouk"),  # a place; "who" after it
    ("The patient's name was Amaru Quispe.", "Amaru Quispe"),  # an organisation; what a person's name is
    ("I told Ximena that the meeting was cancelled.", "Ximena"),  # a place; the one told
    ("Anahí is allergic to peanuts, so please check the menu.", "Anahí"),  # the gazetteer's "anahi"
    ("Please update the records: Maelle Girard now lives at the new address.", "Maelle Girard"),  # "maëlle"
])
def test_a_rare_name_ner_calls_a_place_or_organisation_is_a_person_by_its_role(detector, text, name):
    assert name in _recognized(detector, text)


def test_a_person_by_its_role_wins_over_ner_s_place_and_is_masked(detector):
    text = "Yesterday Zebulona's nephew broke the kitchen window."
    assert _found(detector, text).get("Zebulona") == "PERSON"  # NER's GPE span loses to the person


@pytest.mark.parametrize("text", [
    "Microsoft hired a new chief, and he starts Monday.",  # the pronoun refers to the noun between
    "Paris is lovely in spring; she says the food is great.",  # a noun argument between
    "Toyota is recalling cars. Its chief said he was sorry.",  # an organisation is "it"
    "Google's customers complained about the outage.",  # possessor of a noun that is no relation
    "Google said it would appeal the ruling.",  # a dictionary word as the speaker
    "We flew to Lisbon, where my aunt lives.",  # a place's relative clause
    "Apple, which makes phones, said it would appeal.",  # an organisation's relative pronoun
    "The company's name is Zalando.",  # the name of no person
    "We asked Google for a refund.",  # a dictionary word told
])
def test_an_organisation_or_place_in_no_person_s_role_stays_what_ner_says(detector, text):
    assert _recognized(detector, text) == []


def test_nothing_is_reported_without_ner_s_parse(detector):
    text = "Leocadia forgot her umbrella in my car again."
    assert _recognized(detector, text) == ["Leocadia"]
    assert _recognized(detector, text, disable=["ner"]) == []


def test_the_recognizer_can_be_turned_off():
    off = PiiDetector(PiiDetectorConfig(**_block(name_gazetteer=False)))
    assert "Leocadia" not in _found(off, "Leocadia forgot her umbrella in my car again.")


@dataclass(frozen=True)
class _FlatHead:
    """A person head that calls every mention private with the same probability."""

    p: float
    threshold: float = 0.45

    def probability(self, features: np.ndarray) -> np.ndarray:
        return np.full(len(np.atleast_2d(features)), self.p)


def test_a_person_only_the_gazetteer_names_needs_the_higher_threshold():
    detector = PiiDetector(PiiDetectorConfig(**_block(name_gazetteer_threshold=0.7)))
    text = "Leocadia forgot her umbrella in my car, and Maria Gonzalez found it."
    detector.person_head = _FlatHead(0.6)  # type: ignore[assignment]
    found = _found(detector, text)
    assert found.get("Maria Gonzalez") == "PERSON" and "Leocadia" not in found
    detector.person_head = _FlatHead(0.75)  # type: ignore[assignment]
    assert _found(detector, text).get("Leocadia") == "PERSON"


def test_a_name_in_a_general_question_needs_the_question_threshold():
    detector = PiiDetector(PiiDetectorConfig(**_block(question_name_threshold=0.85)))
    text = "Is Tomasz Wrona still angry about the dent in the door?"
    detector.person_head = _FlatHead(0.8)  # type: ignore[assignment]
    assert _found(detector, text) == {}
    detector.person_head = _FlatHead(0.9)  # type: ignore[assignment]
    assert _found(detector, text) == {"Tomasz Wrona": "PERSON"}
    skipped = detector.parses_skipped
    assert _found(detector, "what is the tallest mountain on earth?") == {}  # no capitalised word: no parse
    assert _found(detector, "Is France bigger than the US and Americans think?") == {}  # dictionary words, an acronym
    assert detector.parses_skipped == skipped + 2


def test_a_public_figure_asked_about_is_left_with_the_shipped_head(detector):
    for text in ("How old is Barack Obama?", "What did Marie Curie discover about radium?"):
        assert "PERSON" not in _found(detector, text).values()


@pytest.mark.parametrize("text, lower", [
    ("my cousin ingrid is staying with us", True),
    ("how do I ask my friend dagny, and I'm sure she'll say yes", True),  # the pronoun, alone or contracted
    ("Is it ok", False),  # a capital opening the sentence
    ("how do I ask Ann", False),
    ("IKEA opens at nine", False),
])
def test_a_lower_case_text_may_capitalise_the_pronoun_i(text, lower):
    assert privacy_names.lower_case(text) is lower


def test_a_name_s_accents_need_not_match_the_gazetteer_s():
    assert privacy_names.unaccented("anahí") == "anahi" and privacy_names.unaccented("maëlle") == "maelle"
    assert privacy_names.unaccented("jarosław") == "jarosław"  # a letter of its own, no mark
    assert privacy_names.unaccented("γιώργος") == "γιώργος"  # another script: romanised elsewhere
    first, _ = gazetteer()
    assert "maëlle" in first and "maelle" not in first and "anahi" in first and "anahí" not in first

