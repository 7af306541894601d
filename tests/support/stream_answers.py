"""Streamed answers that hold a direct identifier near a window cut (privacy on output).

Shared by the unit sweep over every offset (tests/unit/guardrails/test_stream_output.py) and the
few of its streams sent through the proxy (tests/e2e/test_stream_privacy.py).
"""

from __future__ import annotations

#: (label written before it, identifier, parts none of which may reach the client)
IDENTIFIERS = {
    "email": ("write to ", "jane.doe@example.com", ["jane.doe", "example.com"]),
    "iban": ("the IBAN is ", "GB82 WEST 1234 5698 7654 32", ["GB82", "WEST", "1234", "5698", "7654"]),
    "card": ("the card number is ", "4111 1111 1111 1111", ["4111", "1111"]),
    "phone": ("call me on ", "020 7946 0958", ["7946", "0958"]),
    "ssn": ("his SSN is ", "536-22-8726", ["536-22", "8726"]),
}
#: Sentence-free prose (so the first window closes at the size cap), free of every part above.
FILLER = "the quick brown fox jumps over the lazy dog and keeps running along the river bank " * 8


def answer_with(label: str, identifier: str, offset: int) -> str:
    """Filler words, ``label``, then ``identifier`` starting at character ``offset``, then more filler."""
    before = FILLER[:offset - len(label)].rsplit(" ", 1)[0] + " "
    answer = before.ljust(offset - len(label)) + label + identifier + " is what you need. " + FILLER[:100]
    assert answer.index(identifier) == offset
    return answer
