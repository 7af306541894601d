"""The one path of every receipt a running proxy writes: build, commit, count, hand on.

Chat completions (answered and streamed), embeddings and review decisions all go through here:

* :func:`build_receipts`: one unsigned receipt per performed guardrail action, or one ``allow``
  receipt (policy :data:`ALLOW_POLICY_ID`) naming the policies evaluated when none acted; the
  fields every receipt of a request shares come from :func:`request_fields`;
* :func:`review_receipt`: the unsigned receipt of one human review step (an escalation's
  ``resolve`` steps, an adjudication's ``adjudicate`` passes), its evidence given by the review
  module that decided it;
* :meth:`Receipting.commit`: append them through the sink (the ledger, or the spool) inside a
  ``ledger.commit`` span, timed in ``sonate_ledger_append_duration_seconds``; a
  :class:`~proxy.storage.base.LedgerError` becomes the 503 ``ledger_unavailable`` (fail_closed: no
  answer leaves without its receipts), after the caller's ``undo`` ran;
* :meth:`Receipting.count`: the guardrail triggers, actions, receipts written and Audit Depth's
  evidence counters (:mod:`proxy.kpi.audit_depth`);
* :meth:`Receipting.after_commit`: the post-receipt hooks (e.g. the adjudication queue), each
  failure logged, never the request's.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence

from proxy.guardrails.decisions import Decision
from proxy.kpi.audit_depth import evidence_present
from proxy.primitives.canonical import json_hash
from proxy.receipts.ledgers import ledger_of
from proxy.receipts.receipt import new_receipt
from proxy.server.admission.sink import Appended, ReceiptSink
from proxy.server.errors import ledger_unavailable
from proxy.server.telemetry import tracing
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerError

__all__ = ["ALLOW_POLICY_ID", "Receipting", "SealedHook", "build_receipts", "request_fields", "review_receipt"]

log = logging.getLogger("sonate.pipeline")  # the request flow's logger: log filters key on the name

#: policy_id of the single receipt of a request where no policy fired.
ALLOW_POLICY_ID = "matrix"

#: A post-receipt hook: ``await hook(sealed, messages, body, model_apology)``.
SealedHook = Callable[..., Awaitable[None]]


def request_fields(*, request_id: str, actor: str, intent: str, inputs_hash: str, body: dict[str, Any],
                   model: str, provider: str, stratum: dict[str, str]) -> dict[str, Any]:
    """The fields every receipt of one request shares (``outputs_hash``: the RFC 8785 hash of
    ``body``, the answer or error object the client receives)."""
    return dict(request_id=request_id, actor=actor, intent=intent, inputs_hash=inputs_hash,
                outputs_hash=json_hash(body), model=model, provider=provider, stratum=stratum)


def build_receipts(decisions: Sequence[Decision], fields: Mapping[str, Any], evidence: Mapping[str, Any],
                   evaluated: Iterable[str]) -> list[dict[str, Any]]:
    """Unsigned receipts of one request: one per decision (its evidence, its ``scores`` when it has
    any, then ``evidence``), else one ``allow`` receipt of :data:`ALLOW_POLICY_ID` whose evidence
    lists the ``evaluated`` policy ids (sorted) and ``evidence``. ``fields``: :func:`request_fields`."""
    receipts = [new_receipt(policy_id=d.policy_id, guardrail_action=d.action,
                            evidence={**d.evidence, **({"scores": d.scores} if d.scores else {}), **evidence},
                            **fields)
                for d in decisions]
    return receipts or [new_receipt(policy_id=ALLOW_POLICY_ID, guardrail_action="allow",
                                    evidence={"policies_evaluated": sorted(evaluated), **evidence}, **fields)]


def review_receipt(*, action: str, policy_id: str, actor: str, intent: str, inputs_hash: str, output: Any,
                   evidence: dict[str, Any], model: str | None, provider: str,
                   stratum: dict[str, str], request_id: str | None = None) -> dict[str, Any]:
    """The unsigned receipt of one human review step: ``guardrail_action`` ``action`` (``resolve``
    or ``adjudicate``, human actions in the KPIs), ``outputs_hash`` the RFC 8785 hash of ``output``
    (what the step produced), a new ``req_<hex>`` request id unless ``request_id`` is given (the
    steps of one decision share one)."""
    return new_receipt(request_id=request_id or "req_" + uuid.uuid4().hex, actor=actor, intent=intent,
                       inputs_hash=inputs_hash, outputs_hash=json_hash(output), policy_id=policy_id,
                       guardrail_action=action, evidence=evidence, model=model, provider=provider, stratum=stratum)


class Receipting:
    """Commits receipts through ``sink`` and counts them in ``metrics``."""

    def __init__(self, sink: ReceiptSink, metrics: Metrics) -> None:
        """Bind the sink and the metrics; no I/O."""
        self.sink = sink
        self.metrics = metrics

    async def commit(self, request_id: str, receipts: list[dict[str, Any]], *, allow_pending: bool = True,
                     undo: Callable[[], Awaitable[None]] | None = None,
                     what: str = "the request was not completed (fail_closed)") -> Appended:
        """Append ``receipts`` (all or none; ``allow_pending`` false: never into the spool) and
        return them sealed (unsealed when pending in the spool).

        Raises GatewayError 503 ``ledger_unavailable`` (message ``what``, fail_closed) when they
        cannot be written, after awaiting ``undo`` (e.g. aborting an escalation case).
        """
        try:
            t = time.perf_counter()
            with tracing.span("ledger.commit", {tracing.Sonate.RECEIPT_COUNT: len(receipts)}) as traced:
                appended = await self.sink.append(receipts, allow_pending=allow_pending)
                traced.set_attribute(tracing.Sonate.RECEIPT_STATUS, "pending" if appended.pending else "appended")
            self.metrics.ledger_append_duration.observe(time.perf_counter() - t)
        except LedgerError as exc:
            log.error("ledger append failed for %s: %s", request_id, exc)
            if undo is not None:
                await undo()
            raise ledger_unavailable(what) from None
        return appended

    def count(self, triggers: Iterable[Decision], sealed: list[dict[str, Any]], written: bool,
              policies: Mapping[str, Any]) -> None:
        """Count a request's guardrail triggers and its sealed receipts: actions, receipts written
        (``written`` false: spooled, counted when replayed, proxy.server.admission.sink) and each
        policy's required and present evidence (Audit Depth's inputs, proxy.kpi.audit_depth);
        ``policies``: policy id → policy of the request's policy set."""
        m = self.metrics
        for d in triggers:
            m.guardrail_triggers.labels(d.policy_id, d.action, d.stage).inc()
        for receipt in sealed:
            m.actions.labels(receipt["guardrail_action"]).inc()
            if written:
                m.receipts_written.labels(receipt["guardrail_action"], ledger_of(receipt)).inc()
            policy = policies.get(receipt["policy_id"])
            if policy is not None:
                m.evidence_required.labels(policy.id).inc(len(policy.evidence_required))
                m.evidence_present.labels(policy.id).inc(evidence_present(receipt, policy.evidence_required))

    @staticmethod
    async def after_commit(hooks: Sequence[SealedHook], request_id: str, sealed: list[dict[str, Any]],
                           view: Callable[[], Awaitable[tuple[list[dict[str, Any]], dict[str, Any]]]],
                           model_apology: bool) -> None:
        """Run each post-receipt hook as ``await hook(sealed, messages, body, model_apology)`` with
        ``(messages, body) = await view()`` (the masked review view). A view that fails skips every
        hook (never hand a hook the unmasked text instead); a failing hook is logged and does not
        fail the request: its receipts are already durable."""
        if not hooks:
            return
        try:
            messages, body = await view()
        except Exception:
            log.exception("could not mask the review view of %s; post-receipt hooks skipped", request_id)
            return
        for hook in hooks:
            try:
                await hook(sealed, messages, body, model_apology)
            except Exception:
                log.exception("post-receipt hook %r failed for %s", hook, request_id)
