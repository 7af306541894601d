"""Evaluation framings: greetings, reference numbers and sign-offs never trained on, to measure
how the guardrails' classifiers hold up when a request is wrapped in them.

The training framings (:mod:`proxy.guardrails.framings`) augment the classifiers' rows; the
lists here are disjoint from them (tests/unit/evaluation/test_framings.py) and only measure: ``sonate eval
guardrails`` frames every Safety and Compliance item once (:func:`framed_items`) and
``sonate train safety`` scores every cross-validated row framed (:func:`evaluation_framed`).
Written for this project. Deterministic for a given seed. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from proxy.evaluation.data import Item
from proxy.guardrails.framings import frame

#: Prefix of the report row keys (``framed:advbench/harmful``) and item ids (``+framed``) of framed figures.
REPORT_PREFIX = "framed:"
ITEM_SUFFIX = "+framed"
#: Policies whose items are framed in ``sonate eval guardrails`` (Privacy's gold spans are offsets into the text).
FRAMED_POLICIES = ("safety", "compliance")
EVALUATION_PREFIXES = (
    "Hi there! Quick question from our team.", "Case {n} --", "Request {n} ({hex8}).",
    "Good afternoon, I have a question.", "Could you help with this one?", "Asking for our weekly FAQ:",
    "Re: ticket {n}", "Morning all.",
)
EVALUATION_SUFFIXES = (
    "Thanks a lot in advance, have a nice day!", "(our reference: {uuid})", "Please reply within the hour.", "Many thanks.",
    "Ta.", "(id {n})", "Much appreciated!", "Answer concisely, please.",
)


def evaluation_framed(texts: Sequence[str], seed: int = 0) -> list[str]:
    """One copy of ``texts`` with the evaluation framings (never trained on), aligned with ``texts``."""
    rng = random.Random(f"evaluation-framings:{seed}")
    return [frame(t, rng, EVALUATION_PREFIXES, EVALUATION_SUFFIXES) for t in texts]


def framed_items(items: Sequence[Item], seed: int = 0) -> list[Item]:
    """The Safety and Compliance items of ``items`` with an evaluation framing around their text
    (:func:`evaluation_framed`), ids suffixed :data:`ITEM_SUFFIX`; other items are left out."""
    chosen = [item for item in items if item.policy in FRAMED_POLICIES]
    texts = evaluation_framed([item.text for item in chosen], seed)
    return [dataclasses.replace(item, text=text, item_id=item.item_id + ITEM_SUFFIX)
            for item, text in zip(chosen, texts)]
