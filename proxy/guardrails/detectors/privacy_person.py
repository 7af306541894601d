"""Whose name is it: a private individual's (masked) or a public figure's (left alone).

Privacy masks personal data, so a name is masked when it names a private person (a customer, a
patient, the writer's colleague) and left alone when it names a public figure asked or written
about as such (a president, a novelist, a character). Two pieces, both without I/O:

- :class:`PersonHead`, a logistic regression over the features of one PERSON mention
  (:func:`mention_features`), read from passes the input screen makes anyway: the mean of
  spaCy's ``tok2vec`` token vectors (``Doc.tensor``, 96-d for ``en_core_web_sm``; Privacy's own
  parse) over the mention, over up to :data:`CONTEXT_TOKENS` tokens either side of it, and over
  the whole text; the personal-context cues of :class:`~.privacy_context.ContextRule` and the
  text's mood; and the text's MiniLM sentence embedding (the one Safety and Compliance compute,
  shared through the embedding cache). The sentence embedding carries what kind of text it is
  (a bio, a news story, a customer record, a chat) and much of who is famous: out of fold on the
  tuning mentions it raises the ROC AUC from 0.90 (spaCy features alone) to 0.98. The weights, the feature
  scaling and the threshold are an artefact (``artefacts/person-head.npz``), trained by
  ``sonate train privacy-person`` on the tuning part of the presidio development rows (their
  PERSON mentions labelled private/public by reading) and on ``artefacts/person-mentions.csv``,
  texts written for this project.
- :func:`coreferent_spans`: once a mention is judged private, every other mention of that
  person is masked too: the first name or surname alone, a part of a hyphenated name,
  possessives, a family's plural, any casing and apostrophe, with or without accents
  (:func:`name_keys`), in the same text and, through the engine, in every text of the request.

Feature layout (:data:`FEATURES` = 3 x 96 + 12 + 384): mention mean, context mean, text mean, then
the cues ``first_person, second_person, relation, phrase, greeting, record_field``, the mood
one-hot ``question, instruction, fragment, statement``, one-token mention, possessive after the
mention, then the sentence embedding.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

#: Tokens each side of a mention whose vectors make its context feature.
CONTEXT_TOKENS = 5
CUES = ("first_person", "second_person", "relation", "phrase", "greeting", "record_field")
MOODS = ("question", "instruction", "fragment", "statement")
#: Width of spaCy's token vectors the head was trained on (en_core_web_sm's tok2vec).
TENSOR_WIDTH = 96
#: Width of the sentence embedding of the text (all-MiniLM-L6-v2, :mod:`.embeddings`).
SENTENCE_WIDTH = 384
FEATURES = 3 * TENSOR_WIDTH + len(CUES) + len(MOODS) + 2 + SENTENCE_WIDTH
ARTEFACT = Path(__file__).resolve().parents[1] / "artefacts" / "person-head.npz"
#: Words of a name that never identify a person on their own.
_TITLES = frozenset({"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "dame", "lord", "lady", "mx", "jr", "sr",
                     "ii", "iii", "the", "of", "de", "da", "van", "von", "der", "del", "la", "le", "di", "du"})
_NAME_WORD = re.compile(r"[^\W\d_][\w'’-]*", re.UNICODE)


def mention_features(doc, start: int, end: int, cues: Iterable[str], mood: str, sentence: np.ndarray) -> np.ndarray:
    """Features of the mention ``doc.text[start:end]``: float32 (:data:`FEATURES`,).

    ``doc`` is a parsed spaCy ``Doc`` whose ``tensor`` holds the tok2vec vectors (shape
    (len(doc), :data:`TENSOR_WIDTH`)); ``cues`` the names of :data:`CUES` present in the text;
    ``mood`` one of :data:`MOODS` (anything else sets no mood bit); ``sentence`` the text's
    sentence embedding, float32 (:data:`SENTENCE_WIDTH`,) (:func:`~.embeddings.embed`: the pass
    Safety and Compliance already make of the message). Raises ValueError when the offsets do
    not fall on the text or the doc has no token vectors of the expected width.
    """
    tensor = getattr(doc, "tensor", None)
    if tensor is None or tensor.ndim != 2 or tensor.shape[1] != TENSOR_WIDTH or tensor.shape[0] != len(doc):
        raise ValueError(f"the doc has no {TENSOR_WIDTH}-d token vectors (a pipeline with tok2vec is needed)")
    span = doc.char_span(start, end, alignment_mode="expand")
    if span is None or not len(span):
        raise ValueError(f"offsets {start}-{end} do not cover a token")
    a, b = span.start, span.end
    around = [*range(max(0, a - CONTEXT_TOKENS), a), *range(b, min(len(doc), b + CONTEXT_TOKENS))]
    zero = np.zeros(TENSOR_WIDTH, dtype=np.float32)
    cue_set = set(cues)
    text = doc.text
    flags = [float(c in cue_set) for c in CUES] + [float(mood == m) for m in MOODS] + [
        float(b - a == 1), float(text[end:end + 2] in ("'s", "’s"))]
    return np.concatenate([tensor[a:b].mean(axis=0), tensor[around].mean(axis=0) if around else zero,
                           tensor.mean(axis=0), np.asarray(flags, dtype=np.float32),
                           np.asarray(sentence, dtype=np.float32).reshape(SENTENCE_WIDTH)]).astype(np.float32)


@dataclass(frozen=True)
class PersonHead:
    """Logistic regression ``p(private) = sigmoid(((x - mean) / scale) · coef + intercept)``.

    Attributes: ``mean``, ``scale``, ``coef`` float32 (:data:`FEATURES`,); ``intercept`` and
    ``threshold`` (a mention is private when ``p >= threshold``) floats; ``version`` names the
    artefact (``person-head@sha256:<12 hex>``).
    """

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    version: str

    @classmethod
    def load(cls, path: Path = ARTEFACT) -> "PersonHead":
        """Read the artefact. Raises FileNotFoundError, or ValueError for arrays of the wrong shape."""
        data = Path(path).read_bytes()
        with np.load(io.BytesIO(data)) as arrays:
            head = cls(arrays["mean"].astype(np.float32), arrays["scale"].astype(np.float32),
                       arrays["coef"].astype(np.float32), float(arrays["intercept"]), float(arrays["threshold"]),
                       f"person-head@sha256:{hashlib.sha256(data).hexdigest()[:12]}")
        if not head.mean.shape == head.scale.shape == head.coef.shape == (FEATURES,):
            raise ValueError(f"{path}: expected arrays of shape ({FEATURES},)")
        return head

    def probability(self, features: np.ndarray) -> np.ndarray:
        """p(private) of each row of ``features`` (n, :data:`FEATURES`) → float (n,), in [0, 1]."""
        z = ((np.atleast_2d(features) - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def private(self, features: np.ndarray) -> np.ndarray:
        """Per row of ``features``: the mention names a private person (bool (n,))."""
        return self.probability(features) >= self.threshold


#: The writer naming themselves right before a mention: "I am X", "I'm X", "my name is X", "call me X".
_SELF_INTRODUCTION = re.compile(r"(?i:\b(?:i\s+am|i['’]m|my\s+name\s+is|my\s+name['’]s|call\s+me)\s+)$")


def self_introduced(text: str, start: int) -> bool:
    """True when the mention starting at character ``start`` of ``text`` is the writer introducing
    themselves ("I am John Smith, write to ..."): the writer's own name is personal data whoever
    else bears it, so the person head's public-figure reading does not apply."""
    return _SELF_INTRODUCTION.search(text, 0, start) is not None


def name_parts(value: str) -> list[str]:
    """The words of a person's name that identify them on their own: every word of two or more
    letters that is not a title or particle ("Dr. Ana de Souza's" → ["Ana", "Souza"])."""
    words = [w.rstrip("'’").removesuffix("'s").removesuffix("’s") for w in _NAME_WORD.findall(value)]
    return [w for w in words if len(w) >= 2 and w.casefold() not in _TITLES]


def fold_marks(text: str) -> str:
    """``text`` without the combining marks of its precomposed a-z letters, one character for one
    ("Siobhán" → "Siobhan", "żółć" → "zołc"; ł, Greek, Cyrillic and other scripts unchanged), so
    an offset into the result is the same offset into ``text``."""
    return text if text.isascii() else "".join(map(_fold_char, text))


@functools.lru_cache(maxsize=4096)
def _fold_char(c: str) -> str:
    decomposed = unicodedata.normalize("NFD", c)
    if len(decomposed) > 1 and decomposed[0].isascii() and all(map(unicodedata.combining, decomposed[1:])):
        return decomposed[0]
    return c


#: Apostrophes a name is typed with, read as "'" when names are compared ("O’Connor", "O'Connor").
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})


def _searchable(text: str) -> str:
    """``text`` as names are searched in it: :func:`fold_marks`, apostrophes straightened; the
    same length, so offsets carry over."""
    return fold_marks(text).translate(_APOSTROPHES)


def name_keys(value: str) -> list[str]:
    """The :func:`name_parts` of ``value`` as they are compared and searched for: case-folded,
    without accents (:func:`fold_marks`), apostrophes straightened ("O’Connor" → "o'connor"), and
    each part of a hyphenated name also on its own ("Bartholomew Kasprzak-Nowicki" →
    ["bartholomew", "kasprzak-nowicki", "kasprzak", "nowicki"])."""
    keys: list[str] = []
    for part in name_parts(value):
        key = _searchable(part).casefold()
        keys.append(key)
        if "-" in key:
            keys.extend(p for p in key.split("-") if len(p) >= 2 and p not in _TITLES)
    return keys


def person_groups(mentions: Sequence[str]) -> list[list[int]]:
    """Indexes of ``mentions`` grouped by person: two mentions are one person when they share a
    name key (:func:`name_keys`), transitively ("Ana Dias", "Dias", "ana"); a mention
    without a name word is a person of its own. Groups in order of their first mention."""
    parent = list(range(len(mentions)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, mention in enumerate(mentions):
        for key in name_keys(mention):
            j = owner.setdefault(key, i)
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(mentions)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _pattern(keys: Sequence[str], stop_words: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``keys`` (:func:`name_keys`) as a whole word of a
    :func:`_searchable` text, any casing (a possessive "'s" after it stays out of the match), or
    after "the" before a plural "s"/"es", which stays out of the match too ("the Zielinskis'
    door": a family); a key that is a common word (in ``stop_words``: "will", "may") is left
    out, since it cannot be told from the word."""
    words = sorted({k for k in keys if k not in stop_words}, key=len, reverse=True)
    if not words:
        return None
    alternation = "(?i:" + "|".join(map(re.escape, words)) + ")"
    return re.compile(r"(?<![\w'’-])" + alternation + r"(?![\w-])"
                      + r"|(?<=\b[Tt]he )" + alternation + r"(?=e?s(?![\w-]))")


@functools.lru_cache(maxsize=256)
def _names_pattern(names: frozenset[str], stop_words: frozenset[str]) -> re.Pattern[str] | None:
    """:func:`_pattern` of the :func:`name_keys` of ``names`` (None when they have none), memoised:
    a request's texts are all searched for the same names, turn after turn of a conversation."""
    keys = [k for name in sorted(names) for k in name_keys(name)]
    return _pattern(keys, stop_words) if keys else None


def coreferent_spans(text: str, names: Iterable[str], taken: Iterable[tuple[int, int]],
                     stop_words: frozenset[str] = frozenset(), common_words: frozenset[str] = frozenset(),
                     nouns: frozenset[str] = frozenset()) -> list[tuple[int, int]]:
    """``[start, end)`` of every mention in ``text`` of a person named in ``names`` (their
    :func:`name_keys`, whole words, before a possessive or a family's plural too, any casing, with
    or without accents, any apostrophe; keys in ``stop_words`` are not looked for) that overlaps
    none of the ``taken`` offsets and is no common word in use (:func:`_common_use`, with
    ``common_words`` and ``nouns``; pass them empty for a writer who capitalises nothing);
    sorted by start."""
    pattern = _names_pattern(frozenset(names), stop_words)
    if pattern is None:
        return []
    busy = sorted(taken)
    searchable = _searchable(text)
    found = []
    for match in pattern.finditer(searchable):
        start, end = match.span()
        if (not any(a < end and start < b for a, b in busy)
                and not _common_use(searchable, start, end, common_words, nouns)):
            found.append((start, end))
    return found


#: Words before a common noun, never before a person's name ("her rose bushes", "no hope").
_DETERMINERS = frozenset({"a", "an", "the", "her", "his", "my", "your", "our", "their", "its", "no", "some", "any",
                          "this", "that", "these", "those", "every", "each", "another", "such", "what", "which",
                          "whose"})


def _common_use(text: str, start: int, end: int, common_words: frozenset[str], nouns: frozenset[str]) -> bool:
    """Whether the lower-case word ``text[start:end]``, matched as a name, is an English word used as
    one: a verb, adjective or adverb of ``common_words`` ("I hope", "prices rose"), or a noun of
    ``nouns`` after a determiner ("her rose bushes", "left a mark"). A capitalised match never is:
    the writer capitalised it as a name; nor is a lower-case one that is no such word ("nowicki")."""
    word = text[start:end]
    if not word.islower():
        return False
    if word in common_words:
        return True
    before = text[max(0, start - 16):start].split()
    return word in nouns and bool(before) and before[-1].lower() in _DETERMINERS
