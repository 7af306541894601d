"""presidio's lemma context enhancer with a logarithmic token lookup (bounded work).

presidio's ``LemmaContextAwareEnhancer._find_index_of_match_token`` walks the token list from the
start for every recognizer result, so a window with R results and T tokens costs R x T steps
(``"2020-01-02 " * 550`` in one 6 KB text: 0.6 s of context lookups). :class:`IndexedContextEnhancer`
answers the same question with a binary search over the tokens' end offsets, computed once per
analysed text: O(T + R log T), same token, same context words, same scores.

:class:`LemmaBound`: every lemma the pipeline could give a text's tokens, from the tokens
alone, so a general question can be screened at the highest context scores any parse could give
without parsing it (:meth:`~proxy.guardrails.detectors.pii.PiiDetector._general_question`).
"""

from __future__ import annotations

from bisect import bisect_right

from presidio_analyzer.context_aware_enhancers import LemmaContextAwareEnhancer


def first_token_ending_after(ends: list[int], start: int) -> int:
    """Index of the first token whose end offset (exclusive) is greater than ``start``.

    ``ends`` are the tokens' end character offsets, non-decreasing (spaCy's tokens do not
    overlap). Returns ``len(ends)`` when no token ends after ``start``.
    """
    return bisect_right(ends, start)


class IndexedContextEnhancer(LemmaContextAwareEnhancer):
    """``LemmaContextAwareEnhancer`` (same options) whose match-to-token lookup is a bisection.

    presidio's lookup returns the first token ``i`` with ``tokens_indices[i] == start`` or
    ``start < tokens_indices[i] + len(tokens[i])``; since every spaCy token has at least one
    character, the first condition implies the second, so ``i`` is the first token ending after
    ``start``. Raises ValueError, as presidio's, when there is none.
    One instance per analyzer (per thread, :class:`~.pii.PiiDetector`): the offsets of the text
    being enhanced are kept on the instance during the call.
    """

    _ends: list[int] | None = None

    def enhance_using_context(self, text, raw_results, nlp_artifacts, recognizers, context=None):
        """presidio's method, with the tokens' end offsets computed once for this text."""
        self._ends = None
        if nlp_artifacts is not None and nlp_artifacts.tokens is not None:
            self._ends = [i + len(t) for i, t in zip(nlp_artifacts.tokens_indices, nlp_artifacts.tokens)]
        try:
            return super().enhance_using_context(text, raw_results, nlp_artifacts, recognizers, context)
        finally:
            self._ends = None

    def _find_index_of_match_token(self, word: str, start: int, tokens, tokens_indices) -> int:
        ends = self._ends
        if ends is None:  # called outside enhance_using_context: presidio's linear walk
            return super()._find_index_of_match_token(word, start, tokens, tokens_indices)
        index = first_token_ending_after(ends, start)
        if index >= len(ends):
            raise ValueError(f"Did not find word '{word}' in the list of tokens although it is expected to be found")
        return index


class LemmaBound:
    """Every lemma a spaCy pipeline could give the tokens of a text, from its tokens alone (no tagger).

    Built from the pipeline's ``lemmatizer`` (spaCy's rule lemmatizer, ``mode == "rule"``) and
    ``attribute_ruler``. :meth:`lemmas` bounds what presidio's context enhancer could read from the
    full pipeline's lemmas: for spaCy's ``Lemmatizer.rule_lemmatize`` a token's lemma is its text
    (lower-cased, or as written), an exception listed for its lower-cased text under some part of
    speech (``lemma_exc``), or its lower-cased text with one suffix rule of some part of speech
    applied (``lemma_rules``); a lemma the ``attribute_ruler`` sets (kept by the lemmatizer, which
    does not overwrite) is included when each token of its pattern may match a token of the text by
    its ``LOWER`` (tags are not checked; a ``REGEX`` matches any token).

    Raises ValueError when the pipeline has another kind of lemmatizer (nothing to bound it by).
    """

    def __init__(self, nlp) -> None:
        lemmatizer = nlp.get_pipe("lemmatizer") if "lemmatizer" in nlp.pipe_names else None
        if lemmatizer is None or getattr(lemmatizer, "mode", None) != "rule":
            raise ValueError("only spaCy's rule lemmatizer can be bounded")
        rules = lemmatizer.lookups.get_table("lemma_rules", {})
        self._rules = sorted({(old, new) for by_pos in rules.values() for old, new in by_pos})
        self._exceptions: dict[str, set[str]] = {}
        for by_pos in lemmatizer.lookups.get_table("lemma_exc", {}).values():
            for word, forms in by_pos.items():
                self._exceptions.setdefault(word, set()).update(forms)
        #: (per token of the pattern: the lower-cased words it may be, None for any; the lemma set)
        self._ruled: list[tuple[list[frozenset[str] | None], str]] = []
        if "attribute_ruler" in nlp.pipe_names:
            for pattern in nlp.get_pipe("attribute_ruler").patterns:
                lemma = pattern.get("attrs", {}).get("LEMMA")
                if lemma is not None:
                    self._ruled += [([_lower_words(t) for t in sequence], lemma) for sequence in pattern["patterns"]]

    def word(self, lower: str) -> set[str]:
        """The lemmas the rule lemmatizer could give a token whose lower-cased text is ``lower``."""
        forms = {lower, *self._exceptions.get(lower, ())}
        forms.update(lower[:len(lower) - len(old)] + new for old, new in self._rules if lower.endswith(old))
        return forms

    def lemmas(self, doc) -> list[str]:
        """Lower-cased lemmas any token of the tokenised ``doc`` could get (sorted, no duplicates)."""
        lowers = {t.lower_ for t in doc}
        forms = {f.lower() for lower in lowers for f in self.word(lower)}
        forms.update(lemma.lower() for tokens, lemma in self._ruled
                     if all(words is None or words & lowers for words in tokens))
        return sorted(forms)


def _lower_words(token_pattern: dict) -> frozenset[str] | None:
    """The lower-cased words a Matcher token pattern's ``LOWER`` allows (a string or ``{"IN": [...]}``),
    None when any word may match it (no ``LOWER``, or a ``REGEX`` or other predicate)."""
    value = token_pattern.get("LOWER")
    if isinstance(value, str):
        return frozenset([value.lower()])
    if isinstance(value, dict) and set(value) == {"IN"}:
        return frozenset(str(v).lower() for v in value["IN"])
    return None
