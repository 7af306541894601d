"""The conversations file of ``sonate eval conversation``: JSON Lines, one conversation a line.

Fields follow Fair Forge's ``Dataset`` / ``Batch`` (https://github.com/Alquimia-ai/fair-forge,
``fair_forge/schemas``); ``attributes`` and ``candidates`` are this project's additions::

    {"session_id": "s1", "assistant_id": "support-bot", "language": "en",
     "context": "Refunds are possible within 30 days ...",          # optional
     "attributes": {"gender": "female", "age": "older"},            # optional: protected attributes
     "conversation": [
        {"qa_id": "q1", "query": "Can I get a refund?",
         "assistant": "Yes, within 30 days ...",                    # optional when replayed
         "ground_truth_assistant": "Yes: refunds within 30 days.",  # optional
         "candidates": ["answer A", "answer B", "answer C"]}        # optional: BestOf
     ]}

Raises :class:`~proxy.evaluation.data.DataError` naming the file and line for anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, overload

from proxy.evaluation.data import DataError, read_jsonl

__all__ = ["HURTLEX_COLUMNS", "Conversation", "Turn", "load_conversations", "load_hurtlex", "parse_conversation"]


@dataclass(frozen=True)
class Turn:
    """One exchange: the user's ``query``, the ``assistant`` answer ("" when not recorded yet),
    the optional ``ground_truth_assistant``, BestOf ``candidates`` and, after a replay through
    the proxy, the ``receipt_id`` of the answer's final receipt and the guardrail ``action``."""

    qa_id: str
    query: str
    assistant: str = ""
    ground_truth_assistant: str | None = None
    candidates: tuple[str, ...] = ()
    receipt_id: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class Conversation:
    """A session: its turns in order, optional ``context`` and protected ``attributes``."""

    session_id: str
    turns: tuple[Turn, ...]
    assistant_id: str | None = None
    language: str | None = None
    context: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def with_turns(self, turns: list[Turn]) -> "Conversation":
        """A copy with ``turns`` replaced (after a replay)."""
        return replace(self, turns=tuple(turns))


@overload
def _text(row: dict[str, Any], name: str, where: str, required: Literal[True]) -> str: ...
@overload
def _text(row: dict[str, Any], name: str, where: str, required: bool = False) -> str | None: ...
def _text(row: dict[str, Any], name: str, where: str, required: bool = False) -> str | None:
    value = row.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataError(f"{where}: {name!r} must be a {'non-empty ' if required else ''}string")
    return value


def _turn(row: Any, where: str, number: int) -> Turn:
    if not isinstance(row, dict):
        raise DataError(f"{where}: conversation[{number}] must be an object")
    here = f"{where}: conversation[{number}]"
    candidates = row.get("candidates") or []
    if not isinstance(candidates, list) or not all(isinstance(c, str) and c.strip() for c in candidates):
        raise DataError(f"{here}: 'candidates' must be a list of non-empty strings")
    return Turn(qa_id=str(row.get("qa_id") or f"q{number + 1}"), query=_text(row, "query", here, True),
                assistant=_text(row, "assistant", here) or "",
                ground_truth_assistant=_text(row, "ground_truth_assistant", here),
                candidates=tuple(candidates))


def parse_conversation(row: dict[str, Any], where: str) -> Conversation:
    """One conversation from its JSON object; ``where`` (``file:line``) prefixes errors. Raises DataError."""
    turns = row.get("conversation")
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: 'conversation' must be a non-empty list of turns")
    attributes = row.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in attributes.items()):
        raise DataError(f"{where}: 'attributes' must map attribute names to group names (strings)")
    parsed = tuple(_turn(t, where, i) for i, t in enumerate(turns))
    if len({t.qa_id for t in parsed}) != len(parsed):
        raise DataError(f"{where}: qa_id values repeat within the conversation")
    return Conversation(session_id=_text(row, "session_id", where, True), turns=parsed,
                        assistant_id=_text(row, "assistant_id", where), language=_text(row, "language", where),
                        context=_text(row, "context", where), attributes=dict(attributes))


def load_conversations(path: Path) -> list[Conversation]:
    """Every conversation of the JSONL file ``path`` (session ids unique). Raises DataError."""
    conversations, seen = [], set()
    for number, row in enumerate(read_jsonl(path), 1):
        conversation = parse_conversation(row, f"{path}: conversation {number}")
        if conversation.session_id in seen:
            raise DataError(f"{path}: conversation {number}: session_id {conversation.session_id!r} repeats")
        seen.add(conversation.session_id)
        conversations.append(conversation)
    if not conversations:
        raise DataError(f"{path}: no conversations")
    return conversations


#: The columns of a HurtLex lexicon file (Bassignana, Basile & Patti 2018, "Hurtlex: A
#: Multilingual Lexicon of Words to Hurt", CLiC-it; https://github.com/valeriobasile/hurtlex).
HURTLEX_COLUMNS = ("id", "pos", "category", "stereotype", "lemma", "level")


def load_hurtlex(path: Path) -> dict[str, str]:
    """Lower-cased lemma → HurtLex category of a lexicon in HurtLex's TSV format (header line
    :data:`HURTLEX_COLUMNS`, tab-separated). Raises DataError naming the file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the lexicon ({getattr(exc, 'strerror', None) or exc})") from None
    if not lines or tuple(c.strip() for c in lines[0].split("\t")) != HURTLEX_COLUMNS:
        raise DataError(f"{path}:1: a HurtLex lexicon starts with the header {' '.join(HURTLEX_COLUMNS)} (tab-separated)")
    lemmas: dict[str, str] = {}
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(HURTLEX_COLUMNS) or not cells[4].strip():
            raise DataError(f"{path}:{number}: expected {len(HURTLEX_COLUMNS)} tab-separated columns with a lemma")
        lemmas[cells[4].strip().lower()] = cells[2].strip()
    if not lemmas:
        raise DataError(f"{path}: the lexicon has no lemmas")
    return lemmas
