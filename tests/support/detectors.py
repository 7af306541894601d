"""Fake detectors for engine and gateway unit tests: deterministic keyword rules behind the
Detector protocol, registered per policy kind through a real DetectorRegistry.

- safety: toxicity 0.9 for "BAD", harmful_intent 0.95 for "HARM" (thresholds 0.5 / 0.7 below);
- privacy: e-mail addresses and the name "Ada Lovelace";
- compliance: "diagnos…" is the regulated health domain;
- apology: an answer starting with "Sorry".
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from proxy.guardrails.detectors.domain import DomainResult
from proxy.guardrails.detectors.pii import PiiSpan
from proxy.guardrails.messages import message_text
from proxy.guardrails.registry import DetectorRegistry
from proxy.guardrails.schema import CompliancePolicy, ContinuityPolicy, PrivacyPolicy, SafetyPolicy

EMAIL = re.compile(r"[\w.]+@[\w.]+\w")


class FakeSafety:
    """toxicity 0.9 for "BAD", harmful_intent 0.95 for "HARM"; ``overrides`` pin exact scores."""

    name = "fake-safety"
    version = "1"
    components = [{"name": "fake-tox", "version": "1"}]

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.overrides: dict[str, dict[str, float]] = {}

    def detect(self, texts: list[str]) -> list[dict[str, float]]:
        self.calls.append(list(texts))
        return [self.overrides.get(t, {"toxicity": 0.9 if "BAD" in t else 0.1,
                                       "harmful_intent": 0.95 if "HARM" in t else 0.0}) for t in texts]


class FakePii:
    """E-mail addresses (regex) and the name "Ada Lovelace" as PII spans."""

    name = "fake-pii"
    version = "2"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def detect(self, texts: list[str]) -> list[list[PiiSpan]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            spans = [PiiSpan("EMAIL_ADDRESS", m.start(), m.end(), 0.9) for m in EMAIL.finditer(text)]
            spans += [PiiSpan("PERSON", m.start(), m.end(), 0.85) for m in re.finditer("Ada Lovelace", text)]
            out.append(sorted(spans, key=lambda s: s.start))
        return out


class FakeDomain:
    """"diagnos…" → regulated health; anything else → general."""

    name = "fake-domain"
    version = "3"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def detect(self, texts: list[str]) -> list[DomainResult]:
        self.calls.append(list(texts))
        return [DomainResult("health", 0.8, {"general": 0.2, "health": 0.8}, True, False) if "diagnos" in t
                else DomainResult("general", 0.9, {"general": 0.9, "health": 0.1}, False, False) for t in texts]


class FakeApology:
    """An answer starting with "Sorry" is a model apology."""

    def is_apology(self, text: str) -> bool:
        return text.startswith("Sorry")


def count_words(model: str, messages: list[dict[str, Any]]) -> int:
    """A deterministic token counter: words over all messages."""
    return sum(len(message_text(m).split()) for m in messages)


SAFETY = SafetyPolicy(id="safety", kind="safety", stages=["input", "output"], apology="Refused by policy.",
                      thresholds={"toxicity": Decimal("0.5"), "harmful_intent": Decimal("0.7")})
PRIVACY = PrivacyPolicy(id="privacy", kind="privacy", stages=["input", "output"])
COMPLIANCE = CompliancePolicy(id="compliance", kind="compliance", stages=["input"],
                              notice="Routed ({domain}) as {escalation_id}.")
CONTINUITY = ContinuityPolicy(id="continuity", kind="continuity", stages=["input"], max_tokens=20,
                              keep_last_messages=2, summary_prompt="Summarize please.")
#: The four policies in configuration order, as the fakes above expect them.
POLICIES = [SAFETY, PRIVACY, COMPLIANCE, CONTINUITY]


class FakeDetectors:
    """One fresh fake per kind and the registry that builds them (``built``: policy ids, in order)."""

    def __init__(self) -> None:
        self.safety, self.pii, self.domain = FakeSafety(), FakePii(), FakeDomain()
        self.built: list[str] = []
        self.registry = DetectorRegistry()
        for kind, fake in (("safety", self.safety), ("privacy", self.pii), ("compliance", self.domain)):
            self.registry.register(kind, self._factory(fake))
        self.registry.register("continuity", lambda policy: None)

    def _factory(self, fake: Any):
        def build(policy: Any) -> Any:
            self.built.append(policy.id)
            return fake
        return build
