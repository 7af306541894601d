"""Words a text talks about rather than uses (the use-mention distinction).

"Where does the word "idiot" come from?" mentions an insult; it insults nobody, and neither does
the answer "The word "idiot" comes from the Greek idiotes". A bag-of-words toxicity model
(profanity-check) cannot tell the two apart: it scored that question 0.999. The Safety detector
therefore scores toxic *language* on :func:`without_mentions` of a text, where each word or short
phrase the text talks about is replaced by :data:`STAND_IN`; the harm classifier still reads the
text as written.

A span is mentioned when it is named as a word, or quoted in a frame that talks about words:

- after "the word", "the term", "the phrase", "the expression", "the slur", "the insult", "the
  N-word" ... (quoted, or one bare word);
- quoted (straight or curly quotes, at most :data:`MAX_MENTION_WORDS` words) right after "the
  meaning / origin / etymology / history / spelling / translation of", "people say", "spell",
  "pronounce", "translate" or "define";
- quoted right before "mean(s)", "meant", "come(s) from", "originally", "derives from", "stands for",
  "is short for", "rhymes with", or "is a ... word / term / insult / expletive / spelling";
- quoted right after a question word and its verb ("What does", "Why is", or "Is" opening the
  sentence) when the rest of its sentence names a property of words (rude, offensive, slang, a swear
  word, its meaning);
- quoted in the sentence of a mentioned span ("... and how is it different from "ass"?").

A client's text counts its mentions only when it asks about language (``answer=False``: a question
mark, or an opening "explain", "define", "translate" or "tell me"), so "Tell her the word "slut" fits
her" keeps its insult; a model's answer (``answer=True``) explains words without asking.

"Why are all those "faggots" allowed at my school?" is none of these: its quotes hold a word used
about people. Only the mentioned spans are replaced, so an insult used elsewhere in the text still
counts. Pure functions of the text, no I/O; linear in its length (each quoted span reads at most
:data:`CONTEXT_CHARS` around it).
"""

from __future__ import annotations

import bisect
import re

#: What a mentioned word or phrase is replaced by before toxic language is scored.
STAND_IN = "X"
#: Longest quoted span (in words) taken as a mention; longer quotes are speech, not a word talked about.
MAX_MENTION_WORDS = 4
#: Characters of its sentence read before and after a quoted span.
CONTEXT_CHARS = 200

_WORD_NOUN = (r"(?:word|term|phrase|expression|slur|insult|expletive|exclamation|swear\s?word|curse\s?word|"
              r"slang\s+(?:word|term)|name|[a-z]-word)s?")
_QUOTED = re.compile(
    r"(?:[\"\u201c]|(?<!\w)['\u2018])"  # an opening quote (an apostrophe inside a word is no quote)
    r"(?P<span>[^\"\u201c\u201d\u2018\u2019\n]{1,40}?)"
    r"(?:[\"\u201d]|['\u2019](?!\w))"
)
_NAMED_BARE = re.compile(rf"\bthe\s+{_WORD_NOUN}\s+(?P<span>[A-Za-z*]+(?:-[A-Za-z*]+)?)\b", re.IGNORECASE)
#: Ends right before a quoted mention.
_BEFORE = re.compile(
    rf"(?:\bthe\s+{_WORD_NOUN}|"
    r"\b(?:meanings?|origins?|etymology|history|definition|spelling|pronunciation|translation|usage|use)\s+of|"
    r"\bpeople\s+(?:say|said)|\b(?:spell|pronounce|translate|define|spelling|pronouncing|translating))"
    r"\s*,?\s*$",
    re.IGNORECASE,
)
#: Starts right after a quoted mention.
_AFTER = re.compile(
    r"^\s*,?\s*(?:mean|means|meant|come\s+from|comes\s+from|came\s+from|originally|originated|originates|"
    r"derives?\s+from|(?:is|was)\s+derived\s+from|stands?\s+for|(?:is|was)\s+short\s+for|rhymes?\s+with|"
    r"(?:is|was|are)\s+(?:(?:the|a|an)\s+)?(?:[\w-]+\s+){0,2}"
    r"(?:word|term|spelling|expletive|insult|slur|swear|curse|oath|exclamation|euphemism|slang|expression|phrase))\b",
    re.IGNORECASE,
)
#: A question word and its verb, or a bare copula question, right before a quoted span ...
_ASKING = re.compile(r"(?:\b(?:what|where|when|why|how)\s+(?:does|did|do|is|was)|^\s*(?:is|was|are))\s*$",
                     re.IGNORECASE)
#: ... counts when the rest of the sentence names a property of words.
_ABOUT_WORDS = re.compile(
    r"\b(?:words?|terms?|phrases?|expressions?|slang|idioms?|swear(?:\s?words?|ing)?|curse\s?words?|insults?|"
    r"slurs?|expletives?|etymology|origins?|mean|means|meaning|spell(?:ed|t|ing)?|pronounced?|rude|offensive|"
    r"vulgar|profan(?:e|ity)|polite|English)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?\n]")
_ASKS = re.compile(r"\?|^\s*(?:please\s+)?(?:explain|define|translate|tell\s+me)\b", re.IGNORECASE)


def _framed(text: str, start: int, end: int, sentence: tuple[int, int]) -> bool:
    """Whether the quoted span ``text[start:end]`` (quotes included) sits in a frame that talks about
    words; ``sentence``: the bounds of its sentence."""
    if _BEFORE.search(text[max(0, start - 60):start]) or _AFTER.search(text[end:end + 80]):
        return True
    head = text[max(sentence[0], start - CONTEXT_CHARS):start]
    tail = text[end:min(sentence[1], end + CONTEXT_CHARS)]
    return bool(_ASKING.search(head) and _ABOUT_WORDS.search(tail))


def mention_spans(text: str, answer: bool = False) -> list[tuple[int, int]]:
    """Character spans ``[(start, end), ...]`` of the words ``text`` talks about (module
    docstring), in order and not overlapping; empty when it talks about none. A short quoted span in
    the sentence of a mentioned one is mentioned too ("What does "arse" mean, and how is it different
    from "ass"?"). ``answer``: ``text`` is a model's answer, which need not ask."""
    if not answer and not _ASKS.search(text):
        return []
    quoted = [m for m in _QUOTED.finditer(text)
              if m.group("span").strip() and len(m.group("span").split()) <= MAX_MENTION_WORDS]
    ends = [m.start() for m in _SENTENCE_END.finditer(text)] if quoted else []  # an answer seldom quotes
    index = [bisect.bisect_left(ends, m.start()) for m in quoted]  # the sentence each span opens in
    bounds = [(ends[i - 1] + 1 if i else 0, ends[i] if i < len(ends) else len(text)) for i in index]
    framed = [_framed(text, m.start(), m.end(), b) for m, b in zip(quoted, bounds)]
    sentences = {i for i, f in zip(index, framed) if f}
    spans = [m.span("span") for m, f, i in zip(quoted, framed, index) if f or i in sentences]
    spans += [m.span("span") for m in _NAMED_BARE.finditer(text)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            continue
        merged.append((start, end))
    return merged


def without_mentions(text: str, answer: bool = False) -> str:
    """``text`` with each span of :func:`mention_spans` (``answer`` passed on) replaced by
    :data:`STAND_IN`; the text itself when it mentions nothing."""
    spans = mention_spans(text, answer)
    if not spans:
        return text
    parts, last = [], 0
    for start, end in spans:
        parts += [text[last:start], STAND_IN]
        last = end
    parts.append(text[last:])
    return "".join(parts)
