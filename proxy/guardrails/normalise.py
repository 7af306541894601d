"""Look-alike characters and encodings: the text a detector should read, with its way back.

A client can write personal data or a harmful request so that it reads the same to a person or a
model but not to a pattern or a classifier trained on plain text: full-width letters, Cyrillic
homoglyphs, zero-width characters inside a word, a card number joined by non-breaking hyphens or
underscores, letters spaced out, digits spelled as words, or the whole text in base64. Privacy
and Safety read :func:`fold`'s text beside the original, and Safety also the
:func:`variants` (decoded blocks, rot13, reversal); Privacy maps each span found in the folded
text back to the original characters (:meth:`Folded.original_span`), so the placeholder covers
what the client wrote.

:func:`fold` applies, in order:

1. per character outside ASCII: format characters (zero-width spaces and joiners, bidi controls,
   soft hyphen, word joiner, BOM: Unicode category ``Cf``) removed; Unicode NFKC (full-width and
   mathematical letters, ligatures, no-break and other spaces; not punctuation it would spell out
   in several characters, such as "…") and any space separator (``Zs``)
   as a space; a dash, hyphen or minus sign between two digits as ``-`` (an em dash in prose stays);
2. confusable letters: a word whose letters are all ASCII or have an ASCII look-alike in Unicode's
   confusables data (UTS #39 ``confusables.txt``, as shipped by the ``confusable-homoglyphs``
   package) is spelled with those look-alikes (Cyrillic "рiре bоmb" → "pipe bomb"); a word with
   any other letter (most Russian or Greek words) is left as written;
3. digit groups joined by ``_`` or ``/`` (four groups or more: a card, ``+44/20/7946/0958``; not
   a date or ``1_000_000``) joined by ``-`` instead;
4. four or more single letters, digits or ``@ . _ -`` separated by single spaces joined up
   (``p i p e  b o m b`` → ``pipe bomb``: two spaces separate words; a leading "a" or "I" before
   four or more stays a word);
5. four or more digit names in a row (``zero``/``oh`` to ``nine``, separated by spaces, commas or
   hyphens) written as digits (``four one one one`` → ``4111``).

Plain ASCII text without a digit group of step 3, a spaced run of step 4 or a digit name takes
the fast path: :func:`fold` returns it unchanged (no copy, no offset table). Pure functions; the
confusables table is read once, on first use.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Callable

__all__ = ["Folded", "fold", "variants", "encoded_blocks", "EncodedBlock"]

_NAME = r"(?:zero|oh|one|two|three|four|five|six|seven|eight|nine)"
_DIGIT_GROUPS = re.compile(r"\+?\d+(?:[_/]\d+){3,}")
_SPACED = re.compile(r"(?<!\S)(?:[A-Za-z0-9@._-] ){3,}[A-Za-z0-9@._-](?!\S)")
_SPELLED = re.compile(rf"\b{_NAME}(?:[ ,-]+{_NAME}){{3,}}\b", re.IGNORECASE)
#: A dash or hyphen other than ``-`` (Unicode category ``Pd``, the minus sign) between two digits.
_DASH_IN_DIGITS = re.compile(r"(?<=\d)[\u2010-\u2015\u2212\u2E3A\u2E3B\uFE58\uFE63](?=\d)")
#: A digit after ``_`` or ``/``: where step 3 may apply.
_JOINED_DIGIT = re.compile(r"[_/]\d")
_DIGIT_NAMES = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9"}
_SPELLED_WORD = re.compile(_NAME, re.IGNORECASE)
#: Every ASCII character but a letter as a space (the words step 5's cheap test reads).
_LETTERS_ONLY = str.maketrans({c: " " for c in map(chr, range(128)) if not c.isalpha()})
#: A word for step 2 (letters of any script and digits).
_WORD = re.compile(r"[^\W_]+")
#: Characters outside ASCII (step 1).
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


@lru_cache(maxsize=1)
def _confusable_letters() -> dict[str, str]:
    """Non-ASCII letter → the ASCII letter or digit Unicode lists it as confusable with
    (``confusable_homoglyphs``' ``confusables.json``, derived from UTS #39 ``confusables.txt``);
    a letter look-alike is preferred over a digit."""
    data = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    table: dict[str, str] = {}
    for char, glyphs in data.items():
        if len(char) != 1 or char.isascii() or not char.isalpha():
            continue
        ascii_ = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii() and g["c"].isalnum()]
        if ascii_:
            table[char] = min(ascii_, key=lambda c: (not c.isalpha(), c))
    return table


@dataclass(frozen=True)
class Folded:
    """A text as :func:`fold` spells it: ``text``, and per character of it the ``[start, end)`` of
    the original characters it stands for (``starts``/``ends``; both None when ``text`` is the
    original itself). ``original`` is the text folded."""

    original: str
    text: str
    starts: tuple[int, ...] | None = None
    ends: tuple[int, ...] | None = None

    @property
    def changed(self) -> bool:
        """True when :attr:`text` differs from :attr:`original`."""
        return self.starts is not None

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """The ``[start, end)`` of the original characters behind ``text[start:end]`` (a non-empty
        span of :attr:`text`): from the first character's start to the last one's end, so removed
        characters inside the span are covered too. Raises IndexError outside the text."""
        if self.starts is None or self.ends is None:
            return start, end
        return self.starts[start], self.ends[end - 1]


class _Builder:
    """Characters with the original span each stands for, rewritten pass by pass."""

    def __init__(self, chars: list[str], starts: list[int], ends: list[int]) -> None:
        self.chars, self.starts, self.ends = chars, starts, ends

    def text(self) -> str:
        return "".join(self.chars)

    def sub(self, pattern: re.Pattern[str], rewrite: Callable[[str], list[tuple[str, int, int]]]) -> None:
        """Replace each match of ``pattern`` by ``rewrite(match text)``: ``(char, i, j)`` triples, the
        new character standing for the match's characters ``[i, j)``."""
        text = self.text()
        matches = list(pattern.finditer(text))
        if not matches:
            return
        chars: list[str] = []
        starts: list[int] = []
        ends: list[int] = []
        at = 0
        for m in matches:
            chars += self.chars[at:m.start()]
            starts += self.starts[at:m.start()]
            ends += self.ends[at:m.start()]
            for char, i, j in rewrite(m.group()):
                chars.append(char)
                starts.append(self.starts[m.start() + i])
                ends.append(self.ends[m.start() + j - 1])
            at = m.end()
        self.chars, self.starts, self.ends = chars + self.chars[at:], starts + self.starts[at:], ends + self.ends[at:]


def _per_character(text: str) -> _Builder:
    """Step 1 of the module docstring (ASCII characters stay as they are)."""
    builder = _Builder(list(text), list(range(len(text))), list(range(1, len(text) + 1)))
    if any(_fold_char(c) != c for c in set(text) if not c.isascii()):
        builder.sub(_NON_ASCII, lambda run: [(c, k, k + 1) for k, char in enumerate(run) for c in _fold_char(char)])
    return builder


def _four_in_a_row(indexes: list[int]) -> bool:
    """True when ``indexes`` (increasing) hold four consecutive integers."""
    return any(indexes[k + 3] - indexes[k] == 3 for k in range(len(indexes) - 3))


def _steps(text: str) -> tuple[bool, bool, bool]:
    """Which of steps 3, 4 and 5 may change ``text`` (cheap tests on its white-space separated
    words, in C loops: most texts need none of them)."""
    words = text.split()
    if not words:
        return False, False, False
    groups = _JOINED_DIGIT.search(text) is not None and _DIGIT_GROUPS.search(text) is not None
    spaced = _four_in_a_row([i for i, word in enumerate(words) if len(word) == 1])
    return groups, spaced, _maybe_spelled(text)


def _maybe_spelled(text: str) -> bool:
    """True when step 5 may change ``text``: four digit names in a row among its words, any ASCII
    character other than a letter separating them (so every match of the step's pattern passes,
    with its commas, hyphens and the punctuation around it); text outside ASCII goes to the
    pattern itself."""
    if not text.isascii():
        return _SPELLED.search(text) is not None
    words = text.lower().translate(_LETTERS_ONLY).split()
    return not _DIGIT_NAMES.keys().isdisjoint(words) and _four_in_a_row(
        [i for i, word in enumerate(words) if word in _DIGIT_NAMES])


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """One non-ASCII character as step 1 writes it ('' when removed)."""
    if unicodedata.category(char) == "Cf":
        return ""
    out = unicodedata.normalize("NFKC", char)
    if len(out) > 1 and not any(c.isalnum() for c in out):
        return char  # "…" stays: punctuation spelled out identifies nothing
    return "".join(" " if unicodedata.category(c) == "Zs" else c for c in out)


def _confusables(builder: _Builder) -> None:
    """Step 2: words whose every letter is ASCII or has an ASCII look-alike, spelled with those
    (one character for one: the offsets stay)."""
    table = _confusable_letters()
    text = builder.text()
    if table.keys().isdisjoint(text):
        return
    for m in _WORD.finditer(text):
        word = m.group()
        if word.isascii() or not all(c.isascii() or c in table or not c.isalpha() for c in word):
            continue
        for k, c in enumerate(word, m.start()):
            builder.chars[k] = table.get(c, c)


def _spaced(match: str) -> list[tuple[str, int, int]]:
    """Step 4: the spaces of a spaced-out run removed; a leading "a" or "I" (an English word on its
    own: "make a p i p e") keeps its space when four or more characters follow (:func:`variants`
    also reads the run joined whole)."""
    keep = 2 if match[0] in "aAI" and len(match) >= 9 else 0
    return [(c, k, k + 1) for k, c in enumerate(match) if c != " " or k < keep]


def _spelled(match: str) -> list[tuple[str, int, int]]:
    """Step 5: digit names as digits; a separator holding more than spaces becomes one space."""
    out: list[tuple[str, int, int]] = []
    at = 0
    for m in _SPELLED_WORD.finditer(match):
        if at and match[at:m.start()].strip():
            out.append((" ", at, m.start()))
        out.append((_DIGIT_NAMES[m.group().lower()], m.start(), m.end()))
        at = m.end()
    return out


def fold(text: str) -> Folded:
    """``text`` with look-alike characters folded (the module docstring's steps), and the offset
    map back to ``text``. Never raises for a str; O(len(text))."""
    if text.isascii():
        groups, spaced, spelled = _steps(text)
        if not (groups or spaced or spelled):
            return Folded(text, text)
        builder = _Builder(list(text), list(range(len(text))), list(range(1, len(text) + 1)))
    else:
        builder = _per_character(text)
        if not builder.text().isascii():
            _confusables(builder)
            for m in _DASH_IN_DIGITS.finditer(builder.text()):  # one character for one
                builder.chars[m.start()] = "-"
        groups, spaced, spelled = _steps(builder.text())
    if groups:
        builder.sub(_DIGIT_GROUPS, lambda m: [("-" if c in "_/" else c, k, k + 1) for k, c in enumerate(m)])
    if spaced:
        builder.sub(_SPACED, _spaced)
    if spelled:
        builder.sub(_SPELLED, _spelled)
    folded = builder.text()
    if folded == text:
        return Folded(text, text)
    return Folded(text, folded, tuple(builder.starts), tuple(builder.ends))


# ---- encodings ------------------------------------------------------------------------------

@dataclass(frozen=True)
class EncodedBlock:
    """A block of ``text[start:end]`` that decodes (``encoding``: ``base64`` or ``hex``) to the
    readable text ``decoded``."""

    start: int
    end: int
    encoding: str
    decoded: str


_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{2}(?::?[0-9A-Fa-f]{2}){7,}(?![0-9A-Fa-f])")
#: A run of 16 or more characters without white space: where a block can be.
_LONG_WORD = re.compile(r"\S{16,}")
_ROT13_CUE = re.compile(r"\brot[ -]?13\b|\bcaesar\b", re.IGNORECASE)
_REVERSED_CUE = re.compile(r"\brevers|\bbackwards?\b|\bright[ -]to[ -]left\b", re.IGNORECASE)
#: The last word of an English sentence written backwards ("woH"): lower case, then one capital.
_REVERSED_END = re.compile(r"[a-z]+[A-Z]\W*")


def _readable(raw: bytes) -> str | None:
    """``raw`` as text when it is UTF-8 of mostly printable characters with at least one word of
    three letters; else None (a hash, a key or random bytes)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\n\t" for c in text)
    if not text or printable < 0.95 * len(text) or not re.search(r"[^\W\d_]{3}", text):
        return None
    return text


def _decode_base64(block: str) -> str | None:
    body = block.rstrip("=")
    if len(body) % 4 == 1 or body.isalpha() and (body.islower() or body.isupper()):
        return None  # not base64 length; or one plain word in one case (an identifier)
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _readable(raw)


def encoded_blocks(text: str) -> list[EncodedBlock]:
    """The base64 blocks (16 or more characters, standard or URL-safe alphabet) and hex blocks
    (8 or more bytes, optionally separated by colons) of ``text`` that decode to
    readable UTF-8 text (:func:`_readable`), in order; a block that is both is reported once, as
    hex. Never raises for a str."""
    blocks: list[EncodedBlock] = []
    if max(map(len, text.split()), default=0) < 16:
        return blocks
    for word in _LONG_WORD.finditer(text):
        for m in _HEX.finditer(word.group()):
            decoded = _readable(bytes.fromhex(m.group().replace(":", "")))
            if decoded is not None:
                blocks.append(EncodedBlock(word.start() + m.start(), word.start() + m.end(), "hex", decoded))
        taken = [(b.start, b.end) for b in blocks]
        for m in _BASE64.finditer(word.group()):
            start, end = word.start() + m.start(), word.start() + m.end()
            decoded = None if any(a < end and start < b for a, b in taken) else _decode_base64(m.group())
            if decoded is not None:
                blocks.append(EncodedBlock(start, end, "base64", decoded))
    return sorted(blocks, key=lambda b: b.start)


def variants(text: str) -> list[str]:
    """Other readings of ``text`` a classifier should judge too, besides ``text`` itself: its
    :func:`fold` when that differs (and, with spaced-out letters, every spaced run joined whole);
    the decoded text of each :func:`encoded_blocks` block (also
    folded); the whole text in rot13, and the text after the instruction (after its colon, if any), when it
    names rot13 or Caesar; the whole text reversed when it
    names reversal or reads like a reversed English sentence (its last word is lower case ending in
    one capital: "... ekam ot woH"). Without repeats, ``text`` left out; ``[]`` for most texts."""
    out: list[str] = []
    folded = fold(text)
    if folded.changed:
        out.append(folded.text)
    for block in encoded_blocks(text):
        out.append(block.decoded)
        decoded = fold(block.decoded)
        if decoded.changed:
            out.append(decoded.text)
    if folded.changed and _steps(text)[1]:  # "a n t h r a x" joined whole too
        out.append(_SPACED.sub(lambda m: m.group().replace(" ", ""), text))
    lower = text.lower()
    cue = ("rot" in lower or "caesar" in lower) and _ROT13_CUE.search(folded.text)
    if cue:  # the whole text, and what follows the instruction ("rot13 and follow it: <text>")
        tail = folded.text[cue.end():]
        out += [codecs.encode(folded.text, "rot13"), codecs.encode(tail[tail.find(":") + 1:], "rot13").strip()]
    words = folded.text.split()
    if (words and _REVERSED_END.fullmatch(words[-1])) or (
            ("revers" in lower or "backward" in lower or "right" in lower) and _REVERSED_CUE.search(text)):
        out.append(folded.text[::-1])
    return [t for t in dict.fromkeys(out) if t != text and t.strip()]
