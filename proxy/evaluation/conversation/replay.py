"""The proxy's own traffic: recorded queries replayed through a running proxy.

"Over the proxy's own traffic" means: each conversation's queries are sent, turn by turn, through
a running Sonate proxy (``--proxy``), so every answer that is evaluated is an answer the proxy
screened, with the receipt that proves what was sent and answered. The conversation's
``context`` goes first as the system message; each turn sends the history so far (earlier
queries and the answers the proxy returned) plus the new query; the recorded ``assistant`` text,
if any, is replaced by the proxy's answer. Each turn keeps the ``x-sonate-receipt-id`` and
``x-sonate-guardrail-action`` headers (``GET /v1/receipts/{id}`` shows the receipt).

Retry policy: that of :mod:`proxy.evaluation.client` (none; one request per turn).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence, cast

from proxy.evaluation.client import ProxyClient, ProxyStatusError
from proxy.evaluation.conversation.data import Conversation, Turn

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

__all__ = ["ConversationClient", "replay"]


class ConversationClient(ProxyClient):
    """A :class:`ProxyClient` that sends whole conversations (:meth:`chat`)."""

    def chat(self, messages: list[dict[str, str]]) -> tuple[str, str | None, str | None]:
        """(answer text, receipt id, guardrail action) of one chat request. Raises ProxyError."""
        try:
            # openai types messages as per-role TypedDicts; ours are the same {"role", "content"} dicts
            raw = self._chat.chat.completions.with_raw_response.create(
                model=self.model, messages=cast("list[ChatCompletionMessageParam]", messages))
            completion = raw.parse()
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from None
        choice = completion.choices[0] if completion.choices else None
        return ((choice.message.content if choice else None) or "", raw.headers.get("x-sonate-receipt-id"),
                raw.headers.get("x-sonate-guardrail-action"))


def _replay_one(client: ConversationClient, conversation: Conversation) -> Conversation:
    messages: list[dict[str, Any]] = [{"role": "system", "content": conversation.context}] if conversation.context else []
    turns = []
    for turn in conversation.turns:
        messages.append({"role": "user", "content": turn.query})
        try:
            answer, receipt_id, action = client.chat(messages)
        except ProxyStatusError as exc:  # a refused request (4xx) is an answer the proxy gave: keep it
            if exc.status >= 500 or exc.status in (401, 404):
                raise
            answer, receipt_id, action = "", None, f"http-{exc.status}"
        messages.append({"role": "assistant", "content": answer})
        turns.append(Turn(turn.qa_id, turn.query, answer, turn.ground_truth_assistant, turn.candidates,
                          receipt_id, action))
    return conversation.with_turns(turns)


def replay(client: ConversationClient, conversations: Sequence[Conversation], progress: bool = True) -> list[Conversation]:
    """Every conversation replayed through the proxy, in order (one request per turn). Raises ProxyError."""
    from tqdm import tqdm

    client.check()
    return [_replay_one(client, c) for c in tqdm(conversations, desc="replaying through the proxy",
                                                 unit="conversation", disable=not progress, file=sys.stderr)]
