"""Claim mining for FAR-H (methodology "FAR-H"): factual claims in model outputs.

FAR-H = claims failing verification / claims checked × 100. This module finds the claims; the
verification lives in :mod:`proxy.evaluation.oracle`. Pure functions, no I/O: the optional
model-assisted pass is split into :func:`span_detection_messages` (the request) and
:func:`parse_model_spans` (the reply); the call itself is :mod:`proxy.kpi.span_detector`.

A claim is a sentence (or a model-detected span) that states something checkable. The
deterministic patterns, each a ``kind`` of :class:`Claim`:

- ``number``: a number with a unit or a quantity word (``48 species``, ``3.5 km``, ``12%``,
  ``$4 million``);
- ``date``: a calendar date, month + year, or a year in context (``August 5, 1962``,
  ``1962-08-05``, ``in 1940``);
- ``entity``: a named-entity fact, i.e. a sentence with a multi-word capitalised name or a
  capitalised name not at the sentence start (``directed by George Cukor``);
- ``copula``: an "X is/are/was/were (a|an|the)? Y" statement;
- ``answer``: the first sentence of a reply to a known question (the direct answer, whatever
  its shape: HaluEval answers are often one name such as ``Firs``);
- ``model``: a span the model-assisted pass reported.

Sentences that only hedge or refuse (``I have no comment``, ``I'm sorry, but...``) are not
claims. Claims are de-duplicated on normalised text (:func:`normalise`), and each is mapped to
the verification method that can decide it (:func:`assign_method`): ``oracle`` (the question
has oracle answers), ``regex`` (a regex rule applies), ``validator`` (a date or percentage a
format validator can check), else ``human``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

from proxy.guardrails.detectors.windows import TITLE_ABBREVIATIONS

__all__ = [
    "CLAIM_KINDS",
    "METHODS",
    "Claim",
    "assign_method",
    "dedupe",
    "mine_claims",
    "normalise",
    "parse_model_spans",
    "span_detection_messages",
    "split_sentences",
]

CLAIM_KINDS = ("answer", "number", "date", "entity", "copula", "model")
#: Verification methods, in the order they are tried (methodology "FAR-H").
METHODS = ("oracle", "regex", "validator", "human")

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_UNITS = (r"%|percent|per\s?cent|km|kilometres?|kilometers?|m|metres?|meters?|cm|mm|miles?|feet|foot|ft|"
          r"inch(?:es)?|kg|kilograms?|g|grams?|lbs?|pounds?|tons?|tonnes?|l|litres?|liters?|ml|"
          r"°\s?[cf]|degrees?|hours?|minutes?|seconds?|days?|weeks?|months?|years?|decades?|centuries|"
          r"century|people|persons?|species|members?|episodes?|seasons?|albums?|songs?|books?|films?|"
          r"times|copies|votes|seats|points|goals|calories|mg|mph|km/h|hz|watts?|volts?|bytes?|"
          r"[kmgt]b|dollars?|euros?|usd|eur|gbp|inhabitants|residents|employees|students|"
          r"thousand|million|billion|trillion")
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_NUMBER_RE = re.compile(
    rf"(?:[$€£]\s?(?:{_NUMBER})(?:\s?(?:thousand|million|billion|trillion))?)"
    rf"|(?:\b(?:{_NUMBER})\s?(?:{_UNITS})\b)|(?:\b(?:{_NUMBER})%)", re.IGNORECASE)
_DATE_RE = re.compile(
    rf"\b(?:\d{{4}}-\d{{2}}-\d{{2}}"
    rf"|(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{3,4}}"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\.?,?\s+\d{{3,4}}"
    rf"|(?:{_MONTHS})\.?\s+\d{{4}}"
    rf"|(?:in|since|until|by|from|before|after|circa|c\.)\s+(?:1[0-9]|20)\d{{2}}s?"
    rf"|(?:1[0-9]|20)\d{{2}}\s?(?:-|–|to)\s?(?:1[0-9]|20)\d{{2}})\b", re.IGNORECASE)
_NAME = r"[A-Z][\w'’.-]*"
_MULTIWORD_NAME_RE = re.compile(rf"\b{_NAME}(?:\s+(?:of|the|de|von|van|da|del|and)?\s*{_NAME})+")
_INNER_NAME_RE = re.compile(rf"(?<=[a-z,;:]\s){_NAME}")
_COPULA_RE = re.compile(r"\b(?:is|are|was|were)\s+(?:not\s+)?(?:a|an|the|one|located|known|called|"
                        r"considered|made|born|used|found|the\s+\w+)?\b", re.IGNORECASE)
_COPULA_SUBJECT_RE = re.compile(r"^\s*(?:[\w'’-]+\s+){0,8}?(?:is|are|was|were)\s+\S", re.IGNORECASE)
_HEDGES = re.compile(
    r"^(?:i\s+(?:have\s+no\s+comment|don'?t\s+know|do\s+not\s+know|am\s+not\s+sure|cannot|can'?t|"
    r"am\s+sorry|apologi[sz]e)|i'?m\s+(?:sorry|not\s+sure|unable)|sorry|as\s+an?\s+(?:ai|language\s+model)|"
    r"there\s+is\s+no\s+(?:way|consensus)|it\s+depends|nobody\s+knows|no\s+one\s+knows)\b",
    re.IGNORECASE)
_FIRST_PERSON_ONLY = re.compile(r"^(?:i|i'm|i've|i'd|we|you|hello|hi|thanks|thank\s+you)\b", re.IGNORECASE)
_ABBREVIATIONS = TITLE_ABBREVIATIONS | {"vs", "etc", "e.g", "i.e", "inc", "ltd", "co", "u.s", "u.k", "no", "fig",
                                        "approx", "c", "ca"}
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)])\s)")
_WORD_RE = re.compile(r"[\w]+(?:['’][\w]+)?")
_ARTICLES = {"a", "an", "the"}


@dataclass(frozen=True)
class Claim:
    """One factual claim of one output.

    ``text`` is the claim as written; ``start``/``end`` its character offsets in the output
    (``-1`` when a model span could not be located); ``kinds`` the patterns that found it (see
    the module doc); ``key`` its normalised text (:func:`normalise`), the de-duplication key;
    ``method`` the verification method (:data:`METHODS`), set by :func:`assign_method`.
    """

    text: str
    start: int
    end: int
    kinds: tuple[str, ...]
    key: str
    method: str = "human"
    features: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)

    def with_method(self, method: str) -> "Claim":
        """A copy with ``method`` (one of :data:`METHODS`; ValueError otherwise)."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        return Claim(self.text, self.start, self.end, self.kinds, self.key, method, self.features)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: text, offsets, kinds, method and the matched pattern fragments."""
        return {"text": self.text, "start": self.start, "end": self.end, "kinds": list(self.kinds),
                "method": self.method, "features": self.features}


def normalise(text: str) -> str:
    """Normalised form for matching and de-duplication.

    NFKC, lower case, curly quotes straightened, every non-word character a space, the articles
    a/an/the dropped, whitespace collapsed: ``"The Firs."`` → ``"firs"``. Numbers keep their
    digits (``"1,962"`` → ``"1 962"``, the same on both sides of any comparison).
    """
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    words = [w for w in _WORD_RE.findall(text) if w not in _ARTICLES]
    return " ".join(words)


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans ``[(start, end), ...]`` of ``text`` (character offsets, stripped).

    Splits after ``.``/``!``/``?`` followed by space and a capital or digit, on blank lines and
    before list items; does not split after common abbreviations (Mr., Dr., e.g., U.S.), single
    initials (``George W. Bush``) or inside decimals (``3.5``). Empty text → ``[]``.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        before = text[start:match.start()].rstrip("\"')]")
        last = before.rsplit(None, 1)[-1].lower().rstrip(".") if before.split() else ""
        if before.endswith(".") and (last in _ABBREVIATIONS or re.fullmatch(r"[a-z]", last)):
            continue
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    result = []
    for s, e in spans:
        chunk = text[s:e]
        lead = len(chunk) - len(chunk.lstrip())
        s, e = s + lead, s + len(chunk.rstrip())
        if e > s:
            result.append((s, e))
    return result


def _features(sentence: str, first: bool) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    numbers = [m.group(0) for m in _NUMBER_RE.finditer(sentence)]
    dates = [m.group(0) for m in _DATE_RE.finditer(sentence)]
    if numbers:
        found["number"] = numbers
    if dates:
        found["date"] = dates
    names = [m.group(0) for m in _MULTIWORD_NAME_RE.finditer(sentence)]
    names += [m.group(0) for m in _INNER_NAME_RE.finditer(sentence)]
    names = [n for n in names if not (first and sentence.startswith(n) and " " not in n)]
    if names:
        found["entity"] = sorted(set(n.rstrip(".")for n in names))
    if (copula := _COPULA_RE.search(sentence)) and _COPULA_SUBJECT_RE.search(sentence):
        found["copula"] = [copula.group(0).strip()]
    return found


def _is_filler(sentence: str) -> bool:
    words = normalise(sentence).split()
    return not words or bool(_HEDGES.match(sentence.strip())) or sentence.rstrip().endswith("?")


def mine_claims(text: str, *, question: str | None = None) -> list[Claim]:
    """Claims found in ``text`` by the deterministic patterns, de-duplicated, in text order.

    ``question``: when the output answers a known question, its first non-filler sentence is
    a claim of kind ``answer`` even if no pattern matches (the direct answer). Sentences that
    hedge or refuse, questions, and sentences matching no pattern are not claims; a first-person
    sentence is a claim only when a number or date pattern matches. Every claim starts with
    method ``human``; :func:`assign_method` maps it. Raises TypeError for non-str text.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    claims: list[Claim] = []
    answer_taken = question is None
    for s, e in split_sentences(text):
        sentence = text[s:e]
        if _is_filler(sentence):
            continue
        found = _features(sentence, first=True)
        if _FIRST_PERSON_ONLY.match(sentence) and not ({"number", "date"} & set(found)):
            found = {}
        kinds = [k for k in CLAIM_KINDS if k in found]
        if not answer_taken:
            kinds.insert(0, "answer")
            answer_taken = True
        if kinds:
            claims.append(Claim(sentence, s, e, tuple(kinds), normalise(sentence), features=found))
    return dedupe(claims)


def dedupe(claims: Iterable[Claim]) -> list[Claim]:
    """Claims with duplicate normalised text removed (the first kept, kinds merged).

    A ``model`` claim whose normalised text is contained in a kept claim's normalised text is a
    duplicate of that claim (the sentence already covers the span).
    """
    kept: list[Claim] = []
    by_key: dict[str, int] = {}
    for claim in claims:
        if not claim.key:
            continue
        index = by_key.get(claim.key)
        if index is None and "model" in claim.kinds:
            index = next((i for i, k in enumerate(kept) if f" {claim.key} " in f" {k.key} "), None)
        if index is None:
            by_key[claim.key] = len(kept)
            kept.append(claim)
            continue
        old = kept[index]
        kinds = tuple(k for k in CLAIM_KINDS if k in old.kinds or k in claim.kinds)
        kept[index] = Claim(old.text, old.start, old.end, kinds, old.key, old.method,
                            {**claim.features, **old.features})
    return kept


def assign_method(claim: Claim, *, has_oracle: bool, regex_applies: bool) -> Claim:
    """Map a claim to its verification method (methodology "FAR-H"), first that applies:

    ``oracle`` when the output's question has oracle answers; ``regex`` when a regex rule's
    selector matches the claim; ``validator`` when it holds a date or a percentage (calendar
    and range checks); else ``human`` (queued for a reviewer, not counted as checked).
    """
    if has_oracle:
        return claim.with_method("oracle")
    if regex_applies:
        return claim.with_method("regex")
    if "date" in claim.features or any("%" in n or "percent" in n.lower() for n in claim.features.get("number", [])):
        return claim.with_method("validator")
    return claim.with_method("human")


#: Instructions of the model-assisted span detection pass.
SPAN_DETECTION_PROMPT = (
    "You extract checkable factual claims. Read the TEXT and list every span that states a fact "
    "that could be verified against a reference (names, numbers, dates, definitions, causal or "
    "historical statements). Copy each span verbatim from the TEXT; skip opinions, hedges, "
    "greetings and questions. Answer with JSON only: {\"claims\": [\"span\", ...]}."
)


def span_detection_messages(text: str) -> list[dict[str, str]]:
    """Chat messages (OpenAI format) asking a model to list the factual spans of ``text``."""
    return [{"role": "system", "content": SPAN_DETECTION_PROMPT},
            {"role": "user", "content": f"TEXT:\n{text}"}]


def parse_model_spans(reply: str, text: str) -> list[Claim]:
    """Claims (kind ``model``) from a span-detection reply, located in ``text``.

    Accepts the JSON object ``{"claims": [...]}`` (optionally inside a ```json fence) or a JSON
    list of strings. Spans are located by exact, then case-insensitive search (offsets ``-1``
    when not found: the model paraphrased). Empty spans are dropped. Raises ValueError when the
    reply is not that JSON.
    """
    body = reply.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fence:
        body = fence.group(1).strip()
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"span detection reply is not JSON: {exc.msg} (reply starts {reply[:80]!r})") from None
    spans = parsed.get("claims") if isinstance(parsed, dict) else parsed
    if not isinstance(spans, list) or not all(isinstance(s, str) for s in spans):
        raise ValueError('span detection reply must be {"claims": ["span", ...]}')
    claims = []
    lowered = text.lower()
    for span in spans:
        span = span.strip()
        if not span:
            continue
        start = text.find(span)
        if start < 0:
            start = lowered.find(span.lower())
        end = start + len(span) if start >= 0 else -1
        found = _features(span, first=True)
        claims.append(Claim(span, start, end, ("model",), normalise(span), features=found))
    return claims
