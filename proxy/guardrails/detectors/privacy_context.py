"""Personal-data context: which detected names and places refer to a private person.

Privacy masks personal data (data about an identifiable private individual), not every named
entity. The detector's spans fall into three groups (configured in ``policies/privacy.yaml``,
:class:`ContextConfig`):

- **direct identifiers** (``always``: e-mail, phone, card, IBAN, national ids, IP, licence and
  account numbers): always masked;
- **address shapes**: spans of the recognizers listed in ``always_recognizers`` (street
  addresses, postal codes next to address words, names after an honorific or "my name is"):
  always masked, and their presence makes the whole text personal;
- **quasi-identifiers** (``contextual``: names, places, nationalities, dates, ages, URLs):
  masked only when the text they are in is *personal*: it holds a direct identifier or an
  address shape, or one of the cues below.

Cues (:func:`personal_cues`), all plain regular expressions over the text (no I/O, linear
time):

- first person ("I", "my", "me", "we", "our", lower-case "us") beyond the writer's requests to
  the assistant ("tell me", "can I", "let's");
- second person addressed to someone ("your", "you" outside the generic "if you", "can you",
  "do you", "would you"... of a general question);
- a relation word (patient, customer, employee, tenant, neighbour, my wife, ...), configurable;
- an honorific (Mr., Mrs., Ms., Dr.) or a greeting ("Hi Victor,", "Dear Ms. Lee");
- a field of a record about a person ("Name:", "Address:", "User:", "Where:");
- a personal verb phrase (lives at/in, born on, was born, contact, address);
- an addressee: a message passed on to someone named ("Ask Thabo whether ...", "remind tomasz
  to ...", "a note telling Bartek ..."; not "tell everyone", "let them know");
- a name field: a form line whose whole value is a full name ("Guardian: Hamid Sadeghi").

The last two are no feature of the person head (:data:`~.privacy_person.CUES`): they only let
the names in such a text be read and judged.

A public mention in a general question ("in which year did Yao Ming retire?", "What is the
capital of France?") has none of them and is left alone. The decision is per analysed text
(each window of a long text on its own, see ``analysis_window_chars``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Protocol

from pydantic import BaseModel, ConfigDict, Field

#: Default direct identifiers: always masked.
DIRECT_IDENTIFIERS = ["EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS",
                      "US_SSN", "US_DRIVER_LICENSE", "US_PASSPORT", "US_BANK_NUMBER", "US_ITIN",
                      "MEDICAL_LICENSE", "CRYPTO"]
#: Default quasi-identifiers: masked only in a personal text.
QUASI_IDENTIFIERS = ["PERSON", "LOCATION", "NRP", "DATE_TIME", "AGE", "URL"]
#: Default relation nouns: a person seen through their relation to the writer or an
#: organisation. A cue only after a determiner or possessive ("my neighbour", "the patient",
#: "a customer's") or before a capitalised name ("tenant John"), not in "five children".
RELATIONS = [
    "patient", "customer", "client", "employee", "tenant", "neighbour", "neighbor", "colleague",
    "coworker", "co-worker", "boss", "manager", "landlord", "landlady", "guardian", "beneficiary",
    "wife", "husband", "son", "daughter", "mother", "father", "mom", "mum", "dad", "brother",
    "sister", "kid", "child", "grandfather", "grandmother", "grandma", "grandpa", "aunt", "uncle",
    "cousin", "niece", "nephew", "fiance", "fiancé", "fiancée", "girlfriend", "boyfriend",
    "partner", "spouse", "roommate", "flatmate", "friend", "student", "pupil", "applicant",
    "candidate", "account holder", "cardholder", "passenger", "resident", "caller", "sender",
    "recipient", "contractor", "supervisor", "teacher", "doctor", "nurse", "therapist", "lawyer",
    "grandson", "granddaughter", "grandchild", "grandchildren", "stepson", "stepdaughter", "stepmother",
    "stepfather", "stepbrother", "stepsister", "mother-in-law", "father-in-law", "sister-in-law",
    "brother-in-law", "son-in-law", "daughter-in-law", "godson", "goddaughter", "godmother", "godfather",
    "ex-wife", "ex-husband", "housemate", "classmate", "babysitter", "nanny", "carer", "caregiver",
    "intern", "caretaker",
]
#: Default personal phrases: a cue wherever they occur (whole words, case-insensitive).
PERSONAL_PHRASES = [
    "lives at", "lives in", "lives on", "living at", "resides", "reside at", "moved to",
    "diagnosed", "diagnosis", "admitted", "discharged", "prescribed", "appointment", "salary",
    "payroll", "invoice", "billing", "shipping address", "home address", "address is",
    "date of birth", "dob", "born on", "birthday", "call me", "contact", "ssn", "passport", "account number",
]
_DETERMINERS = r"my|our|your|his|her|their|the|a|an|this|that|whose|its"
#: Characters before a mention that :meth:`ContextRule.writer_relation` reads ("our new colleague, ").
_RELATION_REACH = 80


class ContextConfig(BaseModel):
    """The ``detector.context`` block of ``policies/privacy.yaml``.

    Attributes:
        enabled: False masks every detected span (no context rule).
        always: entity types always masked (direct identifiers).
        always_recognizers: presidio recognizer names whose spans are always masked and make
            their text personal (address shapes, introduced names).
        contextual: entity types masked only in a personal text; a type in neither list is
            masked always.
        relations: relation nouns (lower case; plural "s" matched too) that make a text
            personal after a determiner / possessive or before a capitalised name; a person named
            right after "my", "our" or "your" and one of them is a private individual
            (:meth:`ContextRule.writer_relation`).
        personal_phrases: words or phrases (lower case) that make a text personal anywhere.
        second_person: True counts a "you"/"your" addressed to someone as a cue (generic
            "if you", "can you", "do you" ... are never cues).
        general_moods: moods (:func:`text_mood`) of a general request, whose quasi-identifiers
            need a cue; any other mood (a statement) masks them.
        person_head: in a text the rule above finds personal, each PERSON mention found by NER is
            masked only when the learned head judges it a private individual
            (:mod:`.privacy_person`); when every such mention is a public figure and the text has
            no direct identifier, address shape or personal cue, its other names, places and dates
            are left too (a famous person's bio is not a customer record). False: the rule alone.
        coreference: once a person is masked, every other mention of them is too (first name or
            surname alone, possessives, any casing), across the texts of a request.
    """

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    always: list[str] = Field(default_factory=lambda: list(DIRECT_IDENTIFIERS))
    always_recognizers: list[str] = Field(default_factory=lambda: [
        "StreetAddressRecognizer", "PostalCodeRecognizer", "TitledPersonRecognizer",
        "AddressBlockRecognizer"])
    contextual: list[str] = Field(default_factory=lambda: list(QUASI_IDENTIFIERS))
    relations: list[str] = Field(default_factory=lambda: list(RELATIONS))
    personal_phrases: list[str] = Field(default_factory=lambda: list(PERSONAL_PHRASES))
    second_person: bool = True
    general_moods: list[str] = Field(default_factory=lambda: ["question", "instruction", "fragment"])
    person_head: bool = True
    coreference: bool = True


class _Span(Protocol):
    entity_type: str
    recognizer: str


_FIRST_PERSON = re.compile(r"\b(?:I|us)\b|\b(?i:i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|our|ours)\b")
# the writer asking the assistant, not about themselves: "tell me", "can I", "would I"
_GENERIC_FIRST_PERSON = re.compile(
    r"\b(?i:tell|give|show|help|let|teach|explain to|remind|recommend|suggest to|find|get|bring)\s+me\b"
    r"|\b(?i:can|could|should|do|does|would|will|shall|may|might|must|where|how|what|when|why)\s+I\b"
    r"|\b(?i:let's|let us)\b")
# generic "you" of a general question / instruction: not a cue
_GENERIC_YOU = re.compile(
    r"(?i:\b(?:if|can|could|do|does|would|will|should|did|when|what|where|how|whether|"
    r"shouldn't|can't|don't|that|which|who|why|are|were)\s+you\b)")
_SECOND_PERSON = re.compile(r"(?i:\byour\b|\byou\b)")
_GREETING = re.compile(
    r"(?-i:\b(?:Mr|Mrs|Ms|Dr|Miss)\.?\s+[A-Z]|\b(?i:hi|hello|hey|dear)\s+[A-Z][\w'-]+\s*[,!:]"
    r"|\b(?i:ms|mr|mrs)\.\s*[a-z])")

# a field of a record about a person: "Name: ...", "Address: ...", "User: ...", "Where: ..."
_FIELDS = ("Full name", "First name", "Last name", "Name", "Address", "User", "Customer", "Patient", "Client",
           "Employee", "Guest", "DOB", "Date of birth", "Where", "When")
_RECORD_FIELD = re.compile(
    r"(?im:^[\s>*-]*(?:" + "|".join(_FIELDS) + r")\s*:)"  # any case at a line start
    r"|(?<!\w)(?:" + "|".join(_FIELDS) + r")\s*:")  # capitalised anywhere ("... User: Eve")


_CAPITAL = "A-ZÀ-ÖØ-ÞĆČĐŁŃŒŘŚŠŞŢŤŮŰŹŻŽ"
# a field of a form whose whole value is a full name: a label of one to three words opening its line,
# a colon and two or three capitalised words up to the line's end ("Guardian: Hamid Sadeghi")
_NAME_WORD = rf"[{_CAPITAL}][^\W\d_{_CAPITAL}]+(?:['’-][^\W\d_]+)?"  # "Sadeghi", "O'Neill"; not "API"
_NAME_FIELD = re.compile(
    rf"^[ \t>*-]*[{_CAPITAL}][^\W\d_]*(?:[ \t][^\W\d_]+){{0,2}}[ \t]*:[ \t]*"
    rf"{_NAME_WORD}(?:[ \t]{_NAME_WORD}){{1,2}}[ \t]*$", re.MULTILINE)


#: Verbs of passing a message on to someone, in base form (an instruction: "Ask Thabo whether ...",
#: "remind tomasz to ...") and as a gerund ("a note telling Bartek ...").
ADDRESSEE_VERBS = ("remind", "tell", "ask", "let", "text", "email", "e-mail", "ping", "message", "invite",
                   "thank", "warn", "congratulate", "notify", "inform", "cc", "send")
ADDRESSEE_GERUNDS = ("reminding", "telling", "asking", "letting", "texting", "emailing", "pinging", "messaging",
                     "inviting", "thanking", "warning", "congratulating", "notifying", "informing")
#: Nouns of a message written to someone: "a note to Zurab", "a birthday message for Funmilayo". The
#: name recognizer reads the name after them; they are no cue ("Write a letter to Santa ..." is a
#: writing exercise as often as a message to someone).
ADDRESSEE_NOTES = ("note", "message", "reply", "email", "e-mail", "letter", "card", "text", "invitation", "memo")
#: Verbs of speaking or writing to someone: "respond to Tevita", "apologise to Ines". Like a message
#: noun, the name recognizer reads the name after them and "to"; they are no cue ("talk to Santa").
ADDRESSEE_TO_VERBS = ("respond", "reply", "write", "talk", "speak", "explain", "apologise", "apologize", "say",
                      "responded", "replied", "wrote", "talked", "spoke", "explained", "apologised", "apologized",
                      "said")
#: Words an addressee verb's clause may open with: "please ask ...", "and tell ...", "can you remind ...".
CLAUSE_OPENERS = ("please", "pls", "plz", "and", "then", "you")
#: Closed-class words after such a verb that are nobody's name ("tell everyone", "ask the team", "let them").
_NOT_ADDRESSEES = ("me", "us", "them", "him", "her", "it", "you", "everyone", "everybody", "all", "the", "a", "an",
                   "this", "that", "these", "those", "my", "our", "your", "their", "his", "its", "someone",
                   "somebody", "anyone", "anybody", "people", "whoever", "each", "both", "every", "no", "nobody",
                   "any", "some", "whether", "if", "about", "for", "to", "what", "how", "why", "when", "where",
                   "who", "which", "again", "back", "out", "up", "in", "on", "off", "over", "and", "or", "know")
# an addressee verb opening a clause (text or line start, after ".!?;:," or a clause opener) or its gerund
_ADDRESSEE_VERB = (r"(?:(?:^|(?<=[.!?;:,\n])|\b(?:" + "|".join(CLAUSE_OPENERS) + r")\b)\s*(?:"
                   + "|".join(ADDRESSEE_VERBS) + r")|\b(?:" + "|".join(ADDRESSEE_GERUNDS) + r"))")
# someone named as the one a message goes to: such a verb, then a word
_ADDRESSEE = re.compile(
    r"(?:" + _ADDRESSEE_VERB + r"\s+(?!(?:" + "|".join(_NOT_ADDRESSEES) + r")\b)[^\W\d_][\w'’-]*\b)",
    re.IGNORECASE | re.MULTILINE)


#: Nouns of something written for one person beside :data:`ADDRESSEE_NOTES` ("a welcome post for
#: Anouk", "a toast for Bartek"): the name recognizer and :func:`written_to` read the name after
#: them and "to"/"for"; like the message nouns they are no cue.
WRITTEN_FOR_NOUNS = ("post", "toast", "speech", "poem", "tribute", "eulogy", "announcement", "invite")
#: Every noun after which (and "to"/"for") a name is the one a message is written to or for.
MESSAGE_NOUNS = ADDRESSEE_NOTES + WRITTEN_FOR_NOUNS
#: Verbs of passing something on to someone, with up to three words between ("forward this to ").
PASSED_ON_VERBS = ("forward", "send", "pass")
# right before a name a message is written to or for: a message noun and "to"/"for" ("a good-luck
# message for ", "a note to "), a verb of speaking or writing and "to" ("apologise to "), a verb of
# passing on and "to" ("forward this to "), or an addressee verb ("Remind ", "and tell ")
_WRITTEN_TO = re.compile(
    r"(?i:\b(?:" + "|".join(MESSAGE_NOUNS) + r")s?\s+(?:to|for)\s+"
    r"|\b(?:" + "|".join(PASSED_ON_VERBS) + r")(?:\s+[\w'’-]+){0,3}?\s+to\s+"
    r"|\b(?:" + "|".join(ADDRESSEE_TO_VERBS) + r")\s+to\s+"
    r"|" + _ADDRESSEE_VERB + r"\s+)"
    # then up to three names listed before the mention ("to Oisin and ", "for Ana, Luis and ")
    r"(?:[A-Z][\w'’-]*(?:\s[A-Z][\w'’-]*)?(?:,\s+|\s+(?:and|&)\s+|,\s+and\s+)){0,3}$", re.MULTILINE)
#: Characters before a mention that :func:`written_to` reads.
_WRITTEN_TO_REACH = 80
#: Animals people name ("my dog Max"): a pet's name is nobody's personal data.
PETS = ("dog", "puppy", "cat", "kitten", "pet", "horse", "pony", "parrot", "budgie", "rabbit", "bunny", "hamster",
        "guinea pig", "goldfish", "tortoise", "turtle", "ferret", "gerbil", "lizard", "snake", "hen", "goat")
#: "Translate (this letter) into ": the language a translation asks for comes next.
_TRANSLATION = re.compile(r"(?i:\btranslat\w*\b[^.!?\n]{0,60}\b(?:into|to|from|in)\s+)$")


def _alternation(words: Iterable[str]) -> str:
    """Regex alternation of the words (escaped, longest first; inner spaces match any whitespace)."""
    unique = sorted({w.strip().lower() for w in words if w.strip()}, key=len, reverse=True)
    return "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in unique)


def _named_after(owners: str, nouns: str) -> re.Pattern[str]:
    """The pattern of one of the ``nouns`` (an alternation) after one of the ``owners`` (another),
    with at most one word between and an optional comma, ending where a mention starts ("my new
    neighbour, " before "Siosaia Taufa"); searched up to the mention's start."""
    return re.compile(rf"(?i:\b(?:{owners})\s+(?:[a-z-]+\s+)?(?:{nouns})(?:s|es)?\s*,?\s+)$")


_PET_BEFORE = _named_after("my|our|your|his|her|their|the", _alternation(PETS))


def translation_language(text: str, start: int) -> bool:
    """True when the span starting at character ``start`` of ``text`` is the language of a
    translation asked for ("Translate to Spanish.", "translate this letter into Polish"): a
    language, not anyone's nationality."""
    return _TRANSLATION.search(text, max(0, start - _RELATION_REACH), start) is not None


def pet_named(text: str, start: int) -> bool:
    """True when the mention starting at character ``start`` of ``text`` comes right after a pet
    noun with an owner or article, with at most one word between and an optional comma ("my dog
    Max", "our old cat, Pepper"): an animal's name, not a person's ("my dog walker Anna" is a
    person: the noun before her is not an animal)."""
    return _PET_BEFORE.search(text, max(0, start - _RELATION_REACH), start) is not None


def written_to(text: str, start: int) -> bool:
    """True when the mention starting at character ``start`` of ``text`` is the one a message is
    written to or for, named right after the words of :data:`ADDRESSEE_NOTES`,
    :data:`ADDRESSEE_TO_VERBS` or :data:`ADDRESSEE_VERBS` that the name recognizer reads ("Compose a
    good-luck message for Ruslan", "apologise to Ines", "Remind Tomasz to ..."), after
    :data:`WRITTEN_FOR_NOUNS` ("a welcome post for Anouk") or after :data:`PASSED_ON_VERBS` and "to"
    ("forward this to Oisin"), or listed after such a name ("to Oisin and Blathnaid"). Such a name is
    not asked about, so the person head judges it at its own threshold, not a general question's."""
    return _WRITTEN_TO.search(text, max(0, start - _WRITTEN_TO_REACH), start) is not None


# a request of the writer to the assistant, not about the writer: "tell me", "give us", "let's"
_REQUEST_TO_ASSISTANT = re.compile(
    r"\b(?i:tell|give|show|teach|explain to|remind)\s+(?i:me|us)\b|\b(?i:let's|let us)\b")


def personal_request(text: str) -> bool:
    """True when ``text`` asks about the writer's own situation: a first-person word ("I", "my",
    "me", "we", "our", ...) beyond a request to the assistant ("tell me", "give us", "let's").

    Unlike :meth:`ContextRule.personal_cues`, "should I", "can I", "do I" count: for Compliance
    they are the shape of a request for personal advice ("should I stop taking my medication?",
    "draft my will"), while an information question about a regulated domain ("is it legal to
    marry your cousin in the US?", "what happens if you swallow gum?") has none. Plain regular
    expressions, linear time, no I/O.
    """
    return len(_FIRST_PERSON.findall(text)) > len(_REQUEST_TO_ASSISTANT.findall(text))


@dataclass(frozen=True)
class ContextRule:
    """Compiled :class:`ContextConfig`: decides which spans of one text are masked."""

    always: frozenset[str]
    always_recognizers: frozenset[str]
    contextual: frozenset[str]
    relations: re.Pattern[str] | None
    phrases: re.Pattern[str] | None
    #: The writer's relation right before a mention ("my neighbour ", "our new colleague, "), :meth:`writer_relation`.
    relation_before: re.Pattern[str] | None
    second_person: bool
    enabled: bool = True
    general_moods: frozenset[str] = frozenset({"question", "instruction", "fragment"})

    @classmethod
    def from_config(cls, config: ContextConfig) -> "ContextRule":
        """Compile a config (relation words become one case-insensitive whole-word pattern)."""
        nouns = _alternation(config.relations)
        relations = re.compile(
            rf"(?i:\b(?:{_DETERMINERS})\s+(?:\w+\s+)?(?:{nouns})(?:s|es)?\b(?!-))"
            rf"|(?i:\b(?:{nouns})(?:s|es)?)\s+[A-Z]") if nouns else None
        relation_before = _named_after("my|our|your", nouns) if nouns else None
        phrases = _alternation(config.personal_phrases)
        return cls(frozenset(config.always), frozenset(config.always_recognizers),
                   frozenset(config.contextual), relations,
                   re.compile(rf"(?i)\b(?:{phrases})\b") if phrases else None, relation_before,
                   config.second_person, config.enabled,
                   frozenset(config.general_moods))

    def writer_relation(self, text: str, start: int) -> bool:
        """True when the mention starting at character ``start`` of ``text`` comes right after a
        relation noun the writer (or the person written to) owns, with at most one word between and
        an optional comma: "my neighbour Siosaia Taufa", "our colleague, Rangi Parata", "your new
        tenant Ms. Lund". Such a person is a private individual whoever else bears the name ("his
        wife" or "their president" are not the writer's own and do not count)."""
        window = max(0, start - _RELATION_REACH)  # a long text is not scanned from its start for every mention
        return self.relation_before is not None and self.relation_before.search(text, window, start) is not None

    def personal_cues(self, text: str) -> list[str]:
        """Names of the personal-context cues found in ``text`` (empty: a general text)."""
        cues = []
        if len(_FIRST_PERSON.findall(text)) > len(_GENERIC_FIRST_PERSON.findall(text)):
            cues.append("first_person")
        if self.second_person and len(_SECOND_PERSON.findall(text)) > len(_GENERIC_YOU.findall(text)):
            cues.append("second_person")
        if self.relations is not None and self.relations.search(text):
            cues.append("relation")
        if self.phrases is not None and self.phrases.search(text):
            cues.append("phrase")
        if _GREETING.search(text):
            cues.append("greeting")
        if _RECORD_FIELD.search(text):
            cues.append("record_field")
        if _NAME_FIELD.search(text):
            cues.append("name_field")
        if _ADDRESSEE.search(text):
            cues.append("addressee")
        return cues

    def _always(self, span: _Span) -> bool:
        return (span.entity_type in self.always or span.recognizer in self.always_recognizers
                or span.entity_type not in self.contextual)

    def select(self, text: str, spans: Iterable[_Span], mood: str = "statement") -> list:
        """The spans of ``text`` to mask, in the given order.

        Direct identifiers and address shapes always; quasi-identifiers only when the text
        holds one of those, a personal cue (:meth:`personal_cues`), or is not a general
        request (``mood`` not in ``general_moods``: a statement may be about anyone).
        Disabled: every span.
        """
        spans = list(spans)
        if not self.enabled or not spans:
            return spans
        if mood not in self.general_moods or any(self._always(s) for s in spans):
            return spans
        if self.personal_cues(text):
            return spans
        return [s for s in spans if self._always(s)]


def text_mood(doc) -> str:
    """``"question"``, ``"instruction"``, ``"fragment"`` or ``"statement"`` for a spaCy
    ``Doc`` (``"empty"`` when it has no tokens).

    A question ends with "?"; an instruction's first sentence starts with its root verb in
    base form (Penn tag VB) with no subject ("Translate the sentence into Chinese"), or with
    "please"; a fragment has no sentence rooted in a verb ("a basketball team in Los Angeles");
    anything else is a statement.
    """
    tokens = [t for t in doc if not t.is_space]
    if not tokens:
        return "empty"
    if tokens[-1].text.endswith("?"):
        return "question"
    sentence = next(iter(doc.sents))
    words = [t for t in sentence if not (t.is_space or t.is_punct)]
    if words and words[0].lower_ == "please":
        return "instruction"
    root = sentence.root
    subjects = {"nsubj", "nsubjpass", "expl", "aux", "csubj"}
    if (words and words[0].i == root.i and root.tag_ == "VB"
            and not any(child.dep_ in subjects for child in root.children)):
        return "instruction"
    if not any(s.root.pos_ in ("VERB", "AUX") for s in doc.sents):
        return "fragment"
    return "statement"


def letterless_mood(doc) -> str:
    """:func:`text_mood` of a text without letters, from its tokens alone (no parse needed).

    A text without letters has no verb, so it is ``"question"`` when it ends with "?", else a
    ``"fragment"`` (``"empty"`` when it has no tokens), as spaCy's parse says for such texts
    ("1 1 1", "2020-01-02", "(1) (1)").
    """
    tokens = [t for t in doc if not t.is_space]
    if not tokens:
        return "empty"
    return "question" if tokens[-1].text.endswith("?") else "fragment"
