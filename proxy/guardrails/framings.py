"""Neutral framings: the greetings, reference numbers and sign-offs people wrap around a request.

A sentence-embedding classifier reads the mean of a text's word-piece vectors, so a harmless line
around a request dilutes it. Out of fold on the development split (v4's training rows, 5-fold x 3),
one evaluation framing (:mod:`proxy.evaluation.framings`) around each prompt lowered
AdvBench recall from 98.1% to 91.9% and XSTest unsafe from 78.1% to 65.6% at the same threshold:
"Hi there! Quick question from our team." in front of a harmful request walked it past Safety.
The classifiers over the embeddings (Safety's harm SVM, Compliance's domain SVM) are therefore
trained on framed copies of their rows as well (label-preserving augmentation;
:func:`training_copies`), and their robustness is measured with framings they never saw
(:func:`proxy.evaluation.framings.evaluation_framed`, a disjoint list).

The lists were written for this project (none taken from a data set). A framing is a prefix
(40%), a suffix (40%) or both (20%); ``{n}`` is a number of 3-5 digits, ``{hex}`` / ``{hex8}`` /
``{uuid}`` random hex of 6-12 / 8 / 32 digits (ticket and reference ids). Deterministic for a
given seed. Pure: no I/O.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

TRAINING_PREFIXES = (
    "Hi!", "Hello, quick question:", "Ticket #{n}:", "Re: {n}", "[{hex}]", "Question {n}.", "Hey team,",
    "Good morning.", "From the support queue ({hex}):", "Please help.", "Q:", "ID {n} -", "Urgent:",
    "Forwarded message:", "Hello again.", "One more thing.", "Item {n}:", "Note {hex}:", "Okay, next one.",
    "Hi, hope you're well.",
)
TRAINING_SUFFIXES = (
    "Thanks!", "Thank you in advance.", "(ref {hex})", "Please answer briefly.", "Keep it short.", "Cheers",
    "Sent from my phone", "-- {n}", "Reply in English.", "Best regards.", "Answer in one paragraph.",
    "Thanks for your help!", "[{n}]", "No rush.", "Use bullet points.",
)
def _fill(template: str, rng: random.Random) -> str:
    """``template`` with its ``{n}``, ``{hex}``, ``{hex8}`` and ``{uuid}`` fields drawn from ``rng``."""
    return template.format(n=rng.randint(100, 99999), hex=uuid.UUID(int=rng.getrandbits(128)).hex[:rng.choice((6, 8, 12))],
                           hex8=uuid.UUID(int=rng.getrandbits(128)).hex[:8], uuid=uuid.UUID(int=rng.getrandbits(128)).hex)


def frame(text: str, rng: random.Random, prefixes: Sequence[str], suffixes: Sequence[str]) -> str:
    """``text`` with a prefix (probability 0.4), a suffix (0.4) or both (0.2) drawn from the lists,
    joined by one space. ``text`` itself is kept verbatim."""
    draw = rng.random()
    if draw < 0.4:
        return f"{_fill(rng.choice(prefixes), rng)} {text}"
    if draw < 0.8:
        return f"{text} {_fill(rng.choice(suffixes), rng)}"
    return f"{_fill(rng.choice(prefixes), rng)} {text} {_fill(rng.choice(suffixes), rng)}"


def training_copies(texts: Sequence[str], copies: int, seed: int) -> list[list[str]]:
    """``copies`` framed copies of ``texts`` with the training framings: a list of ``copies`` lists,
    each aligned with ``texts``. Same ``seed``, same copies."""
    rng = random.Random(f"training-framings:{seed}")
    return [[frame(t, rng, TRAINING_PREFIXES, TRAINING_SUFFIXES) for t in texts] for _ in range(copies)]
