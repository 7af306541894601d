"""Conversations judged turn by turn: which history turns already have a verdict.

A chat client resends the whole conversation every turn. A *turn* is a ``user`` message and the
messages after it up to the next ``user`` message; the *current turn* starts at the last ``user``
message and is always judged. A history turn is **settled** when the proxy already refused or
escalated it, known by either signal:

- ``reply``: the turn's first message after the user message is the proxy's own answer to a
  refusal or escalation, i.e. an assistant message whose text (:func:`reply_text`: text and
  ``refusal`` parts alike, as each API sends the answer back) is exactly a Safety policy's
  apology or matches the Compliance policy's escalation notice (``{domain}``,
  ``{escalation_id}`` filled in);
- ``recorded``: the engine recorded a refuse/escalate verdict for the user message's text
  (content hash, :class:`~proxy.guardrails.cache.ScanCache`) when it was the current turn.

A settled turn keeps its earlier verdict: it is not judged again and it is **withheld** from the
model together with the proxy's reply (system/developer messages inside it stay) (the model never saw it, and must not see it later). A
client can fabricate either signal only to withhold its own text from the model, so the rule
opens no bypass; a history turn with neither signal (a prefilled or many-shot conversation) is
judged like any client text. Pure functions: no detector calls, no I/O.
"""

from __future__ import annotations

import re
import string
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from proxy.guardrails.messages import screened_text

__all__ = ["Settled", "ReplyMatcher", "current_turn_start", "open_question", "reply_text", "settled_turns",
           "withheld_indexes"]

Message = dict[str, Any]


@dataclass(frozen=True)
class Settled:
    """A settled history turn: messages ``[start, end)`` (indexes in the request), the earlier
    ``verdict`` (``"refuse"`` or ``"escalate"``) and the ``signal`` that told it (``"reply"`` or
    ``"recorded"``)."""

    start: int
    end: int
    verdict: str
    signal: str

    def evidence(self) -> dict[str, Any]:
        """The receipt form: ``{"messages": [start, end], "verdict", "signal"}`` (no text)."""
        return {"messages": [self.start, self.end], "verdict": self.verdict, "signal": self.signal}


def _template_pattern(template: str, fields: dict[str, str]) -> re.Pattern[str]:
    """A regex matching ``template`` (str.format syntax) with each ``{field}`` as ``fields[field]``."""
    parts = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(fields.get(field, r".+?"))
    return re.compile("".join(parts))


class ReplyMatcher:
    """Recognises the proxy's own answers to a refused or escalated turn.

    Args:
        apologies: the Safety policies' apology texts (a refusal's whole content).
        notices: the Compliance policies' escalation notice templates (``{domain}``,
            ``{escalation_id}`` placeholders, as :class:`~proxy.guardrails.schema.CompliancePolicy`).
    """

    def __init__(self, apologies: Iterable[str], notices: Iterable[str]) -> None:
        self._apologies = {a.strip() for a in apologies if a.strip()}
        fields = {"domain": r"[A-Za-z_\-]+", "escalation_id": r"esc_[0-9a-f]+"}
        self._notices = [_template_pattern(n.strip(), fields) for n in notices if n.strip()]

    def verdict(self, message: Message) -> str | None:
        """``"refuse"`` / ``"escalate"`` when ``message`` is the proxy's reply to one, else None."""
        if message.get("role") != "assistant" or message.get("tool_calls"):
            return None
        text = reply_text(message).strip()
        if text in self._apologies:
            return "refuse"
        if any(p.fullmatch(text) for p in self._notices):
            return "escalate"
        return None


def reply_text(message: Message) -> str:
    """The text of an assistant reply as a client sends it back: its string content, or its
    ``text`` and ``refusal`` content parts joined by newlines (a Responses API refusal comes back
    as a ``refusal`` part, ``input += response.output``), then chat's ``refusal`` field."""
    content = message.get("content")
    parts: list[Any] = [content] if isinstance(content, str) else [
        part.get(part.get("type")) for part in (content if isinstance(content, list) else [])
        if isinstance(part, dict) and part.get("type") in ("text", "refusal")]
    parts.append(message.get("refusal"))
    return "\n".join(p for p in parts if isinstance(p, str) and p)


def current_turn_start(messages: list[Message]) -> int:
    """Index of the last ``user`` message (the current turn's start); 0 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return 0


def _history_turns(messages: list[Message]) -> list[tuple[int, int]]:
    """``[start, end)`` of every history turn (a user message up to the next one), oldest first."""
    current = current_turn_start(messages)
    starts = [i for i in range(current) if messages[i].get("role") == "user"]
    return [(s, e) for s, e in zip(starts, [*starts[1:], current])]


def settled_turns(messages: list[Message], replies: ReplyMatcher,
                  recorded: Callable[[str], str | None]) -> list[Settled]:
    """The settled history turns of ``messages`` (module docstring), oldest first.

    ``recorded(text)`` returns the verdict recorded for a user message's :func:`screened_text`
    (None when none). The current turn is never settled.
    """
    settled = []
    for start, end in _history_turns(messages):
        reply = replies.verdict(messages[start + 1]) if start + 1 < end else None
        if reply is not None:
            settled.append(Settled(start, end, reply, "reply"))
            continue
        verdict = recorded(screened_text(messages[start]))
        if verdict in ("refuse", "escalate"):
            settled.append(Settled(start, end, verdict, "recorded"))
    return settled


def withheld_indexes(messages: list[Message], settled: list[Settled]) -> set[int]:
    """The indexes of the messages withheld from the model: every message inside a settled turn
    except ``system`` / ``developer`` instructions (they stay, and are judged like any text)."""
    return {i for s in settled for i in range(s.start, s.end)
            if messages[i].get("role") not in ("system", "developer")}


def open_question(messages: list[Message], withheld: AbstractSet[int] = frozenset()) -> list[int]:
    """The indexes of the messages that make up the request's open question, which Compliance
    judges (docs/guardrails.md "Compliance"), the last ``user`` message first:

    - the last ``user`` message, and every earlier ``user`` message no ``assistant`` message
      answers (those after the last assistant message before it: a question followed by
      "Thanks!" or "answer my question above" is still open);
    - every ``system`` / ``developer`` message (instructions, a Responses request's
      ``instructions`` among them);
    - the ``tool`` / ``function`` results after the last ``user`` message.

    A history turn that was answered is not open: it kept the verdict it had when it was the
    current turn. Indexes in ``withheld`` (settled turns, :func:`withheld_indexes`) are left out.
    """
    current = current_turn_start(messages)
    has_user = bool(messages) and messages[current].get("role") == "user"
    chosen = [current] if has_user else []
    i = current - 1
    while has_user and i >= 0 and messages[i].get("role") != "assistant":
        if messages[i].get("role") == "user":
            chosen.append(i)
        i -= 1
    chosen += [i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")]
    chosen += [i for i in range(current + 1, len(messages)) if messages[i].get("role") in ("tool", "function")]
    return [i for i in dict.fromkeys(chosen) if i not in withheld]
