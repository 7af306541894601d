"""Postal address blocks: the name and place lines around a street line.

A postal address written over several lines ("Ana Dias / 31401 ul. Słowicza 10 / Apt. 360 /
Wrocław / Poland 53-320") has a street line that the policy's pattern recognizers find, but its
name, town and country lines are bare words that spaCy's small model often misses. This presidio
recognizer reads the layout instead:

- a text is an address block when it has at least ``min_lines`` non-empty lines and one of them
  is a street or unit line (a house number next to a word, or "Apt./Suite/Unit/Box/P.O. n"; a
  date with a month name, "Born: 23 June 1912" of a bio, is no house number);
- in a block, every short line of words (at most ``max_words`` words, no digits, no e-mail or
  web address, not a "Label:" line) is a place (``LOCATION``), except the block's first such line
  when it comes before the first street line, and any line repeating it: the addressee
  (``PERSON``);
- a "Country 12345" line gives its words as a place;
- a line that reads as a sentence is neither (at least :data:`SENTENCE_WORDS` words, ending in ".",
  "?" or "!", or opening with a base-form verb in the tagged doc): "Turn this into a sentence." after
  a record's address line is the instruction about it.

Leading quote markers (">", "???", bullets) and field labels ("Billing address:", "Name:") are
skipped. Linear in the text length (each line is matched once by bounded patterns).
"""

from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

_PREFIX = re.compile(r"^[\s>?*•·\-]*(?:(?:(?:billing|shipping|home|postal|mailing)\s+)?address|name|to|ship to)?"
                     r"(?:(?<=[a-z])\s*:\s*|(?<![a-z]))", re.IGNORECASE)
_STREET = re.compile(r"\d{1,6}\s+[^\W\d_]|[^\W\d_]\.?\s+\d{1,6}\b|\b(?:apt|apartment|suite|unit|box|p\.?\s?o\.?)\b\.?\s*\d",
                     re.IGNORECASE)
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
          r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
#: A date written with a month name ("23 June 1912", "June 23, 1912", "March 1815"): no house number.
_DATE = re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}(?:,?\s+\d{{4}})?(?!\w)"
                   rf"|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b|\b{_MONTH}\s+\d{{4}}\b", re.IGNORECASE)
_WORDS = re.compile(r"^[^\W\d_][^\d@:/]{0,80}$")
_COUNTRY_CODE = re.compile(r"^([^\W\d_][^\d@:/]{0,60}?)\s+(?:\d{4,6}|\d{2,3}-\d{3}|\d{3}\s\d{2})$")
#: Fewest words of a line read as a sentence (an instruction or a question), not a name or a place.
SENTENCE_WORDS = 3
_SENTENCE_END = re.compile(r"[.?!]$")
_FIELD_WORDS = re.compile(r"\b(?:phone|e-?mail|website|fax|mobile|office|info|tel)\b", re.IGNORECASE)


def _street(content: str) -> bool:
    """The line reads as a street or unit line, once its dates with a month name are set aside."""
    return bool(_STREET.search(_DATE.sub(" ", content)))


class AddressBlockRecognizer(EntityRecognizer):
    """presidio recognizer of the addressee and place lines of a multi-line postal address.

    Reports ``PERSON`` and ``LOCATION`` results with score ``score`` (in [0, 1]); see the module
    docstring for the rules.
    """

    def __init__(self, supported_language: str = "en", score: float = 0.9, min_lines: int = 3,
                 max_words: int = 5):
        self.score = score
        self.min_lines = min_lines
        self.max_words = max_words
        super().__init__(supported_entities=["PERSON", "LOCATION"], name="AddressBlockRecognizer",
                         supported_language=supported_language)

    def load(self) -> None:
        """Nothing to load (presidio's recognizer interface)."""

    def _lines(self, text: str) -> list[tuple[int, str]]:
        """(offset, content) of each non-empty line, its quote markers and field label removed."""
        out, offset = [], 0
        for raw in text.split("\n"):
            prefix = _PREFIX.match(raw)
            start = prefix.end() if prefix else 0
            content = raw[start:].rstrip()
            if content:
                out.append((offset + start, content))
            offset += len(raw) + 1
        return out

    def analyze(self, text: str, entities: list[str], nlp_artifacts=None) -> list[RecognizerResult]:
        """Results for the name and place lines of ``text`` if it is an address block, else []."""
        lines = self._lines(text)
        if len(lines) < self.min_lines or not any(_street(c) for _, c in lines):
            return []
        results: list[RecognizerResult] = []
        addressee: str | None = None
        street_seen = False
        imperative = _imperative_starts(nlp_artifacts)
        for offset, content in lines:
            if len(content.split()) >= SENTENCE_WORDS and (_SENTENCE_END.search(content) or offset in imperative):
                street_seen = street_seen or _street(content)  # "Deliver to 12 Main Street." still comes first
                continue  # a sentence: the instruction or question about the block
            entity, length = self._classify(content)
            street_seen = street_seen or (entity is None and _street(content))
            if entity is None:
                continue
            if entity == "PLACE_OR_NAME":
                if (addressee is None and not street_seen) or content == addressee:
                    addressee = content
                    entity = "PERSON"
                else:
                    entity = "LOCATION"
            if entity in entities:
                results.append(RecognizerResult(
                    entity, offset, offset + length, self.score,
                    # presidio leaves ``name`` untyped
                    recognition_metadata={RecognizerResult.RECOGNIZER_NAME_KEY: self.name,  # type: ignore[has-type]
                                          RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id}))
        return results

    def _classify(self, content: str) -> tuple[str | None, int]:
        """("PLACE_OR_NAME" | "LOCATION" | None, length of the reported part) of one line."""
        if content.endswith(":") or _FIELD_WORDS.search(content):
            return None, 0
        if _WORDS.match(content) and len(content.split()) <= self.max_words:
            return "PLACE_OR_NAME", len(content.rstrip(" .,;"))
        country = _COUNTRY_CODE.match(content)
        if country and len(country.group(1).split()) <= self.max_words:
            return "LOCATION", len(country.group(1))
        return None, 0


def _imperative_starts(nlp_artifacts) -> frozenset[int]:
    """Character offsets of the tokens of presidio's ``nlp_artifacts`` tagged as a base-form verb
    (Penn tag VB) at the start of a line: where an instruction opens. Empty without a tagged doc."""
    doc = getattr(nlp_artifacts, "tokens", None)
    if doc is None:
        return frozenset()
    text = doc.text
    return frozenset(t.idx for t in doc if t.tag_ == "VB" and (t.idx == 0 or text[t.idx - 1] == "\n"))
