"""Conversational quality and context adherence (Fair Forge), from judge verdicts.

Each score comes from a versioned judge template (``proxy/evaluation/judges/<id>.yaml``; the
judge answers ``{"score", "reasoning"}``, temperature 0):

- memory (``memory-v1``, 0–10): does the answer use what the user said earlier in the session?
- language adaptation (``language-adaptation-v1``, 0–1): same language and register as the user.
- Grice's cooperative principle (Grice 1975, "Logic and Conversation"): one verdict per maxim of
  :data:`MAXIMS` (``grice-v1`` with ``maxim``), each 0–1; G = the mean of the four.
- sensibleness and specificity (Adiwardana et al. 2020, "Towards a Human-like Open-Domain
  Chatbot", arXiv:2001.09977): S and Sp each 0–1 (``ssa-v1`` with ``criterion``); SSA = (S + Sp)/2.
- context adherence (``context-adherence-v1``, 0–1): the answer against the context and the ground
  truth; the judge's reasoning is stored with the score.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["MAXIMS", "SSA_CRITERIA", "grice", "memory", "ssa", "unit_score"]

MAXIMS = ("quantity", "quality", "relation", "manner")
SSA_CRITERIA = ("sensibleness", "specificity")


def unit_score(value: float, top: float = 1.0) -> float:
    """``value`` checked to lie in [0, top]. Raises ValueError otherwise."""
    if not 0.0 <= value <= top:
        raise ValueError(f"judge score {value!r} outside [0, {top}]")
    return float(value)


def memory(score: float) -> float:
    """The memory score on its 0–10 scale (checked)."""
    return unit_score(score, 10.0)


def grice(scores: Mapping[str, float]) -> float:
    """G = (quantity + quality + relation + manner) / 4, each in [0, 1]. Raises ValueError when
    a maxim is missing or out of range."""
    return sum(unit_score(scores[m]) for m in MAXIMS) / len(MAXIMS)


def ssa(sensibleness: float, specificity: float) -> float:
    """SSA = (S + Sp) / 2, each in [0, 1]."""
    return (unit_score(sensibleness) + unit_score(specificity)) / 2
