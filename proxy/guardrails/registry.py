"""Detector factories keyed by policy kind (modelled on presidio's ``RecognizerRegistry``).

Each policy kind registers one factory ``policy -> Detector | None`` that validates the
policy's ``detector:`` block with the detector's own config model and loads its models. The
engine builds every policy's detector through a registry and never names a detector class;
tests register fake detectors the same way::

    registry = DetectorRegistry()
    registry.register("safety", lambda policy: FakeSafety())
    engine = GuardrailEngine(policies, count_tokens=count, registry=registry)

A kind may also name its detector's config model (``register(kind, factory, config=...)``):
:meth:`DetectorRegistry.check` then validates a ``detector:`` block without loading a model
(``sonate policy check``, a policy reload before anything is built). :class:`DetectorPool`
builds each distinct detector once and hands the same instance to every policy set that uses it.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from proxy.config import ConfigError, format_validation_error
from proxy.guardrails.detector import Detector
from proxy.guardrails.schema import Policy

#: Builds the detector of one policy (None: the kind needs no detector). Models load here.
DetectorFactory = Callable[[Any], "Detector[Any] | None"]
#: Returns the pydantic model of a kind's ``detector:`` block (imported on first use).
ConfigModel = Callable[[], type[BaseModel]]


class DetectorRegistry:
    """Policy kind → detector factory.

    ``register`` replaces an earlier factory of the same kind; ``build`` raises LookupError
    for a kind nobody registered, and the factory's own errors (pydantic ValidationError for
    a bad ``detector:`` block, model loading errors).
    """

    def __init__(self) -> None:
        self._factories: dict[str, DetectorFactory] = {}
        self._configs: dict[str, ConfigModel] = {}

    def register(self, kind: str, factory: DetectorFactory, config: ConfigModel | None = None) -> "DetectorRegistry":
        """Use ``factory`` for policies of ``kind`` (``config``: returns the model of its ``detector:``
        block, for :meth:`check`); returns the registry (for chaining)."""
        self._factories[kind] = factory
        if config is not None:
            self._configs[kind] = config
        else:
            self._configs.pop(kind, None)
        return self

    def check(self, policy: Policy, source: str, prefix: str = "detector.") -> None:
        """Validate ``policy``'s ``detector:`` block with its kind's config model, loading no model.

        Raises ConfigError ``source: <prefix><key>: <problem>`` (one line per problem); a kind
        registered without a config model is not checked here (its factory still validates).
        """
        model = self._configs.get(policy.kind)
        if model is None:
            return
        try:
            model().model_validate(policy.detector)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(source, exc, prefix=prefix)) from None

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


def detector_key(policy: Policy) -> str:
    """What a detector depends on: the policy's kind and its ``detector:`` block as canonical JSON
    (sorted keys). Two policies with the same key share one detector (:class:`DetectorPool`)."""
    return policy.kind + ":" + json.dumps(policy.detector, sort_keys=True, separators=(",", ":"), default=str)


class DetectorPool:
    """Builds each distinct detector once (by :func:`detector_key`) through ``registry``.

    Policy sets that leave a policy's ``detector:`` block alone share its detector (and its
    loaded models); a set that changes it (a Privacy score threshold, an added Compliance
    domain) gets its own. The pool outlives policy reloads: an unchanged detector is reused, and
    :meth:`retain` drops the ones no active policy set uses any more. Thread-safe.
    """

    def __init__(self, registry: DetectorRegistry) -> None:
        self.registry = registry
        self._built: dict[str, "Detector[Any] | None"] = {}
        self._lock = threading.Lock()
        #: how many detectors this pool has built (a reused one is not counted)
        self.builds = 0

    def detectors_for(self, policies: list[Policy]) -> dict[str, "Detector[Any]"]:
        """policy id → detector for every policy of ``policies`` that has one (built or reused)."""
        out: dict[str, Detector[Any]] = {}
        for policy in policies:
            key = detector_key(policy)
            with self._lock:
                if key not in self._built:
                    self._built[key] = self.registry.build(policy)
                    self.builds += 1
                detector = self._built[key]
            if detector is not None:
                out[policy.id] = detector
        return out

    def retain(self, policies: list[Policy]) -> int:
        """Forget every detector none of ``policies`` uses; returns how many were dropped."""
        keep = {detector_key(p) for p in policies}
        with self._lock:
            dropped = [k for k in self._built if k not in keep]
            for key in dropped:
                del self._built[key]
        return len(dropped)


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


def _safety_config() -> type[BaseModel]:
    from proxy.guardrails.detectors.safety import SafetyDetectorConfig

    return SafetyDetectorConfig


def _privacy_config() -> type[BaseModel]:
    from proxy.guardrails.detectors.pii import PiiDetectorConfig

    return PiiDetectorConfig


def _compliance_config() -> type[BaseModel]:
    from proxy.guardrails.detectors.domain import DomainClassifierConfig

    return DomainClassifierConfig


def default_registry() -> DetectorRegistry:
    """The product's detectors: safety, privacy (presidio), compliance (domain classifier), continuity."""
    return (DetectorRegistry()
            .register("safety", _safety, _safety_config)
            .register("privacy", _privacy, _privacy_config)
            .register("compliance", _compliance, _compliance_config)
            .register("continuity", _continuity))
