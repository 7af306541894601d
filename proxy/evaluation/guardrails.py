"""Run evaluation items through the guardrails the proxy uses.

Two targets with one interface (``screen(item) -> ItemOutcome``):

- :class:`EngineTarget` (in-process): the :class:`~proxy.guardrails.engine.GuardrailEngine`
  built exactly as ``proxy.server.http.app.build_services`` builds it (``load_policies`` +
  ``GuardrailEngine(policies, count_tokens=Upstream.count_tokens,
  apology_detector=ApologyDetector())``, embeddings warmed up, one warm-up screen). Each item is
  one user message through ``engine.screen_input``; its latency is that whole input-guardrail
  pass. Engine internals used (the only ones): the privacy policy's detector through the engine's
  scan cache, ``engine.cache.map(policy_id, [text], engine.detectors[policy_id].analyze_batch)``,
  to read the spans of privacy items even when a stronger action (refuse) pre-empted masking —
  the cache makes this free when ``screen_input`` already computed them.
- :class:`ProxyTarget`: a running proxy through :mod:`proxy.evaluation.client`. The decisive action
  is the ``x-sonate-guardrail-action`` header; the request's final receipt
  (``GET /v1/receipts/{x-sonate-receipt-id}``) gives the refusal's stage, the domain (``intent``)
  and the masked spans. Latency is the whole request round trip (includes the model call for
  allowed and masked items). Side effects on that proxy: receipts in its ledger, review cases
  for escalated items.

What counts (both targets): Safety flags = a safety policy fired on the input stage; Compliance
= the request was escalated (a safety refusal pre-empts escalation, as in the proxy);
Privacy = the privacy detector's spans.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from proxy.evaluation.data import Item
from proxy.evaluation.metrics import Span


class TargetError(RuntimeError):
    """The guardrails cannot be reached or built (bad URL, rejected key, unknown model, bad policy)."""


@dataclass(frozen=True)
class ItemOutcome:
    """What the guardrails did with one item.

    Attributes:
        action: decisive action of the request (``refuse``, ``escalate``, ``mask``, ``allow``; via
            a proxy also ``summarize``).
        safety_flag: a safety policy fired on the input stage.
        escalated: the request was routed to a human (Compliance ``escalate``).
        domain: classified domain of the request (receipt ``intent``), None when unknown.
        spans: privacy spans in the detector's entity types, for privacy items; None when not
            observable (not a privacy item, or via a proxy whose final receipt is not the mask).
        seconds: in-process: the ``screen_input`` pass; via a proxy: the request round trip.
        fired: ``(policy kind, policy id, action)`` of every policy that fired on the input,
            including ones a stronger action pre-empted (in-process: ``screen.triggers``; via a
            proxy only the decisive action's kind, with policy id ``?``).
        model_text: the user message as the model receives it (masked), None when the request
            was refused or escalated before the model, or not observable. Kept in memory only
            (``--show-touched``); never written into reports.
    """

    action: str
    safety_flag: bool
    escalated: bool
    domain: str | None
    spans: tuple[Span, ...] | None
    seconds: float
    fired: tuple[tuple[str, str, str], ...] = ()
    model_text: str | None = None


class Target(Protocol):
    """Anything that screens items: ``mode``, ``latency_measures``, ``describe()``, ``screen()``."""

    mode: str
    latency_measures: str

    def describe(self) -> dict[str, Any]:
        """What was evaluated (mode, policies and detector versions, or proxy URL and model)."""
        ...

    def screen(self, item: Item) -> ItemOutcome:
        """Send one item through the guardrails; raises TargetError when they cannot be reached."""
        ...


def _messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def build_engine(policies_dir: Path, count_tokens: Callable[[str, list[dict[str, Any]]], int]):
    """The proxy's engine: ``load_policies(policies_dir)`` + ``GuardrailEngine`` with the apology
    detector, embeddings warmed up, BLAS capped at one thread per call and one warm-up screen (as
    ``build_services`` does).

    Slow (models load). Raises ConfigError for bad policies, the detectors' own errors otherwise.
    """
    from proxy.guardrails.detectors.apology import ApologyDetector
    from proxy.guardrails.detectors.embeddings import limit_blas_threads, warm_up
    from proxy.guardrails.engine import GuardrailEngine
    from proxy.guardrails.schema import load_policies

    policies = load_policies(policies_dir)
    engine = GuardrailEngine(policies, count_tokens=count_tokens, apology_detector=ApologyDetector())
    warm_up()
    limit_blas_threads()  # as the proxy does once its models are loaded
    engine.screen_input(_messages("Hello, my name is Ada. What is 2 + 2?"))
    return engine


class EngineTarget:
    """In-process target over a :class:`~proxy.guardrails.engine.GuardrailEngine`."""

    mode = "in-process"
    latency_measures = "GuardrailEngine.screen_input per item (the whole input-guardrail pass)"

    def __init__(self, engine: Any) -> None:
        from proxy.guardrails.schema import PrivacyPolicy

        self.engine = engine
        self._privacy = next((p for p in engine.policies
                              if isinstance(p, PrivacyPolicy) and "input" in p.stages), None)

    def describe(self) -> dict[str, Any]:
        """Policies and detector identities of the engine (for the report)."""
        return {
            "mode": self.mode,
            "policies": [
                {"id": p.id, "kind": p.kind, "stages": list(p.stages),
                 "detector": {"name": getattr(self.engine.detectors.get(p.id), "name", None),
                              "version": getattr(self.engine.detectors.get(p.id), "version", None)}}
                for p in self.engine.policies
            ],
        }

    def privacy_spans(self, text: str) -> tuple[Span, ...] | None:
        """Spans the input privacy policy's detector finds in ``text`` (None without one)."""
        if self._privacy is None:
            return None
        detector = self.engine.detectors[self._privacy.id]
        (found,) = self.engine.cache.map(self._privacy.id, [text], detector.analyze_batch)
        return tuple(Span(s.entity_type, s.start, s.end) for s in found)

    def screen(self, item: Item) -> ItemOutcome:
        """Screen one item with ``engine.screen_input`` (timed)."""
        started = time.perf_counter()
        screen = self.engine.screen_input(_messages(item.text))
        seconds = time.perf_counter() - started
        safety = any(d.kind == "safety" and d.stage == "input" for d in screen.triggers)
        escalated = any(d.kind == "compliance" and d.action == "escalate" for d in screen.triggers)
        spans = self.privacy_spans(item.text) if item.policy == "privacy" else None
        fired = tuple((d.kind, d.policy_id, d.action) for d in screen.triggers)
        content = screen.messages[-1].get("content") if screen.messages else None
        model_text = content if screen.action != "refuse" and isinstance(content, str) else None
        return ItemOutcome(screen.action, safety, escalated, screen.domain, spans, seconds, fired, model_text)


class ProxyTarget:
    """A running proxy, through :class:`~proxy.evaluation.client.ProxyClient` (only a 429 is retried).

    Raises ProxyError (from :meth:`screen` / :meth:`check`) when the proxy is unreachable,
    rejects the key or the model, or answers with an error; TargetError when it is not a Sonate
    proxy (no ``x-sonate-*`` headers).
    """

    mode = "proxy"
    latency_measures = "request round trip through the proxy (guardrails + model call + receipts)"

    def __init__(self, url: str, api_key: str, model: str) -> None:
        from proxy.evaluation.client import ProxyClient

        self.client = ProxyClient(url, api_key, model)

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()

    def describe(self) -> dict[str, Any]:
        """The proxy's URL and the model route used."""
        return {"mode": self.mode, "proxy": self.client.base, "model": self.client.model}

    def check(self) -> None:
        """Fail fast: the proxy answers ``GET /v1/models`` with this key and has the model route."""
        self.client.check()

    def screen(self, item: Item) -> ItemOutcome:
        """Send the item as one user message; read the action header and the final receipt."""
        answer = self.client.ask(item.text)
        if not answer.action or not answer.receipt_id:
            raise TargetError(f"{self.client.base} is not a Sonate proxy: no x-sonate-guardrail-action / "
                              "x-sonate-receipt-id headers")
        receipt = self.client.receipt(answer.receipt_id)
        evidence = receipt.get("evidence") or {}
        stage = evidence.get("stage")
        safety = answer.action == "refuse" and receipt.get("guardrail_action") == "refuse" and stage == "input"
        kind = _ACTION_KINDS.get(answer.action)
        return ItemOutcome(answer.action, safety, answer.action == "escalate", receipt.get("intent"),
                           _receipt_spans(item, answer.action, receipt), answer.seconds,
                           ((kind, "?", answer.action),) if kind else ())


#: Policy kind behind a decisive action seen through a proxy.
_ACTION_KINDS = {"refuse": "safety", "escalate": "compliance", "mask": "privacy", "summarize": "continuity"}


def _receipt_spans(item: Item, action: str, receipt: dict[str, Any]) -> tuple[Span, ...] | None:
    """Privacy spans of the user message read from the final receipt (None when not observable)."""
    evidence = receipt.get("evidence") or {}
    if item.policy != "privacy":
        return None
    if receipt.get("guardrail_action") == "mask" and evidence.get("stage") == "input":
        return tuple(Span(s["entity_type"], int(s["start"]), int(s["end"]))
                     for s in evidence.get("spans", []) if s.get("message") == 0)
    return () if action == "allow" else None


def run_items(target: Target, items: Iterable[Item], *, progress: bool = True,
              total: int | None = None) -> list[ItemOutcome]:
    """Screen every item in order (a tqdm progress bar on stderr when ``progress``).

    Raises TargetError from the target.
    """
    from tqdm import tqdm

    return [target.screen(item) for item in tqdm(items, total=total, desc="guardrails", unit="item",
                                                   disable=not progress)]
