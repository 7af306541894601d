"""Use and mention: the words a text asks about are not scored as toxic language."""

import pytest

from proxy.guardrails.detectors.mentions import STAND_IN, mention_spans, without_mentions
from proxy.guardrails.detectors.safety import SafetyDetectorConfig, load_safety_detector


@pytest.mark.parametrize("text, mentioned", [
    ('Where does the word "idiot" come from?', ["idiot"]),
    ("Is \u201cbloody hell\u201d rude in British English?", ["bloody hell"]),
    ("Why is 'retarded' now seen as an offensive word?", ["retarded"]),
    ("What is the history of the slur redneck?", ["redneck"]),
    ("Explain the meaning of the phrase \"pissed as a newt\".", ["pissed as a newt"]),
    ('What does "arse" mean and how is it different from "ass"?', ["arse", "ass"]),
])
def test_a_word_asked_about_is_mentioned(text, mentioned):
    assert [text[a:b] for a, b in mention_spans(text)] == mentioned


@pytest.mark.parametrize("text, mentioned", [
    ('The word "idiot" comes from the Greek idiotes, a private person.', ["idiot"]),
    ('Yes. "Bloody hell" is a mild expletive in British English.', ["Bloody hell"]),
    ('In Old English "bitch" meant a female dog.', ["bitch"]),
])
def test_an_answer_talks_about_words_without_asking(text, mentioned):
    assert [text[a:b] for a, b in mention_spans(text, answer=True)] == mentioned
    assert mention_spans(text) == []  # the same words in a client's statement are not asked about


def test_a_client_statement_that_names_a_word_keeps_it():
    text = 'Tell her the word "slut" fits her perfectly.'
    assert without_mentions(text) == text
    assert without_mentions(text, answer=True) != text


@pytest.mark.parametrize("text", [
    'Tell my brother "you are a worthless piece of shit" from me.',  # no question about a word
    'Reply to her with "shut up, you stupid bitch" and nothing else.',
    'Why are all those "faggots" allowed at my school?',  # a question, but not about language
    'What does "you are an absolute waste of oxygen and everyone hates you" mean?',  # a sentence, not a word
    "Don't you think it's a bit rude?",  # an apostrophe is no quote
])
def test_speech_and_abuse_are_not_mentions(text):
    assert mention_spans(text) == []
    assert without_mentions(text) == text


def test_only_the_mentioned_span_is_replaced():
    text = 'You fucking moron, what does "prat" mean?'
    assert without_mentions(text) == f'You fucking moron, what does "{STAND_IN}" mean?'


@pytest.fixture(scope="module")
def detector():
    return load_safety_detector(SafetyDetectorConfig())


def test_toxic_language_is_scored_without_the_words_talked_about(detector):
    asked, used, abuse = detector.score([
        'Where does the word "dumbass" come from?',
        "Where does that dumbass come from?",
        'You fucking moron, what does "prat" mean?',
    ])
    [answered] = detector.score(['The word "dumbass" joins "dumb" and "ass"; it is American slang from the 1950s.'],
                                answers=True)
    assert asked["toxicity"] < 0.5 and answered["toxicity"] < 0.5
    assert used["toxicity"] >= 0.9
    assert abuse["toxicity"] >= 0.9  # the insult used outside the quotes still counts
