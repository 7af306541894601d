"""What the guardrail engine needs from a detector: the :class:`Detector` protocol.

A detector turns a batch of texts into one result per text. The result type belongs to the
policy kind that uses it (docs/architecture.md "Request flow"):

- safety: :class:`~.detectors.safety.SafetyDetector`, ``{category: probability in [0, 1]}``;
- privacy: :class:`~.detectors.pii.PiiDetector`, ``list[PiiSpan]`` (disjoint, sorted by start);
- compliance: :class:`~.detectors.domain.DomainClassifier`, a :class:`~.detectors.domain.DomainResult`;
- continuity: no detector (litellm's token counter, injected into the engine).

Detectors are registered per policy kind in :mod:`proxy.guardrails.registry`; the engine only
calls ``detect`` (or, for the model's answers, an optional ``detect_answers``: output Safety reads
a word an answer talks about as mentioned, not used) and reads ``name`` / ``version`` (and a safety
detector's optional ``components``) for receipt evidence.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

R = TypeVar("R")


@runtime_checkable
class Detector(Protocol[R]):
    """A batch detector: ``detect(texts)`` → one result per text, same order.

    Attributes:
        name: detector identity written into receipt evidence (e.g. ``"presidio"``).
        version: model/package versions, written next to ``name``.

    Implementations are thread-safe and CPU-bound (the server calls them from a thread pool)
    and never load models or download anything inside ``detect``.
    """

    name: str
    version: str

    def detect(self, texts: list[str]) -> list[R]:
        """One result per text of ``texts`` (an empty list for no texts)."""
        ...


@runtime_checkable
class ApologyCheck(Protocol):
    """Detector of model-initiated apologies/refusals in an answer (raw material of FAR-A)."""

    def is_apology(self, text: str) -> bool:
        """True when ``text`` (a model answer) is an apology or refusal."""
        ...


def detector_identity(detector: Any) -> dict[str, Any]:
    """``{"name", "version"}`` of a detector for receipt evidence (``"unknown"`` when absent)."""
    return {"name": getattr(detector, "name", "unknown"), "version": getattr(detector, "version", "unknown")}
