"""The request flow of one chat completion (DESIGN.md "Request flow").

auth → parse + validate → input guardrails → (upstream via litellm) → output guardrails →
receipts appended (one per action) → metrics → response.

This module coordinates I/O (provider, ledger) but knows nothing of aiohttp: the HTTP layer in
:mod:`proxy.server.app` turns an :class:`Outcome` or a :class:`GatewayError` into a response.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from proxy.config import Config
from proxy.guardrails.engine import Decision, GuardrailEngine, decisive_action
from proxy.kpi.audit_depth import evidence_present
from proxy.kpi.strata import complexity_rule, declared_complexity
from proxy.server.metrics import Metrics
from proxy.receipts.canonical import json_hash
from proxy.receipts.chain import Ledger
from proxy.receipts.receipt import new_receipt, utc_timestamp
from proxy.storage.base import LedgerConflict, LedgerError
from proxy.server.sink import LedgerSink, ReceiptSink
from proxy.server.wire import ChatCompletionRequest, completion_body
from proxy.server.upstream import Upstream, UpstreamError, UpstreamResult

log = logging.getLogger("sonate.pipeline")

#: policy_id of the single receipt of a request where no policy fired.
ALLOW_POLICY_ID = "matrix"


@dataclass
class GatewayError(Exception):
    """A request failure as an OpenAI error (HTTP status, message, type, code, param)."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    result: str = "client_error"


@dataclass(frozen=True)
class Caller:
    """The authenticated bearer of a key: actor name (written into receipts) and role."""

    actor: str
    role: str


@dataclass
class Outcome:
    """What the HTTP layer sends: the chat.completion body, how to stream it, and headers."""

    body: dict[str, Any]
    pieces: list[str]
    stream: bool
    include_usage: bool
    receipt_id: str
    action: str
    headers: dict[str, str] = field(default_factory=dict)


class Gateway:
    """Runs chat completions through guardrails, provider and ledger.

    ``run_sync`` executes CPU-bound guardrail work off the event loop (a thread pool).
    """

    def __init__(self, config: Config, engine: GuardrailEngine, upstream: Upstream, ledger: Ledger,
                 metrics: Metrics, executor: Executor | None = None, sink: ReceiptSink | None = None) -> None:
        self.config = config
        self.engine = engine
        self.upstream = upstream
        self.ledger = ledger
        #: Where receipts go (README "Fault policy"): the ledger (fail_closed) or through a spool.
        self.sink: ReceiptSink = sink or LedgerSink(ledger, metrics)
        self.metrics = metrics
        self.executor = executor
        self.policies = {p.id: p for p in engine.policies}
        #: Called after a request's receipts are sealed, as ``await hook(sealed, messages, body,
        #: model_apology)`` (e.g. the adjudication queue, proxy.server.routes.review); a failing
        #: hook is logged and does not fail the request (its receipts are already durable).
        self.sealed_hooks: list[Callable[..., Awaitable[None]]] = []

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def chat(self, raw: dict[str, Any], req: ChatCompletionRequest, caller: Caller,
                   complexity_header: str | None = None) -> Outcome:
        """Answer one chat completion request.

        Raises GatewayError for client errors (400/404), provider failures (mapped status) and
        an unavailable ledger (503, fail_closed: no response leaves without its receipts).
        """
        started = time.perf_counter()
        route = self.config.route(req.model)
        if route is None:
            raise GatewayError(404, f"The model '{req.model}' does not exist or you do not have access to it.",
                               code="model_not_found", param="model")
        try:
            declared = declared_complexity(complexity_header, req.metadata)
        except ValueError as exc:
            raise GatewayError(400, str(exc), param="metadata.complexity") from None
        request_id = "req_" + uuid.uuid4().hex
        try:
            inputs_hash = json_hash(raw)
        except Exception as exc:  # rfc8785 refuses e.g. integers beyond IEEE 754 precision
            raise GatewayError(400, f"The request JSON cannot be canonicalized (RFC 8785): {exc}",
                               code="invalid_json") from None
        messages = req.message_dicts()

        t = time.perf_counter()
        screen = await self._run(self.engine.screen_input, messages)
        self.metrics.guardrail_duration.labels("input").observe(time.perf_counter() - t)
        decisions: list[Decision] = list(screen.decisions)
        triggers: list[Decision] = list(screen.triggers)
        upstream_seconds = 0.0
        headers: dict[str, str] = {}
        pieces: list[str] = []
        result: UpstreamResult | None = None
        model_apology = False

        if screen.action == "refuse":
            body = completion_body(model=req.model, content=screen.apology, finish_reason="content_filter")
        elif screen.action == "escalate":
            body = completion_body(model=req.model, content=screen.notice, finish_reason="stop")
            headers["x-sonate-escalation-id"] = screen.escalation_id
        else:
            model_messages = screen.messages
            try:  # fail_closed: nothing is forwarded to the model while the ledger is known down
                await self.sink.before_upstream()
            except LedgerError as exc:
                log.error("ledger unavailable before the model call for %s: %s", request_id, exc)
                raise GatewayError(503, "The trust ledger is unavailable; the request was not forwarded "
                                   "(fail_closed).", "api_error", "ledger_unavailable",
                                   result="ledger_error") from None
            plan = await self._run(self.engine.continuity_plan, model_messages, req.model)
            try:
                if plan is not None:
                    summarizer = plan.policy.summary_model or req.model
                    summary = await self.upstream.complete(summarizer, self.engine.summary_request(plan), {})
                    upstream_seconds += summary.duration_seconds
                    self._observe_upstream(summarizer, summary)
                    model_messages, decision = await self._run(
                        self.engine.apply_summary, plan, summary.content, req.model)
                    decisions.append(decision)
                    triggers.append(decision)
                    headers["x-sonate-continuity"] = "summarized"
                call = self.upstream.complete_streaming if req.stream else self.upstream.complete
                result = await call(req.model, model_messages, req.upstream_params())
            except UpstreamError as exc:
                raise GatewayError(exc.status, exc.message, exc.type, exc.code, result="upstream_error") from None
            upstream_seconds += result.duration_seconds
            self._observe_upstream(req.model, result)
            t = time.perf_counter()
            out = await self._run(self.engine.screen_output, result.content, screen.masker)
            self.metrics.guardrail_duration.labels("output").observe(time.perf_counter() - t)
            decisions.extend(out.decisions)
            triggers.extend(out.decisions)
            model_apology = out.model_apology
            choice = (result.response.get("choices") or [{}])[0]
            message = choice.get("message") or {}
            body = completion_body(
                model=req.model,
                content=out.text if (out.text or not message.get("tool_calls")) else None,
                finish_reason="content_filter" if out.refused else (choice.get("finish_reason") or "stop"),
                usage=result.usage, completion_id=result.response.get("id"),
                created=result.response.get("created"),
                tool_calls=None if out.refused else message.get("tool_calls"),
            )
            if not out.refused and out.text == result.content:
                pieces = result.pieces

        regulated = screen.action == "escalate" or any(
            d.kind == "compliance" for d in triggers)
        complexity = declared or complexity_rule(
            prompt_tokens=(result.usage["prompt_tokens"] if result and result.usage["prompt_tokens"]
                           else await self._run(self.engine.count_tokens, req.model, messages)),
            user_turns=sum(1 for m in messages if m.get("role") == "user"),
            uses_tools=bool(req.tools), regulated=regulated)
        stratum = {"domain": screen.domain, "complexity": complexity, "provider": route.provider}
        outputs_hash = json_hash(body)
        receipts = self._receipts(decisions, request_id, caller, screen.domain, inputs_hash, outputs_hash,
                                  req.model, route.provider, stratum)
        if model_apology:  # FAR-A counts model-initiated apologies too: the receipt must say so
            receipts[-1]["evidence"]["model_apology"] = True
        action = decisive_action([d.action for d in decisions])

        if screen.action == "escalate":
            await self._open_case(screen, request_id, caller, req.model, receipts[-1]["receipt_id"])
        try:
            t = time.perf_counter()
            appended = await self.sink.append(receipts)
            sealed = appended.receipts  # unsealed when pending (in the spool)
            self.metrics.ledger_append_duration.observe(time.perf_counter() - t)
        except LedgerError as exc:
            log.error("ledger append failed for %s: %s", request_id, exc)
            if screen.action == "escalate":
                await self._abort_case(screen.escalation_id)
            raise GatewayError(503, "The trust ledger is unavailable; the request was not completed "
                               "(fail_closed).", "api_error", "ledger_unavailable", result="ledger_error") from None

        self._observe_request(req.model, route.provider, stratum, action, triggers, sealed, model_apology,
                              started, upstream_seconds, written=not appended.pending)
        headers["x-sonate-receipt-status"] = "pending" if appended.pending else "appended"
        for hook in self.sealed_hooks:
            try:
                await hook(sealed, screen.messages, body, model_apology)
            except Exception:
                log.exception("post-receipt hook %r failed for %s", hook, request_id)
        headers["x-sonate-request-id"] = request_id
        return Outcome(body, pieces, req.stream, bool(req.stream_options and req.stream_options.include_usage),
                       sealed[-1]["receipt_id"], action, headers)

    def _receipts(self, decisions: list[Decision], request_id: str, caller: Caller, domain: str,
                  inputs_hash: str, outputs_hash: str, model: str, provider: str,
                  stratum: dict[str, str]) -> list[dict[str, Any]]:
        """One unsigned receipt per performed action (one ``allow`` receipt when none)."""
        common = dict(request_id=request_id, actor=caller.actor, intent=domain, inputs_hash=inputs_hash,
                      outputs_hash=outputs_hash, model=model, provider=provider, stratum=stratum)
        if not decisions:
            evidence = {"policies_evaluated": sorted(self.policies)}
            return [new_receipt(policy_id=ALLOW_POLICY_ID, guardrail_action="allow", evidence=evidence, **common)]
        return [
            new_receipt(policy_id=d.policy_id, guardrail_action=d.action,
                        evidence={**d.evidence, **({"scores": d.scores} if d.scores else {})}, **common)
            for d in decisions
        ]

    async def _open_case(self, screen: Any, request_id: str, caller: Caller, model: str, receipt_id: str) -> None:
        case = {
            "id": screen.escalation_id, "status": "pending", "created": utc_timestamp(),
            "request_id": request_id, "actor": caller.actor, "model": model, "domain": screen.domain,
            "receipt_id": receipt_id, "messages": screen.messages,
        }
        try:
            await self.ledger.store.put_case(case)
        except LedgerError:
            raise GatewayError(503, "The review queue is unavailable; the request was not completed.",
                               "api_error", "ledger_unavailable", result="ledger_error") from None
        self.metrics.escalations_pending.inc()

    async def _abort_case(self, case_id: str) -> None:
        try:
            case = await self.ledger.store.get_case(case_id)
            if case:
                await self.ledger.store.update_case({**case, "status": "aborted"})
                self.metrics.escalations_pending.dec()
        except LedgerError:
            log.error("could not mark case %s aborted", case_id)

    def _observe_upstream(self, model: str, result: UpstreamResult) -> None:
        route = self.config.route(model)
        provider = route.provider if route else "unknown"
        self.metrics.upstream_duration.labels(model, provider).observe(result.duration_seconds)
        if result.ttft_seconds is not None:
            self.metrics.time_to_first_token.labels(model, provider).observe(result.ttft_seconds)
        self.metrics.tokens.labels(model, provider, "prompt").inc(result.usage["prompt_tokens"])
        self.metrics.tokens.labels(model, provider, "completion").inc(result.usage["completion_tokens"])
        self.metrics.cost.labels(model, provider).inc(result.cost_usd)

    def _observe_request(self, model: str, provider: str, stratum: dict[str, str], action: str,
                         triggers: list[Decision], sealed: list[dict[str, Any]], model_apology: bool,
                         started: float, upstream_seconds: float, written: bool = True) -> None:
        m = self.metrics
        m.interactions.labels(model, provider, stratum["domain"], stratum["complexity"]).inc()
        for d in triggers:
            m.guardrail_triggers.labels(d.policy_id, d.action, d.stage).inc()
        for receipt in sealed:
            m.actions.labels(receipt["guardrail_action"]).inc()
            if written:  # spooled receipts count when replayed (proxy.server.sink)
                m.receipts_written.labels(receipt["guardrail_action"]).inc()
            policy = self.policies.get(receipt["policy_id"])
            if policy is not None:
                m.evidence_required.labels(policy.id).inc(len(policy.evidence_required))
                m.evidence_present.labels(policy.id).inc(evidence_present(receipt, policy.evidence_required))
            if receipt["guardrail_action"] == "refuse":
                m.apologies.labels("guardrail", receipt["policy_id"], stratum["domain"], stratum["complexity"]).inc()
        if model_apology:
            m.apologies.labels("model", "none", stratum["domain"], stratum["complexity"]).inc()
        total = time.perf_counter() - started
        m.request_duration.labels(model, action).observe(total)
        m.overhead_duration.labels(model).observe(max(total - upstream_seconds, 0.0))

    async def resolve_case(self, case_id: str, reviewer: Caller, decision: str, note: str,
                           raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Record a reviewer's resolution of an escalated case; returns (case, receipt id).

        The resolution is receipted with the reviewer as actor (policy = the compliance policy
        that escalated). Raises GatewayError 404 (unknown case) / 409 (already resolved) / 503.
        """
        store = self.ledger.store
        try:
            case = await store.get_case(case_id)
        except LedgerError:
            raise GatewayError(503, "The review queue is unavailable.", "api_error", "ledger_unavailable",
                               result="ledger_error") from None
        if case is None:
            raise GatewayError(404, f"No escalation with id '{case_id}'.", code="not_found")
        if case["status"] != "pending":
            raise GatewayError(409, f"Escalation '{case_id}' is already {case['status']}.", code="conflict")
        original = await store.get_by_id(case["receipt_id"])
        policy_id = original["policy_id"] if original else "compliance"
        resolved = {**case, "status": "resolved", "resolution": {
            "decision": decision, "note": note, "reviewer": reviewer.actor, "ts": utc_timestamp()}}
        receipt = new_receipt(
            request_id="req_" + uuid.uuid4().hex, actor=reviewer.actor, intent=case.get("domain", "general"),
            inputs_hash=json_hash(raw), outputs_hash=json_hash({k: v for k, v in resolved.items() if k != "messages"}),
            policy_id=policy_id, guardrail_action="resolve",
            evidence={"escalation_id": case_id, "decision": decision, "routing": "human",
                      "escalation_receipt_id": case["receipt_id"]},
            model=case.get("model", ""), provider="human", stratum={"domain": case.get("domain", "general"),
                                                                     "complexity": "critical", "provider": "human"})
        try:  # claim the case first: of two concurrent reviewers, one gets a 409
            await store.update_case(resolved, expected_status="pending")
        except LedgerConflict:
            raise GatewayError(409, f"Escalation '{case_id}' was resolved concurrently.", code="conflict") from None
        except LedgerError:
            raise GatewayError(503, "The review queue is unavailable.", "api_error", "ledger_unavailable",
                               result="ledger_error") from None
        try:
            sealed = (await self.sink.append([receipt], allow_pending=False)).receipts
            resolved["resolution"]["receipt_id"] = sealed[0]["receipt_id"]
            await store.update_case(resolved)
        except LedgerError:
            try:  # release the claim so the resolution can be retried
                await store.update_case(case, expected_status="resolved")
            except LedgerError:
                log.error("case %s is marked resolved but its receipt was not written", case_id)
            raise GatewayError(503, "The trust ledger is unavailable; the resolution was not recorded.",
                               "api_error", "ledger_unavailable", result="ledger_error") from None
        self.metrics.actions.labels("resolve").inc()
        self.metrics.receipts_written.labels("resolve").inc()
        self.metrics.escalations_pending.dec()
        return resolved, sealed[0]["receipt_id"]

