"""presidio's lemma context enhancer with a logarithmic token lookup (issue 15, bounded work).

presidio's ``LemmaContextAwareEnhancer._find_index_of_match_token`` walks the token list from the
start for every recognizer result, so a window with R results and T tokens costs R x T steps
(``"2020-01-02 " * 550`` in one 6 KB text: 0.6 s of context lookups). :class:`IndexedContextEnhancer`
answers the same question with a binary search over the tokens' end offsets, computed once per
analysed text: O(T + R log T), same token, same context words, same scores.
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
