"""Typed results of the guardrail engine: what each stage decided and what happens next.

Messages are OpenAI chat messages (``{"role", "content", ...}`` dicts, :mod:`.messages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from proxy.guardrails.conversation import Settled
from proxy.guardrails.decisions import Decision
from proxy.guardrails.detectors.pii import PiiMasker
from proxy.guardrails.schema import CompliancePolicy, ContinuityPolicy

Message = dict[str, Any]


@dataclass(frozen=True)
class DomainRoute:
    """The request's domain (from its open question: the engine's ``classify_domain``) and the
    Compliance policy that routes it.

    ``confidence`` is a decimal string in [0, 1]; ``result`` the compliance detector's
    DomainResult, None (with ``policy`` None) when no compliance policy screens inputs or the
    request has no user text, in which case the domain is ``"general"``.
    """

    domain: str
    confidence: str
    result: Any = None
    policy: CompliancePolicy | None = None
    #: Index of the message whose text decided the route (None: a tool definition, or no text).
    source: int | None = None

    @property
    def regulated(self) -> bool:
        """True when a compliance policy must escalate this request to a human."""
        return self.policy is not None and self.result is not None and bool(self.result.regulated)


@dataclass
class InputScreen:
    """Outcome of the input stage.

    ``action`` is the decisive action by precedence; ``messages`` are what the model may see
    (PII masked); ``triggers`` lists every policy that fired, including ones a stronger action
    pre-empted (for metrics); ``decisions`` are the actions actually performed (one receipt each).
    ``masker`` restores the input's placeholders in the answer; ``apology`` is the refusing
    policy's text (refuse), ``notice`` and ``escalation_id`` the human routing (escalate);
    for a forwarded request (allow / mask) ``notice`` is the Compliance ambiguous-band notice
    (``ambiguous: notice``) the client must be shown with the answer, else None. ``settled``
    lists the history turns that kept an earlier refuse/escalate verdict: not judged again and
    withheld from ``messages`` (:mod:`proxy.guardrails.conversation`; indexes are those of the
    request as received). ``definitions`` are the request's ``tools`` / ``tool_choice`` /
    ``response_format`` as the model may see them (PII masked; None when the request had none).
    """

    action: str
    messages: list[Message]
    decisions: list[Decision]
    triggers: list[Decision]
    domain: str
    domain_confidence: str
    masker: PiiMasker | None = None
    apology: str | None = None
    notice: str | None = None
    escalation_id: str | None = None
    settled: list[Settled] = field(default_factory=list)
    definitions: dict[str, Any] | None = None


@dataclass
class OutputScreen:
    """Outcome of the output stage: the text the client receives and the actions performed.

    ``refused``: a safety policy replaced the answer with its apology; ``model_apology``: the
    model itself apologized or refused (FAR-A); ``tool_calls``: the answer's tool calls with the
    input's placeholders restored (None when refused or when the answer had none).
    """

    text: str
    decisions: list[Decision]
    refused: bool
    model_apology: bool
    tool_calls: list[Message] | None = None


@dataclass
class ContinuityPlan:
    """A summarization to perform: ``older`` turns go to the summarizer, ``head`` (leading
    system/developer messages) and ``kept`` (the last turns) stay verbatim.

    ``tokens_before`` is the conversation's token count (the engine's counter) that exceeded
    ``policy.max_tokens``.
    """

    policy: ContinuityPolicy
    tokens_before: int
    head: list[Message]
    older: list[Message]
    kept: list[Message]


class SummaryResult(NamedTuple):
    """The conversation with ``plan.older`` replaced by one summary message, and its decision.

    A named tuple, so ``messages, decision = engine.apply_summary(...)`` unpacks it.
    """

    messages: list[Message]
    decision: Decision
