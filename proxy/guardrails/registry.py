"""Detector factories keyed by policy kind (modelled on presidio's ``RecognizerRegistry``).

Each policy kind registers one factory ``policy -> Detector | None`` that validates the
policy's ``detector:`` block with the detector's own config model and loads its models. The
engine builds every policy's detector through a registry and never names a detector class;
tests register fake detectors the same way::

    registry = DetectorRegistry()
    registry.register("safety", lambda policy: FakeSafety())
    engine = GuardrailEngine(policies, count_tokens=count, registry=registry)
"""

from __future__ import annotations

from typing import Any, Callable

from proxy.guardrails.detector import Detector
from proxy.guardrails.schema import Policy

#: Builds the detector of one policy (None: the kind needs no detector). Models load here.
DetectorFactory = Callable[[Any], "Detector[Any] | None"]


class DetectorRegistry:
    """Policy kind → detector factory.

    ``register`` replaces an earlier factory of the same kind; ``build`` raises LookupError
    for a kind nobody registered, and the factory's own errors (pydantic ValidationError for
    a bad ``detector:`` block, model loading errors).
    """

    def __init__(self) -> None:
        self._factories: dict[str, DetectorFactory] = {}

    def register(self, kind: str, factory: DetectorFactory) -> "DetectorRegistry":
        """Use ``factory`` for policies of ``kind``; returns the registry (for chaining)."""
        self._factories[kind] = factory
        return self

    def kinds(self) -> list[str]:
        """The registered policy kinds, sorted."""
        return sorted(self._factories)

    def build(self, policy: Policy) -> "Detector[Any] | None":
        """The detector of ``policy`` (None when its kind needs none)."""
        try:
            factory = self._factories[policy.kind]
        except KeyError:
            raise LookupError(f"no detector registered for policy kind {policy.kind!r} "
                              f"(policy {policy.id}; registered: {', '.join(self.kinds()) or 'none'})") from None
        return factory(policy)

    def build_all(self, policies: list[Policy]) -> dict[str, "Detector[Any]"]:
        """policy id → detector for every policy that has one, built in policy order."""
        built = {policy.id: self.build(policy) for policy in policies}
        return {policy_id: detector for policy_id, detector in built.items() if detector is not None}


def _safety(policy: Any) -> Detector[Any]:
    from proxy.guardrails.detectors.safety import SafetyDetectorConfig, load_safety_detector

    return load_safety_detector(SafetyDetectorConfig.model_validate(policy.detector))


def _privacy(policy: Any) -> Detector[Any]:
    from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig

    return PiiDetector(PiiDetectorConfig.model_validate(policy.detector))


def _compliance(policy: Any) -> Detector[Any]:
    from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

    return DomainClassifier(DomainClassifierConfig.model_validate(policy.detector))


def _continuity(policy: Any) -> None:
    return None  # continuity counts tokens with the engine's injected counter; no model of its own


def default_registry() -> DetectorRegistry:
    """The product's detectors: safety, privacy (presidio), compliance (domain classifier), continuity."""
    return (DetectorRegistry()
            .register("safety", _safety)
            .register("privacy", _privacy)
            .register("compliance", _compliance)
            .register("continuity", _continuity))
