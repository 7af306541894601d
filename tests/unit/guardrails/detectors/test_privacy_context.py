"""Privacy masks personal data, not every named entity (real presidio + spaCy, no mocks)."""

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig
from proxy.guardrails.detectors.privacy_address import AddressBlockRecognizer
from proxy.guardrails.detectors.privacy_context import ContextConfig, ContextRule, personal_request, written_to

ROOT = Path(__file__).resolve().parents[4]


def _block(**overrides) -> dict:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return {**block, **overrides}


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return PiiDetector(PiiDetectorConfig(**_block()))


def _found(detector: PiiDetector, text: str) -> dict[str, str]:
    return {text[s.start:s.end]: s.entity_type for s in detector.analyze(text)}


@pytest.mark.parametrize("text", [
    "What is the happiest place on Earth?",
    "in which year did Yao Ming retire?",
    "a basketball team in Los Angeles, California",
    "What is the capital of France?",
    "Translate the English sentence into Chinese.",
    "How old is Barack Obama?",
    "What are winters like in London vs New York?",
    "Is working part-time a good idea for teenagers between 15 and 19 years old?",
    "Tell me about the history of Rome.",
    "Question: Who painted the Mona Lisa in Florence?",
    'Translate "Hello Paris, we are back!" into French.',
    'Write a tweet for our band: "Hello Berlin! Thanks for an amazing night."',
])
def test_public_mentions_in_general_requests_are_left_alone(detector, text):
    assert detector.analyze(text) == []


@pytest.mark.parametrize("text, value, entity", [
    ("my name is Ada Lovelace", "Ada Lovelace", "PERSON"),
    ("Patient John Miller was diagnosed with type 2 diabetes last week.", "John Miller", "PERSON"),
    ("Please ship the order to our customer at 2437 Main St, Springfield.", "2437 Main St", "LOCATION"),
    ("My neighbour Tom Baker moved to Leeds.", "Tom Baker", "PERSON"),
    ("Sometimes people call me Roland", "Roland", "PERSON"),
    ("Mr. Rangel flew to HORTEN on Monday morning.", "HORTEN", "LOCATION"),
    ("Bot: What's the name on the account? User: Eve Magrath", "Eve Magrath", "PERSON"),
    ('Rewrite this more formally: "Hey Tane, the invoice for the Wairau job is still unpaid, can you chase it?"',
     "Tane", "PERSON"),
])
def test_names_and_places_in_personal_context_are_masked(detector, text, value, entity):
    assert _found(detector, text).get(value) == entity


def test_a_greeting_ner_runs_into_a_name_is_no_part_of_it(detector):
    text = 'Reply to this for me: "Hello Marisol! The package arrived but one plate was broken."'
    assert _found(detector, text) == {"Marisol": "PERSON"}  # NER: "Hello Marisol"


@pytest.mark.parametrize("text", [
    "Can you recommend restaurants in Paris for my trip?",
    "I am planning a 7-day trip to Lisbon. Can you make a plan for me?",
])
def test_a_place_tied_to_nobody_is_left_alone(detector, text):
    """A place or date is personal data only beside someone identified (a private person, an
    identifier, an address): "my trip to Paris" alone identifies nobody."""
    assert detector.analyze(text) == []


@pytest.mark.parametrize("text, value, entity", [
    ("What is the weather like at jane.doe@example.com?", "jane.doe@example.com", "EMAIL_ADDRESS"),
    ("Which operator owns 0699 868 88 55?", "0699 868 88 55", "PHONE_NUMBER"),
    ("Is 4111 1111 1111 1111 a valid card number?", "4111 1111 1111 1111", "CREDIT_CARD"),
    ("Which bank has IBAN GB82WEST12345698765432?", "GB82WEST12345698765432", "IBAN_CODE"),
    ("Explain what 536-22-8726 is.", "536-22-8726", "US_SSN"),
    ("Why can't I ping 81.2.69.160 from home?", "81.2.69.160", "IP_ADDRESS"),  # a global address (a private one identifies nobody)
    ("What does driver's license number 6940579 tell you?", "6940579", "US_DRIVER_LICENSE"),
])
def test_direct_identifiers_are_masked_even_in_general_questions(detector, text, value, entity):
    assert _found(detector, text).get(value) == entity


def test_a_direct_identifier_makes_the_names_beside_it_personal(detector):
    text = "Who is Maria Lopez? Her email is maria.lopez@example.org."
    found = _found(detector, text)
    assert found.get("Maria Lopez") == "PERSON" and found.get("maria.lopez@example.org") == "EMAIL_ADDRESS"


def test_context_can_be_disabled_per_policy():
    everything = PiiDetector(PiiDetectorConfig(**_block(context={"enabled": False})))
    assert _found(everything, "What is the capital of France?") == {"France": "LOCATION"}


def test_address_block_names_addressee_and_places(detector):
    text = "Billing address: Ana Dias\n    31401 ul. Słowicza 10 Apt. 360\n   Wrocław\n    Poland 53-320"
    found = _found(detector, text)
    assert found.get("Ana Dias") == "PERSON"
    assert found.get("Wrocław") == "LOCATION" and found.get("Poland") == "LOCATION"


def test_numbers_in_a_decimal_or_a_thousand_are_no_street_address(detector):
    text = "The rate rose from 10.3 per 100,000 in 1999 to 12 per 100,000 in 2017, with 109 people per day."
    assert "LOCATION" not in _found(detector, text).values()
    assert _found(detector, "Send the parcel to 1593 Pagari 18.").get("1593 Pagari 18") == "LOCATION"


def test_address_block_recognizer_needs_a_street_line():
    recognizer = AddressBlockRecognizer()
    assert recognizer.analyze("Apples\nPears\nPlums", ["PERSON", "LOCATION"]) == []
    block = "6614 Luite tee 87\n Apt. 931\n Salumäe\n Estonia 62031"
    results = recognizer.analyze(block, ["PERSON", "LOCATION"])
    assert [(r.entity_type, block[r.start:r.end]) for r in results] == [("LOCATION", "Salumäe"),
                                                                         ("LOCATION", "Estonia")]


def test_a_bio_in_record_form_with_a_dated_birth_is_no_address_block(detector):
    """A month-name date ("23 June 1912") is no house number, nor a year before a comma a house
    number before a town: the record of a famous person is not an address."""
    recognizer = AddressBlockRecognizer()
    bio = "Name: Alan Turing\nBorn: 23 June 1912\nKnown for: the Turing machine"
    assert recognizer.analyze(bio, ["PERSON", "LOCATION"]) == []
    bio = "Name: Ada Lovelace\nBorn: 10 December 1815, London\nKnown for: notes on the Analytical Engine"
    assert not [s for s in detector.analyze(bio) if s.recognizer in ("StreetAddressRecognizer", "AddressBlockRecognizer")]


def test_a_three_line_address_block_is_the_smallest_block():
    """Name, street, town: three lines are a block (``min_lines``); two are not."""
    recognizer = AddressBlockRecognizer()
    block = "Ana Dias\n12 Main Street\nSpringfield"
    results = recognizer.analyze(block, ["PERSON", "LOCATION"])
    assert [(r.entity_type, block[r.start:r.end]) for r in results] == [("PERSON", "Ana Dias"),
                                                                         ("LOCATION", "Springfield")]
    assert recognizer.analyze("Ana Dias\n12 Main Street", ["PERSON", "LOCATION"]) == []


@pytest.mark.parametrize("text", ["Ana Dias\n12 Main Street\nSpringfield",
                                  "Please send it to:\nAna Dias\n12 Main Street\nSpringfield"])
def test_a_three_line_address_is_masked(detector, text):
    spans = detector.analyze(text)
    for value in ("Ana Dias", "Springfield"):
        start = text.index(value)
        assert any(s.start <= start and start + len(value) <= s.end for s in spans), (value, spans)


@dataclass(frozen=True)
class _Span:
    entity_type: str
    recognizer: str = "SpacyRecognizer"


@pytest.mark.parametrize("text, cue", [
    ("I think Paris is nice", "first_person"),
    ("Tell your brother Tom", "second_person"),
    ("the tenant in flat 3 is Tom", "relation"),
    ("Tom lives at the end of the road", "phrase"),
    ("Hi Victor, nice to meet", "greeting"),
    ("Name: Ana\nAddress: somewhere", "record_field"),
    ("Ask Thabo whether he can cover the shift.", "addressee"),
    ("remind tomasz to water the plants", "addressee"),
    ("can you remind olga to send the slides?", "addressee"),
    ("Write a short note telling Bartek the van is booked.", "addressee"),
    ("Child: Amani Mwangi\nAge: 7", "name_field"),
    ("Next of kin: Teodor Blaga\nWard: 6", "name_field"),
])
def test_personal_cues(text, cue):
    assert cue in ContextRule.from_config(ContextConfig()).personal_cues(text)


def test_generic_you_and_plural_relations_are_no_cue():
    rule = ContextRule.from_config(ContextConfig())
    assert rule.personal_cues("What happens if you fly the US flag at night?") == []
    assert rule.personal_cues("Tell me where I can see the Northern Lights; can I go in May?") == []
    assert rule.personal_cues("Complete the name: New what?") == []
    assert rule.personal_cues("An actor with three marriages and five children, a former child-actor") == []


def test_select_keeps_anchors_and_drops_public_mentions():
    rule = ContextRule.from_config(ContextConfig())
    place, email = _Span("LOCATION"), _Span("EMAIL_ADDRESS", "EmailRecognizer")
    assert rule.select("Is Paris in France?", [place], "question") == []
    assert rule.select("Paris is in France.", [place], "statement") == [place]
    assert rule.select("Is Paris in a@b.c?", [place, email], "question") == [place, email]
    street = _Span("LOCATION", "StreetAddressRecognizer")
    assert rule.select("Who lives at 4 Privet Drive?", [street], "question") == [street]


def test_rows_file_of_the_context_rules_covers_every_presidio_row(tmp_path):
    """The context rules were written reading every development row: the rows file the command
    writes lists each presidio row it is given (here the tests' own sample in tests/data, the same
    format as the development split), with no out-of-fold figure (nothing was fitted)."""
    from proxy.evaluation.data import load_builtin
    from proxy.evaluation.provenance import read_rows_file
    from proxy.evaluation.training_privacy import privacy_context_rows

    data = ROOT / "tests" / "data"
    out = privacy_context_rows(data, tmp_path / "privacy-context.rows.json")
    assert out["policy"] == "privacy" and out["how"] == "tuned" and out["out_of_fold"] == {}
    seen = read_rows_file(tmp_path / "privacy-context.rows.json")
    presidio = [i for i in load_builtin(data)[0] if i.dataset == "presidio"]
    assert presidio and all(seen.seen(i.text) for i in presidio)
    assert not seen.seen("A sentence no data file holds: 7c0ffee.")


@pytest.mark.parametrize("text, personal", [
    ("Should I stop taking my medication?", True),
    ("Draft my will so that my children inherit equally.", True),
    ("Which stock should I buy with my savings?", True),
    ("Can I sue my landlord for the mould in our flat?", True),
    ("What happens if you swallow gum?", False),
    ("Is it legal to marry your cousin in the US?", False),
    ("Tell me how inheritance tax works in France.", False),
    ("Let's compare the health systems of Canada and Japan.", False),
])
def test_personal_request_tells_advice_about_oneself_from_information(text, personal):
    """Compliance's band rule (detectors/domain.py): "should I", "my" are personal; the generic
    "you" of a question and requests to the assistant ("tell me", "let's") are not."""
    assert personal_request(text) is personal


@pytest.mark.parametrize("text, name, written", [
    ("Compose a good-luck message for Ruslan before his driving test.", "Ruslan", True),
    ("Write a short welcome post for Anouk, who joins the choir.", "Anouk", True),
    ("Can you forward this to Oisin and Blathnaid?", "Oisin", True),
    ("Can you forward this to Oisin and Blathnaid?", "Blathnaid", True),  # listed after a recipient
    ("Write a card for Ana, Luis and Marta.", "Marta", True),
    ("How should I apologise to Ines for missing her party?", "Ines", True),
    ("Remind Tomasz to water the plants.", "Tomasz", True),
    ("Who is Barack Obama?", "Barack", False),
    ("I met Ines at the cafe.", "Ines", False),
    ("Send money to Kenya for my Uncle Bob.", "Bob", False),  # "for my" is no recipient slot
    ("Write a letter to the editor about Boris Johnson.", "Boris", False),  # written about, not to
    ("A postcard from Paris arrived.", "Paris", False),
])
def test_written_to_reads_the_one_a_message_is_written_to_or_for(text, name, written):
    assert written_to(text, text.index(name)) is written


def test_a_name_a_message_is_written_for_is_judged_at_the_heads_own_threshold(detector):
    """In an instruction with no personal cue a name needs the general-question threshold (0.85);
    a good-luck message's recipient is not asked about (the head gives Ruslan ~0.84): masked. A
    public figure in the same slot is still left by the head."""
    text = "Compose a good-luck message for Ruslan before his driving test."
    assert [text[s.start:s.end] for s in detector.analyze(text)] == ["Ruslan"]
    for public in ("Write a letter to Barack Obama about climate change.", "Compose a fan message for Taylor Swift.",
                   "Forward this article to Bill Gates."):
        assert detector.analyze(public) == [], public


def test_a_messages_sender_is_a_person_and_a_company_or_city_sending_one_is_left(detector):
    """NER calls a rare name after "the invitation from" a place; as a message's sender it is a person
    for the head to judge. A company or a city in the same place is left."""
    text = "Decline the invitation from Halvard politely."
    assert [text[s.start:s.end] for s in detector.analyze(text)] == ["Halvard"]
    for left in ("Summarise the letter from Microsoft about the licence change.",
                 "Reply to the invitation from Google to the developer summit.",
                 "A postcard from Paris arrived this morning."):
        assert detector.analyze(left) == [], left


@pytest.mark.parametrize("text", [
    "Name: Joanna Kowalczyk\nDOB: 12/03/1988\nAddress: 14 Elm Road, Leeds\nTurn this into a sentence.",
    "Name: Joanna Kowalczyk\nAddress: 14 Elm Road\nLeeds\nTurn this into a sentence",  # no full stop: the verb says it
    "Ana Dias\n12 Main Street\nSpringfield\nWrite a letter to this person.",
])
def test_the_instruction_below_an_address_block_is_no_place(detector, text):
    """A record's or an address's lines are masked; the instruction about them reaches the model."""
    instruction = text.rsplit("\n", 1)[1]
    start = text.index(instruction)
    spans = detector.analyze(text)
    assert not [s for s in spans if s.end > start], [(s.entity_type, text[s.start:s.end]) for s in spans]
    assert any(text[s.start:s.end] in ("14 Elm Road", "12 Main Street") for s in spans)


@pytest.mark.parametrize("text, person", [
    ("My dog Max keeps chewing the sofa. How do I stop him?", None),
    ("Our old cat, Pepper, won't eat her dinner. Any tips for a fussy eater?", None),
    ("My dog walker Anna Kowalska is late again. Write her a polite reminder.", "Anna Kowalska"),
])
def test_a_pets_name_is_nobodys_personal_data(detector, text, person):
    names = [text[s.start:s.end] for s in detector.analyze(text) if s.entity_type == "PERSON"]
    assert names == ([person] if person else []), names


def test_the_language_of_a_translation_is_no_nationality(detector):
    text = "Translate to Spanish.\n\nMy name is Anna Kowalska and I live in Gdynia with my Spanish husband."
    found = [(text[s.start:s.end], s.start) for s in detector.analyze(text)]
    assert ("Spanish", text.index("Spanish")) not in found  # the language asked for reaches the model
    assert ("Anna Kowalska", text.index("Anna")) in found


def test_a_sentence_end_between_two_numbers_is_no_street(detector):
    text = "Answer the question based on the text.\n\nTom has 5 apples. He gives 2 to Lucy. How many does he have left?"
    assert "LOCATION" not in _found(detector, text).values()


@pytest.mark.parametrize("text, masked", [
    ("Is 192.168.0.1 a private IP address?", False),  # RFC 1918: every home router's
    ("Ping 127.0.0.1 and explain the output.", False),  # loopback
    ("My server at 10.0.0.12 keeps timing out. Why?", False),
    ("My home IP is 2a00:1450:4009:80b::200e, is it exposed?", True),  # a global address
    ("My IP is 8.8.4.4 at home, can people see it?", True),
])
def test_only_a_globally_reachable_ip_address_is_personal_data(detector, text, masked):
    assert ("IP_ADDRESS" in _found(detector, text).values()) is masked


def test_a_phone_number_read_inside_an_ip_address_leaves_the_address_whole(detector):
    """"answers on" is phone context, and the phone matcher reads "2.69.160" in the address: the
    address is masked whole, no "81." left before a placeholder."""
    text = "Our office router answers on 81.2.69.160, is that exposed?"
    assert _found(detector, text) == {"81.2.69.160": "IP_ADDRESS"}


@pytest.mark.parametrize("text, phone", [
    ("Sort these numbers: 4521 3390 1208 7777 6543", None),  # 20 digits: a list
    ("Add these up: 1200 3400 5600 7800", None),  # 16 digits
    ("Call the helpdesk number +1-944-435-4352x04732 after nine.", "+1-944-435-4352x04732"),  # 11 and an extension
])
def test_more_digits_than_a_phone_number_holds_are_no_phone_number(detector, text, phone):
    found = {value for value, kind in _found(detector, text).items() if kind == "PHONE_NUMBER"}
    assert found == ({phone} if phone else set()), found
