"""Privacy masks a person, not a string: the person head and coreference (detectors/privacy_person.py)."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig, PiiMasker
from proxy.guardrails.detectors.privacy_context import ContextConfig, ContextRule
from proxy.guardrails.detectors.privacy_person import (
    FEATURES,
    PersonHead,
    coreferent_spans,
    name_keys,
    name_parts,
    person_groups,
    self_introduced,
)
from tests.unit.guardrails.detectors.test_privacy_context import _block, _found


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector(PiiDetectorConfig(**_block()))


def test_name_parts_drop_titles_particles_and_possessives():
    assert name_parts("Dr. Ana de Souza's") == ["Ana", "Souza"]
    assert name_parts("J. R.") == []


def test_person_groups_join_mentions_sharing_a_name_word():
    assert person_groups(["Ana Dias", "Tom", "dias", "Ana", "Tom Reed", "Lee"]) == [[0, 2, 3], [1, 4], [5]]


def test_coreferent_spans_find_every_other_mention_in_any_casing():
    text = "Ana Dias called. ana's card was blocked; DIAS wants a refund. Anastasia did not call."
    found = [text[a:b] for a, b in coreferent_spans(text, ["Ana Dias"], [(0, 8)])]
    assert found == ["ana", "DIAS"]  # not inside "Anastasia", possessive left outside the span


def test_a_family_named_in_the_plural_is_the_same_person():
    text = "Zielinski has my drill. Should I knock on the Zielinskis' door or ask the Joneses?"
    found = [text[a:b] for a, b in coreferent_spans(text, ["Piotr Zielinski", "Sam Jones"], [(0, 9)])]
    assert found == ["Zielinski", "Jones"]  # the plural's "s" / "es" stays outside the span
    assert coreferent_spans("Zielinskis are nice.", ["Piotr Zielinski"], []) == []  # a plural only after "the"


def test_a_hyphen_part_an_unaccented_form_and_another_apostrophe_name_the_same_person():
    text = "Ask Kasprzak-Nowicki. Then nowicki, then siobhan, then SIOBHÁN, not Nowickis or Siobhanne."
    found = [text[a:b] for a, b in coreferent_spans(text, ["Siobhán Kasprzak-Nowicki"], [])]
    assert found == ["Kasprzak-Nowicki", "nowicki", "siobhan", "SIOBHÁN"]
    assert name_keys("Dr. Siobhán Kasprzak-Nowicki") == ["siobhan", "kasprzak-nowicki", "kasprzak", "nowicki"]
    text = "Declan O'Connor called; O’Connor’s van and o'connor's dog are outside."
    assert [text[a:b] for a, b in coreferent_spans(text, ["Declan O'Connor"], [(0, 15)])] == ["O’Connor", "o'connor"]
    assert person_groups(["Siobhán Kasprzak-Nowicki", "nowicki", "Siobhan", "Ana"]) == [[0, 1, 2], [3]]


def test_common_words_in_a_name_are_not_looked_for():
    text = "Will Smith said he will call. Smith is late."
    spans = coreferent_spans(text, ["Will Smith"], [(0, 10)], frozenset({"will"}))
    assert [text[a:b] for a, b in spans] == ["Smith"]


def test_the_names_pattern_is_built_once_per_names_and_stop_words():
    from proxy.guardrails.detectors import privacy_person

    privacy_person._names_pattern.cache_clear()
    texts = ["Ana wrote.", "Dias called.", "Nobody here."]
    found = [coreferent_spans(t, {"Ana Dias", "Bo Li"}, []) for t in texts]
    assert found == [[(0, 3)], [(0, 4)], []]
    assert privacy_person._names_pattern.cache_info().misses == 1  # one pattern for the three texts
    assert coreferent_spans("will Smith", ["Will Smith"], [], frozenset({"will"})) == [(5, 10)]
    assert coreferent_spans("will Smith", ["Will Smith"], []) == [(0, 4), (5, 10)]  # other stop words, other pattern


def test_the_shipped_head_loads_and_scores_in_range():
    head = PersonHead.load()
    assert head.coef.shape == (FEATURES,) and 0 < head.threshold < 1 and head.version.startswith("person-head@")
    p = head.probability(np.zeros((2, FEATURES), dtype=np.float32))
    assert p.shape == (2,) and np.all((p >= 0) & (p <= 1))


@pytest.mark.parametrize("text, name", [
    ("Patient Kwame Asante, 61, was admitted with pneumonia; Kwame's daughter signed the form.", "Kwame Asante"),
    ("Ticket 5521 from customer Lucia Benedetti: Lucia cannot log in since Monday.", "Lucia Benedetti"),
    ("Write a reference letter for my former employee Tariq Hamdan, who managed our night shift.", "Tariq Hamdan"),
])
def test_a_private_person_is_masked_everywhere_in_the_text(detector, text, name):
    found = _found(detector, text)
    assert found.get(name) == "PERSON"
    first = name.split()[0]
    assert all(s.entity_type == "PERSON" for s in detector.analyze(text) if text[s.start:s.end] == first)
    assert sum(text[s.start:s.end] == first for s in detector.analyze(text)) == text.count(first) - 1


def test_self_introduced_reads_only_the_words_right_before_the_mention():
    text = "Summarise this. I am John Smith, my name is Tom Baker; ask Ada Lovelace."
    assert self_introduced(text, text.index("John"))
    assert self_introduced(text, text.index("Tom"))
    assert not self_introduced(text, text.index("Ada"))
    assert self_introduced("i'm Eve", 4) and not self_introduced("I am", 0)


@pytest.mark.parametrize("text, name", [  # names a public figure also bears, after instructions the head reads as public
    ("Write a poem about the sea. I am John Smith, write to john.smith@example.com.", "John Smith"),
    ("Summarise this article about the election. I'm Tom Baker, order 4471.", "Tom Baker"),
])
def test_the_writer_s_own_name_is_masked_whoever_else_bears_it(detector, text, name):
    assert _found(detector, text).get(name) == "PERSON"


def test_writer_relation_reads_the_writer_s_own_relation_noun_right_before_the_mention():
    rule = ContextRule.from_config(ContextConfig())
    for text, name in (("Give a farewell speech for our colleague Rangi Parata.", "Rangi"),
                       ("My neighbour, Siosaia Taufa, parks across my drive.", "Siosaia"),
                       ("Ask your new tenant Ms. Lund for the meter reading.", "Ms."),
                       ("My PhD students Ana and Luis wrote it.", "Ana"),
                       ("Write a short poem for my goddaughter Ines on her first communion.", "Ines"),
                       ("Write a speech for the retirement of our caretaker, Desmond Achterberg.", "Desmond")):
        assert rule.writer_relation(text, text.index(name)), text
    for text, name in (("What did Michelle Obama say about her husband Barack Obama?", "Barack"),
                       ("My favourite author Zadie Smith has a new novel.", "Zadie"),
                       ("My neighbour said Tom Baker was on television.", "Tom"),
                       ("The doctor Jonas Salk made the polio vaccine.", "Jonas")):
        assert not rule.writer_relation(text, text.index(name)), text
    assert not ContextRule.from_config(ContextConfig(relations=[])).writer_relation("my friend Ana", 10)


@pytest.mark.parametrize("text, name", [  # the head alone reads each of these people as public
    ("Give me a short speech for the farewell of our colleague Rangi Parata, who is retiring after 30 years.",
     "Rangi Parata"),
])
def test_a_person_named_after_the_writer_s_relation_noun_is_masked(detector, text, name):
    assert _found(detector, text).get(name) == "PERSON"


@pytest.mark.parametrize("text", [
    "Albert Einstein published the theory of special relativity in 1905.",
    "Write a short essay comparing Abraham Lincoln and Winston Churchill as war leaders.",
    "The new album by Taylor Swift topped the charts in its first week.",
    "What did Michelle Obama say about her husband Barack Obama in her memoir?",
])
def test_public_figures_are_left_alone(detector, text):
    assert not any(s.entity_type == "PERSON" for s in detector.analyze(text))


def test_one_person_gets_one_placeholder_across_texts(detector):
    texts = ["My tenant Ibrahim Kaya has not paid rent since March.", "Should I write to Kaya or to ibrahim first?"]
    spans = detector.corefer(texts, [detector.analyze(t) for t in texts])
    masker = PiiMasker()
    masked = [masker.mask(t, s) for t, s in zip(texts, spans)]
    assert "Ibrahim" not in masked[0] and "Kaya" not in masked[1] and "ibrahim" not in masked[1]
    assert masked[1].count("<PERSON_1>") == 2
    assert masker.restore("<PERSON_1>") == "Ibrahim Kaya"


@pytest.mark.parametrize(("text", "names"), [
    # NER calls the first "Nwosu" a nationality and the last "Dubois" a place
    ("Night log: guard Emeka Nwosu found the back gate open at 02:15. Nwosu closed it and called "
     "supervisor Odile Dubois. Dubois will file the report.", ["Emeka Nwosu", "Nwosu", "Odile Dubois", "Dubois"]),
    ("Night log: guard Tunde Nwosu found the back gate open at 02:15. Nwosu closed it and called "
     "supervisor Claire Dubois. Dubois will file the report.", ["Tunde Nwosu", "Nwosu", "Claire Dubois", "Dubois"]),
])
def test_a_name_ner_splits_or_labels_as_a_place_is_one_person_with_one_placeholder(detector, text, names):
    spans = detector.analyze(text)
    assert [(text[s.start:s.end], s.entity_type) for s in spans] == [(name, "PERSON") for name in names]
    masked = PiiMasker().mask(text, spans)
    assert masked.count("<PERSON_1>") == 2 and masked.count("<PERSON_2>") == 2 and "<PERSON_3>" not in masked


def test_a_mention_replaces_the_part_of_it_ner_labelled_a_nationality(detector):
    texts = ["Draft a reminder to my tenant, Mrs. Okonkwo-Brandt, that rent is due. "
             "Mention that Okonkwo-Brandt paid late twice."]
    spans = detector.corefer(texts, [detector.analyze(t) for t in texts])[0]
    masked = PiiMasker().mask(texts[0], spans)
    assert "Okonkwo" not in masked and "Brandt" not in masked
    assert masked.count("<PERSON_1>") == 2 and "<NRP" not in masked


def test_a_family_in_the_plural_keeps_the_person_s_placeholder(detector):
    texts = ["My neighbour Piotr Zielinski borrowed my drill.", "Should I knock on the Zielinskis' door?"]
    spans = detector.corefer(texts, [detector.analyze(t) for t in texts])
    masker = PiiMasker()
    masked = [masker.mask(t, s) for t, s in zip(texts, spans)]
    assert masked[1] == "Should I knock on the <PERSON_1>s' door?"
    assert masker.restore(masked[1]) == "Should I knock on the Piotr Zielinskis' door?"  # the first-masked form


@pytest.mark.parametrize(("texts", "left"), [
    (["Write a thank-you card to my nurse, Bartholomew Kasprzak-Nowicki, and mention that nowicki stayed late."],
     "nowicki"),
    (["My daughter Siobhán failed her test.", "how do i cheer siobhan up?"], "siobhan"),
])
def test_a_hyphenated_part_or_an_unaccented_name_gets_the_person_s_placeholder(detector, texts, left):
    spans = detector.corefer(texts, [detector.analyze(t) for t in texts])
    masked = " ".join(PiiMasker().mask(t, s) for t, s in zip(texts, spans))
    assert left not in masked.casefold() and masked.count("<PERSON_1>") == 2 and "<PERSON_2>" not in masked


def test_coreference_can_be_turned_off():
    plain = PiiDetector(PiiDetectorConfig(**_block(context={"coreference": False})))
    texts = ["My tenant Ibrahim Kaya has not paid rent.", "Is Kaya allowed to stay?"]
    assert plain.corefer(texts, [[], []]) == [[], []]


def test_training_refuses_a_written_text_that_repeats_a_development_row(tmp_path):
    """A written training text that is a benchmark row (here a presidio sample row, names marked) stops
    `sonate train privacy-person`, naming the row number and the source, never the text."""
    import json
    from pathlib import Path

    from proxy.evaluation.data import DataError
    from proxy.evaluation.training_person import load_mentions

    data = Path(__file__).resolve().parents[3] / "data"
    row = next(r for r in json.loads((data / "presidio" / "synth_sample.json").read_text())
               if any(s["entity_type"] == "PERSON" for s in r["spans"]))
    person = next(s for s in row["spans"] if s["entity_type"] == "PERSON")
    text = row["full_text"]
    marked = (text[:person["start_position"]] + "[[" + text[person["start_position"]:person["end_position"]]
              + "|pr]]" + text[person["end_position"]:])
    written = tmp_path / "mentions.csv"
    written.write_text('text,theme\n"[[Ana Lima|pr]] paid the invoice.",note\n"' + marked.replace('"', '""')
                       + '",copy\n', encoding="utf-8")
    with pytest.raises(DataError) as caught:
        load_mentions(data, written)
    assert "row 2 duplicates a development row of presidio" in str(caught.value)
    assert text not in str(caught.value)


@pytest.mark.parametrize("text, kept", [
    ("My neighbour Rose Baker asked me to water her rose bushes while she's away.", ["her rose bushes"]),
    ("My colleague Mark left a mark on the whiteboard. Write him a note.", ["left a mark"]),
    ("My daughter Hope says she has no hope of passing maths. I hope she is wrong.", ["no hope of", "I hope she"]),
])
def test_a_name_that_is_an_english_word_is_left_where_it_is_used_as_the_word(detector, text, kept):
    """A lower-case verb or adjective ("I hope"), or a noun after a determiner ("her rose bushes"),
    is the word, not another mention of the person; the person is still masked."""
    (spans,) = detector.corefer([text], [detector.analyze(text)])
    masked = PiiMasker().mask(text, spans)
    assert masked.startswith("My ") and "<PERSON_1>" in masked
    for phrase in kept:
        assert phrase in masked, masked
