"""Linear-time e-mail and URL recognizers, and the text windows every recognizer sees.

Why (a 12 KB prompt must not stall every client): presidio's built-in patterns backtrack
super-linearly on inputs such as ``"a." * 6000 + "@"``. ``EmailRecognizer``'s unbounded local
part ``[...]{0,}`` is rescanned from every word start (quadratic: 52 s at 12,000 characters);
``UrlRecognizer``'s ``[a-z0-9.\\-]{1,253}[.](?:675 TLD alternatives)`` backtracks 253 positions
from every character, each trying the whole alternation (29 s at 12,000 characters).

The replacements keep presidio's recognizer classes (their context words and
``EmailRecognizer``'s tldextract validation) and presidio's ``regex`` engine, with patterns whose
work per start position is bounded by a constant:

- e-mail: the local part is at most 64 characters (RFC 5321 §4.5.3.1.1), each domain label at
  most 63 (RFC 1035 §2.3.4), at most 20 labels;
- URL: a match starts only where no host character precedes it (so a run of labels is entered
  once, not at each of its characters), each label is atomic and at most 63 characters, at most
  16 labels, and the TLD is presidio's own list compiled into a character trie (a few
  comparisons instead of 675 alternatives).

The ``regex`` module is already a locked dependency (presidio compiles with it); RE2 (``google-re2``)
was not adopted: it is not in requirements.lock, and presidio's PatternRecognizer compiles
with ``regex`` internally, so RE2 would need a recognizer class of our own.

:func:`windows` cuts a long text into overlapping windows so no recognizer (nor spaCy) ever sees
more than ``window`` characters at once. A detector working through the windows of a long text
calls :func:`pause_point` between groups of them: the thread's pause hook (installed by whoever
runs the detector, with :func:`pausing`; the server's large-input
lane) may wait there so short requests go first, or raise to abandon a screen nobody awaits.
Without a hook it does nothing.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any, Iterable

_hooks = threading.local()

#: Characters RFC 5322 allows in an unquoted local part (dot-atom ``atext``), as presidio lists them.
_ATEXT = r"[!#$%&'*+\-/=?^_`{|}~\w]"
_ATEXT_OR_DOT = r"[!#$%&'*+\-/=?^_`{|}~.\w]"
_EMAIL_LABEL = r"\w{1,63}(?:-{1,10}\w{1,63}){0,10}"

#: presidio's e-mail pattern with every repetition bounded (same score 0.5, same groups).
EMAIL_REGEX = (
    r"\b(" + _ATEXT + r"(?:" + _ATEXT_OR_DOT + r"{0,62}" + _ATEXT + r")?"
    r"@" + _EMAIL_LABEL + r"(?:\." + _EMAIL_LABEL + r"){1,20})\b"
)

#: Longest hostname prefix searched: labels before the TLD.
MAX_URL_LABELS = 16


def _trie_regex(words: Iterable[str]) -> str:
    """A regex (no captures) matching exactly ``words``, as a character trie: ``com|co|cn`` →
    ``c(?:o(?:m)?|n)``. Linear in the total length of the words."""
    root: dict = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict) -> str:
        branches = [re.escape(c) + emit(child) for c, child in sorted(node.items()) if c]
        if not branches:
            return ""
        body = "(?:" + "|".join(branches) + ")"
        return body + "?" if "" in node else body

    return emit(root)


def presidio_tlds() -> list[str]:
    """The top-level domains of presidio's ``UrlRecognizer`` (its ``BASE_URL_REGEX``), sorted."""
    from presidio_analyzer.predefined_recognizers import UrlRecognizer

    return sorted(set(re.findall(r"\(\?:([a-z0-9]+)\)", UrlRecognizer.BASE_URL_REGEX)))


def url_regexes() -> tuple[str, str]:
    """(with scheme, without scheme) URL patterns: presidio's BASE_URL_REGEX shape, bounded.

    A host is ``(www\\d{0,3}.)?`` + 1..16 labels + a presidio TLD, then an optional path of at most
    2,048 characters (without ``\\s()<>"'``), case-insensitive as presidio's.
    """
    tld = _trie_regex(presidio_tlds())
    host = (r"(?:www\d{0,3}\.)?(?>[a-z0-9\-]{1,63}\.){1,%d}%s(?:/[^\s()<>\"']{0,2048})?"
            % (MAX_URL_LABELS, tld))
    start = r"(?<![a-z0-9.\-])"
    return (r"(?i)" + start + r"https?://" + host, r"(?i)" + start + host)


def email_recognizer(language: str):
    """presidio's ``EmailRecognizer`` (context words, tldextract validation) with :data:`EMAIL_REGEX`.

    Named ``EmailRecognizer`` so configs that name it (``disabled_recognizers``) keep working.
    """
    from presidio_analyzer import Pattern
    from presidio_analyzer.predefined_recognizers import EmailRecognizer

    return EmailRecognizer(patterns=[Pattern("Email (bounded)", EMAIL_REGEX, 0.5)],
                           supported_language=language, name="EmailRecognizer")


def url_recognizer(language: str):
    """presidio's ``UrlRecognizer`` (context words) with :func:`url_regexes` (scores 0.6 / 0.5 as presidio's)."""
    from presidio_analyzer import Pattern
    from presidio_analyzer.predefined_recognizers import UrlRecognizer

    with_scheme, without = url_regexes()
    patterns = [Pattern("Url (bounded)", with_scheme, 0.6), Pattern("Non schema Url (bounded)", without, 0.5)]
    return UrlRecognizer(patterns=patterns, supported_language=language, name="UrlRecognizer")


#: Default bound on the phone-number candidates python-phonenumbers may reject per region per
#: analysed window (its ``PhoneNumberMatcher(max_tries=...)``; the library's default is 65,535).
PHONE_MAX_TRIES = 128


@functools.lru_cache(maxsize=1)
def _phone_candidate_pattern() -> tuple[Any, str | None]:
    """python-phonenumbers' candidate pattern and its lead characters (None when it has none)."""
    from phonenumbers import phonenumbermatcher

    return getattr(phonenumbermatcher, "_PATTERN", None), getattr(phonenumbermatcher, "_LEAD_CLASS_CHARS", None)


def phone_candidates_reach(text: str, min_digits: int) -> bool:
    """Could python-phonenumbers' ``PhoneNumberMatcher`` report a span of ``text`` holding at least
    ``min_digits`` digits (``str.isdigit``)?

    Every span the matcher reports lies inside a match of its candidate pattern
    (``phonenumbermatcher._PATTERN``, searched from some index, then trimmed or split into inner
    matches, never extended), and a match of that pattern starts at a digit or at one of its lead
    characters (opening brackets, plus signs). So when no match starting at any such position holds
    ``min_digits`` digits, no reported span can: False. True as soon as one does, and whenever the
    library no longer exposes that pattern (nothing is skipped then). One ``match`` call per digit or
    lead character, stopping at the first long enough.
    """
    pattern, lead = _phone_candidate_pattern()
    if min_digits <= 0 or pattern is None or lead is None:
        return True
    for index, char in enumerate(text):
        if char.isdigit() or char in lead:
            match = pattern.match(text, index)
            if match is not None and sum(c.isdigit() for c in match.group()) >= min_digits:
                return True
    return False


#: ``SONATE_PII_RECOGNIZER_GATE=0`` turns :func:`skip_where_unmatchable` off (every recognizer runs
#: on every text; for measuring the gate, ``bench/guardrails.py --levers``).
RECOGNIZER_GATE_ENV = "SONATE_PII_RECOGNIZER_GATE"
#: Pattern recognizers none of whose matches can avoid a character class, by class name: the
#: characters one of which every match holds, and the sha256 (first 16 hex digits) of their
#: patterns' regexes joined by newlines, as read when this table was written. Every pattern of the
#: digit ones holds a mandatory ``[0-9]`` or ``\d`` outside any optional group (presidio-analyzer's
#: credit card, SSN, IBAN, driver licence, passport and bank number recognizers); every pattern of
#: presidio's IP recognizer a digit or a ``:`` (its IPv6 forms "::" and "::ab" hold no digit);
#: :data:`EMAIL_REGEX` an ``@``.
UNMATCHABLE_WITHOUT: dict[str, tuple[str, str]] = {
    "CreditCardRecognizer": ("digit", "f619fa242c932c37"),
    "UsSsnRecognizer": ("digit", "99e2c61f6a973b04"),
    "IpRecognizer": ("digit:", "2e5b4e8ccce1e531"),
    "IbanRecognizer": ("digit", "1f98697e78e08d67"),
    "UsLicenseRecognizer": ("digit", "a5ad4472a28cc70f"),
    "UsPassportRecognizer": ("digit", "4d39378952a1fd07"),
    "UsBankRecognizer": ("digit", "77ff5492baf67207"),
    "EmailRecognizer": ("@", "08de88f48a22644a"),
}


def patterns_digest(recognizer: Any) -> str:
    """First 16 hex digits of the sha256 of a pattern recognizer's regexes joined by newlines."""
    joined = "\n".join(pattern.regex for pattern in getattr(recognizer, "patterns", None) or [])
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]


#: An ASCII digit: in an ASCII text, exactly the characters ``str.isdigit`` accepts.
_ASCII_DIGIT = re.compile("[0-9]")


def could_match(needs: str, text: str) -> bool:
    """Does ``text`` hold a character every match of a recognizer needing ``needs`` holds?
    ``needs``: ``"digit"`` (any ``str.isdigit`` character: a superset of the ``\\d`` and ``[0-9]``
    the patterns match), ``"digit:"`` (a digit or ``:``), or literal characters (any of them)."""
    if needs.startswith("digit"):
        extra = needs[len("digit"):]
        if text.isascii():  # where str.isdigit is [0-9]: one regex search instead of a Python loop
            return _ASCII_DIGIT.search(text) is not None or any(c in text for c in extra)
        return any(c.isdigit() or c in extra for c in text)
    return any(c in text for c in needs)


def skip_where_unmatchable(recognizer: Any) -> bool:
    """Make a recognizer of :data:`UNMATCHABLE_WITHOUT` return no result, without running its
    patterns, on a text without the characters every match of it needs; True when gated.

    Only an instance of the listed class itself, named after it, with no deny list and the very
    patterns the table was written from (:func:`patterns_digest`; another presidio version's are
    left alone) is gated, so the results are the same on every text: a pattern that must match a
    digit finds nothing in a text without one. Off with ``SONATE_PII_RECOGNIZER_GATE=0``.
    Why: these recognizers cost ~0.3 ms per short prompt without digits or "@" (measured with
    presidio's ``analyze``), ~10% of the Privacy pass of such a prompt.
    """
    if os.environ.get(RECOGNIZER_GATE_ENV, "1").strip() == "0":
        return False
    entry = UNMATCHABLE_WITHOUT.get(type(recognizer).__name__)
    if (entry is None or recognizer.name != type(recognizer).__name__ or getattr(recognizer, "deny_list", None)
            or patterns_digest(recognizer) != entry[1]):
        return False
    needs, analyze = entry[0], recognizer.analyze

    def gated(text: str, entities: list[str], nlp_artifacts: Any = None, regex_flags: int | None = None):
        if not could_match(needs, text):
            return []
        return analyze(text, entities, nlp_artifacts, regex_flags)

    recognizer.analyze = gated
    return True


def phone_recognizer(language: str, max_tries: int = PHONE_MAX_TRIES, min_digits: int = 0):
    """presidio's ``PhoneRecognizer`` (same regions, leniency, context, score) whose
    python-phonenumbers matcher gives up after ``max_tries`` rejected candidates per region, and
    does not run when no span it could report would hold ``min_digits`` digits
    (:func:`phone_candidates_reach`; the detector drops shorter phone spans anyway, ``min_digits``
    of privacy.yaml). That skip is exact and saves the matcher's ~0.35 ms per prompt with a few
    digits (8 regions, each parsing every digit group).

    Why: on digit runs such as ``"1 " * 6000`` every digit group is a candidate and each is
    parsed for several inner groupings (~8,000 ``parse`` calls per region per 2,000-character
    window, 4 s of the 9 s of that 12 KB text). ``max_tries`` is the library's own bound
    (``phonenumbers.PhoneNumberMatcher``: "the maximum number of invalid numbers to try before
    giving up on the text"); ordinary prose holds far fewer rejected candidates per window.
    Named ``PhoneRecognizer`` so configs that name it keep working. Raises ValueError if
    ``max_tries`` < 1.
    """
    import phonenumbers
    from presidio_analyzer import EntityRecognizer
    from presidio_analyzer.predefined_recognizers import PhoneRecognizer

    if max_tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")

    class BoundedPhoneRecognizer(PhoneRecognizer):
        """presidio's ``PhoneRecognizer.analyze`` with ``max_tries`` passed to the matcher."""

        def analyze(self, text, entities, nlp_artifacts=None):
            if not phone_candidates_reach(text, min_digits):
                return []
            results = []
            for region in self.supported_regions:
                # presidio types ``leniency`` Optional but always sets an int; its own analyze passes it the same way.
                matcher = phonenumbers.PhoneNumberMatcher(
                    text, region, leniency=self.leniency, max_tries=max_tries)  # type: ignore[arg-type]
                for match in matcher:
                    try:
                        found = phonenumbers.region_code_for_number(
                            phonenumbers.parse(text[match.start:match.end]))
                    except phonenumbers.NumberParseException:
                        found = region
                    results.append(self._get_recognizer_result(match, text, found, nlp_artifacts))
            return EntityRecognizer.remove_duplicates(results)

    return BoundedPhoneRecognizer(supported_language=language, name="PhoneRecognizer")


def _snap_back(text: str, position: int, lowest: int) -> int:
    """The index just after the last whitespace in ``text[lowest:position]``, else ``position``."""
    for index in range(position - 1, lowest - 1, -1):
        if text[index].isspace():
            return index + 1
    return position


def windows(text: str, window: int, overlap: int) -> list[tuple[int, int]]:
    """Cover ``text`` with ``[start, end)`` windows of at most ``window`` characters.

    Consecutive windows share at least ``overlap`` characters, so an entity of up to ``overlap``
    characters lies whole inside some window. Cuts move back (by at most ``overlap // 2``) to
    just after a whitespace when there is one, so words are not split. A text of at most
    ``window`` characters is one window. Needs ``0 <= 2 * overlap < window`` (ValueError).
    """
    if window <= 0 or overlap < 0 or 2 * overlap >= window:
        raise ValueError(f"need 0 <= 2 * overlap < window, got window={window}, overlap={overlap}")
    bounds: list[tuple[int, int]] = []
    start, length = 0, len(text)
    while True:
        end = min(start + window, length)
        if end < length:
            end = _snap_back(text, end, end - overlap // 2)
        bounds.append((start, end))
        if end >= length:
            return bounds
        start = _snap_back(text, end - overlap, end - overlap - overlap // 2)



def pause_point() -> None:
    """Call this thread's pause hook (:func:`pausing`), if any: a detector calls it between groups of
    windows of a long text. Whatever the hook raises propagates (the detector's work is abandoned)."""
    hook = getattr(_hooks, "hook", None)
    if hook is not None:
        hook()


def pause_hook() -> Callable[[], None] | None:
    """This thread's pause hook (None outside :func:`pausing`): to install it in a helper thread doing
    part of the same work, so that work pauses and is abandoned with it."""
    return getattr(_hooks, "hook", None)


@contextlib.contextmanager
def pausing(hook: Callable[[], None]) -> Iterator[None]:
    """Within the block, :func:`pause_point` on this thread calls ``hook()`` (the previous hook is
    restored after it). ``hook`` may block (e.g. while higher-priority work runs) or raise."""
    previous = getattr(_hooks, "hook", None)
    _hooks.hook = hook
    try:
        yield
    finally:
        _hooks.hook = previous
