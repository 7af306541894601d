"""The request flow of one chat completion (docs/architecture.md "Request flow").

auth → parse + validate → **screen input** → **forward** (continuity summary, upstream via
litellm, output screen) → **build receipts** (one per action) → **commit** (append, metrics,
post-receipt hooks) → response.

This module coordinates I/O (provider, ledger) but knows nothing of aiohttp: the HTTP layer
(:mod:`proxy.server.http.routes.chat`, :mod:`proxy.server.http.middleware`) turns a :class:`ChatResult`
or a :class:`proxy.server.errors.GatewayError` into a response.

A forwarded stream (``stream: true`` and the input allowed or masked) returns as soon as the
provider accepted the call: :attr:`ChatResult.events` (:class:`proxy.server.flow.streaming.StreamedAnswer`)
then passes the answer through with the output guardrails enforced window by window, and appends
the receipts (:meth:`Gateway.seal_stream`) before ``[DONE]``.
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
from proxy.guardrails.fields import free_text_path
from proxy.guardrails.messages import DEFINITION_KEYS, map_text
from proxy.guardrails.plan import InputScreen
from proxy.kpi.strata import complexity_rule, declared_complexity
from proxy.primitives.canonical import CanonicalCache
from proxy.receipts.chain import Ledger
from proxy.receipts.ledgers import Ledgers
from proxy.server.admission.limits import (
    ScreenLanes,
    check_messages,
    consume_result,
    screen_size,
    text_chars,
    too_many_pieces,
)
from proxy.server.admission.sink import Appended, LedgerSink, ReceiptSink
from proxy.server.errors import Caller, GatewayError, guardrail_failed, ledger_unavailable
from proxy.server.flow.exchange import Exchange
from proxy.server.flow.policy_runtime import PolicyRuntime
from proxy.server.flow.receipting import Receipting, SealedHook, build_receipts, request_fields
from proxy.server.flow.review.escalations import Escalations
from proxy.server.flow.review.sealed_mapping import KEY_HEADER
from proxy.server.flow.streaming import StreamedAnswer
from proxy.server.flow.upstream import Upstream, UpstreamError, UpstreamResult
from proxy.server.flow.wire import ChatCompletionRequest, completion_body
from proxy.server.telemetry import tracing
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerError

__all__ = ["ChatResult", "Gateway"]

log = logging.getLogger("sonate.pipeline")

#: Text-only messages of at most this many characters have their continuity plan (a token count)
#: made on the event loop: for short texts that is cheaper than a hop to the detector threads, where
#: it would also queue behind other requests' screens (every route's tokenizer is loaded at start,
#: proxy.server.http.app.warm_up_upstream).
INLINE_PLAN_CHARS = 4000
#: Provider parameters an escalation case does not keep: ``user`` and ``metadata`` are the client's
#: own identifiers (not masked), the stream settings belong to the original exchange.
_CASE_DROPS = frozenset({"user", "metadata", "stream", "stream_options"})


@dataclass
class ChatResult:
    """What the HTTP layer sends: the chat.completion ``body``; ``chunks``, the content deltas to
    stream (empty: split the final content); the ``receipt_id`` of the decisive receipt, the
    decisive ``action`` and extra response ``headers``. ``events``: a forwarded stream still to be
    sent (``body`` is then empty; ``receipt_id`` and ``action`` are known before its first byte:
    the action decided on input)."""

    body: dict[str, Any]
    chunks: list[str]
    stream: bool
    include_usage: bool
    receipt_id: str
    action: str
    headers: dict[str, str] = field(default_factory=dict)
    events: StreamedAnswer | None = None


def _check_passthrough(req: ChatCompletionRequest, forbidden: list[str]) -> None:
    """400 for an unknown field the operator forbids, or one carrying free text (unscreened)."""
    for name, value in (req.model_extra or {}).items():
        if name in forbidden:
            raise GatewayError(400, f"The parameter '{name}' is not allowed by this gateway.",
                               param=name, code="unsupported_parameter")
        where = free_text_path(value, name)
        if where is not None:
            raise GatewayError(400, f"The parameter '{where}' carries free text; this gateway forwards text "
                                    "only in the fields its guardrails screen (the messages).",
                               param=where, code="unsupported_parameter")


def _bounded_screen(engine: GuardrailEngine, messages: list[dict[str, Any]], definitions: dict[str, Any] | None,
                    side_by_side: bool, max_pieces: int) -> InputScreen:
    """``engine.screen_input`` (in a lane thread), unless the inputs hold more than ``max_pieces``
    texts screened one by one (0: no bound): GatewayError 413 before any detector runs. Counted here,
    exactly, rather than on the event loop: the walk copies the inputs (:func:`screen_size`, an upper
    bound, chose the lane)."""
    if max_pieces:
        pieces = engine.count_pieces(messages, definitions)
        if pieces > max_pieces:
            raise too_many_pieces(pieces, max_pieces)
    return engine.screen_input(messages, definitions, side_by_side)


def _upstream_params(x: Exchange) -> dict[str, Any]:
    """The provider parameters, with the tool definitions, ``user`` and the passed-through fields
    as the input screen left them (masked)."""
    params = x.req.upstream_params()
    if x.screen is not None and x.screen.definitions:
        params.update(x.screen.definitions)
    return params


class Gateway:
    """Runs chat completions through guardrails, provider and ledger.

    ``executor`` runs CPU-bound guardrail work off the event loop (a thread pool; None: the
    loop's default). ``sink``: where receipts go (the ledger, or through a spool; default
    :class:`LedgerSink`, fail_closed). ``lanes``: where the input and output screens run
    (:class:`proxy.server.admission.limits.ScreenLanes`: a large-input lane, bounded queues → 503; default:
    ``executor`` with no bound). ``engine``: a :class:`PolicyRuntime` (policy sets, hot reload) or
    one :class:`GuardrailEngine` served as the only set; each request reads the set it was accepted
    with from its :class:`Exchange`.
    """

    def __init__(self, config: Config, engine: GuardrailEngine | PolicyRuntime, upstream: Upstream, ledger: Ledger,
                 metrics: Metrics, executor: Executor | None = None, sink: ReceiptSink | None = None,
                 lanes: ScreenLanes | None = None, ledgers: Ledgers | None = None) -> None:
        """Bind the services; no I/O. ``ledgers``: every ledger of a partitioned deployment
        (:mod:`proxy.receipts.ledgers`; review steps follow their case's ledger)."""
        self.config = config
        #: The policy sets and their versions (docs/operations.md "Policy sets and hot reload").
        self.runtime = engine if isinstance(engine, PolicyRuntime) else PolicyRuntime.fixed(engine)
        self.upstream = upstream
        self.ledger = ledger
        #: Where receipts go (docs/operations.md "Fault policy"): the ledger (fail_closed) or a spool.
        self.sink: ReceiptSink = sink or LedgerSink(ledger, metrics)
        self.metrics = metrics
        #: The one receipt path (build, commit, count, post-receipt hooks).
        self.receipting = Receipting(self.sink, metrics)
        self.executor = executor
        self.lanes = lanes or ScreenLanes(executor, small_slots=1 << 30)
        #: Chat requests between admission and their answer (a stream: until it opens), on the loop.
        self.in_progress = 0
        #: The human review queue of escalated requests (:mod:`proxy.server.flow.review.escalations`).
        self.escalations = Escalations(ledger.store, self.receipting, metrics, config.review.allow_self_resolution,
                                       find=None if ledgers is None else ledgers.get_by_id)
        #: Called after a request's receipts are sealed, as ``await hook(sealed, messages, body,
        #: model_apology)`` (e.g. the adjudication queue, proxy.server.flow.review.adjudication); a failing
        #: hook is logged and does not fail the request (its receipts are already durable).
        self.sealed_hooks: list[SealedHook] = []
        #: The RFC 8785 bytes of the messages of recent requests, for ``inputs_hash``: a resent
        #: history is not canonicalised again (the hash is the same, of the same bytes).
        self.canonical_messages = CanonicalCache()

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def chat(self, raw: dict[str, Any], req: ChatCompletionRequest, caller: Caller,
                   complexity_header: str | None = None, endpoint: str | None = None) -> ChatResult:
        """Answer one chat completion request (``raw``: the JSON object as received, hashed into
        the receipts; ``complexity_header``: ``x-sonate-complexity``, the declared stratum;
        ``endpoint``: written as ``evidence.endpoint`` when ``req`` translates another API's request).

        Raises GatewayError for client errors (400/404), provider failures (mapped status) and
        an unavailable ledger (503, fail_closed: no response leaves without its receipts).
        """
        self.in_progress += 1
        try:
            return await self._chat(raw, req, caller, complexity_header, endpoint)
        finally:
            self.in_progress -= 1

    async def _chat(self, raw: dict[str, Any], req: ChatCompletionRequest, caller: Caller,
                    complexity_header: str | None, endpoint: str | None) -> ChatResult:
        """:meth:`chat`'s work (a streamed answer is counted in progress until its stream opens)."""
        started = time.perf_counter()
        x = self._accept(raw, req, caller, complexity_header)
        x.started, x.endpoint = started, endpoint
        tracing.start_operation("chat", req.model, x.route.provider, request_id=x.request_id, actor=x.caller.actor,
                                stream=bool(req.stream))
        x.ledger_check = asyncio.ensure_future(self.sink.before_upstream())  # overlaps the input screen
        x.ledger_check.add_done_callback(consume_result)  # awaited only when the request is forwarded
        screen = await self._screen_input(x)
        if screen.notice and screen.action not in ("refuse", "escalate"):  # Compliance `ambiguous: notice`
            x.headers["x-sonate-notice"] = screen.notice
        if screen.action == "refuse":
            x.body = completion_body(model=req.model, content=screen.apology, finish_reason="content_filter")
        elif screen.action == "escalate":
            x.body = completion_body(model=req.model, content=screen.notice, finish_reason="stop")
            x.headers["x-sonate-escalation-id"] = screen.escalation_id or ""
        elif req.stream:
            return await self._open_stream(x)
        else:
            await self._forward(x)
        receipts = await self._build_receipts(x)
        appended = await self._commit(x, receipts)
        await self._after_commit(x, appended)
        return ChatResult(x.body, x.chunks, req.stream, bool(req.stream_options and req.stream_options.include_usage),
                          appended.receipts[-1]["receipt_id"], decisive_action([d.action for d in x.decisions]),
                          x.headers)

    # -- steps ------------------------------------------------------------------------------------
    def _accept(self, raw: dict[str, Any], req: ChatCompletionRequest, caller: Caller,
                complexity_header: str | None) -> Exchange:
        """Check the route, the declared complexity and the request's canonical hash (400/404)."""
        route = self.config.route(req.model)
        if route is None:
            raise GatewayError(404, "The model named in 'model' does not exist or you do not have access to it "
                                    "(GET /v1/models lists them).",
                               code="model_not_found", param="model")
        try:
            declared = declared_complexity(complexity_header, req.metadata)
        except ValueError as exc:
            raise GatewayError(400, str(exc), param="metadata.complexity") from None
        _check_passthrough(req, self.config.server.forbidden_params)
        limits = self.config.server.limits
        messages = req.message_dicts()
        size = check_messages(messages, limits.max_messages, limits.max_message_chars)
        try:
            inputs_hash = self.canonical_messages.json_hash(raw, "messages")
        except Exception as exc:  # rfc8785 refuses e.g. integers beyond IEEE 754 precision
            raise GatewayError(400, f"The request JSON cannot be canonicalized (RFC 8785): {exc}",
                               code="invalid_json") from None
        return Exchange(req, caller, route, declared, inputs_hash, messages, policy=self.runtime.bind(caller.actor),
                        size=size)

    async def _screen_input(self, x: Exchange) -> InputScreen:
        """Run the input guardrails (timed in ``sonate_guardrail_duration_seconds{stage="input"}``) in the
        lane for the messages' size; GatewayError 503 ``overloaded`` when that lane is saturated."""
        t = time.perf_counter()
        params = x.req.upstream_params()  # tools, tool_choice, response_format, user, extra_body: client text too
        definitions = {k: params[k] for k in DEFINITION_KEYS if k in params} or None
        # Privacy beside Safety/Compliance only when no other request is in progress: under load the
        # others already use the CPUs, and two threads per screen only contend for the GIL
        side_by_side = self.in_progress <= 1
        size = x.size + screen_size(definitions)
        with tracing.span("guardrails.input") as traced:
            try:
                screen = x.screen = await self.lanes.run(
                    _bounded_screen, x.policy.engine, x.messages, definitions, side_by_side,
                    self.config.server.limits.max_screen_pieces, chars=size.chars, pieces=size.pieces)
            except GatewayError:
                raise
            except Exception as exc:  # a detector raised: fail closed
                raise guardrail_failed("input", x.request_id, exc) from None
            tracing.record_screen(traced, screen.action, screen.triggers, screen.domain)
        self.metrics.guardrail_duration.labels("input").observe(time.perf_counter() - t)
        x.decisions, x.triggers = list(screen.decisions), list(screen.triggers)
        return screen

    async def before_upstream(self, request_id: str, check: Awaitable[None] | None = None) -> None:
        """fail_closed: GatewayError 503 ``ledger_unavailable`` while the ledger is known to be down,
        so nothing is forwarded whose receipt could not be written (the sink's check; ``check``: that
        check already started for this request, see :attr:`Exchange.ledger_check`)."""
        try:
            await (check if check is not None else self.sink.before_upstream())
        except LedgerError as exc:
            log.error("ledger unavailable before the model call for %s: %s", request_id, exc)
            raise ledger_unavailable("the request was not forwarded (fail_closed)") from None

    async def _forward(self, x: Exchange) -> None:
        """Continuity summary (if planned), the model call, then the output guardrails.

        fail_closed: nothing is forwarded while the ledger is known to be down (503).
        """
        await self.before_upstream(x.request_id, x.ledger_check)
        try:
            messages = await self._continuity(x)
            x.result = await self.upstream.complete(x.req.model, messages, _upstream_params(x))
        except UpstreamError as exc:
            raise GatewayError(exc.status, exc.message, exc.type, exc.code, result="upstream_error") from None
        x.upstream_seconds += x.result.duration_seconds
        self._observe_upstream(x.req.model, x.result)
        await self._screen_output(x, x.result)

    async def _open_stream(self, x: Exchange) -> ChatResult:
        """Continuity summary (if planned), then open the provider stream; the answer is passed
        through by the returned result's ``events``. Errors before the first byte are the same
        as :meth:`_forward`'s (503 fail_closed, mapped provider errors)."""
        await self.before_upstream(x.request_id, x.ledger_check)
        try:
            messages = await self._continuity(x)
            stream = await self.upstream.open_stream(x.req.model, messages, _upstream_params(x))
        except UpstreamError as exc:
            raise GatewayError(exc.status, exc.message, exc.type, exc.code, result="upstream_error") from None
        receipt_id = "rcpt_" + uuid.uuid4().hex
        include_usage = bool(x.req.stream_options and x.req.stream_options.include_usage)
        x.headers["x-sonate-request-id"] = x.request_id
        return ChatResult({}, [], True, include_usage, receipt_id, decisive_action([d.action for d in x.decisions]),
                          x.headers, StreamedAnswer(self, x, stream, include_usage, receipt_id))

    async def seal_stream(self, x: Exchange, result: UpstreamResult, body: dict[str, Any],
                          decisions: list[Decision], model_apology: bool, receipt_id: str,
                          stream: dict[str, Any]) -> Appended:
        """Receipts of a passed-through stream: ``body`` is the chat.completion the delivered
        chunks assemble to (its hash is ``outputs_hash``), ``decisions`` the output stage's,
        ``receipt_id`` the id sent in the headers (given to the decisive, last, receipt),
        ``stream`` (``ended``, ``delivered_chars``) recorded in its evidence.

        Raises GatewayError 503 when they cannot be appended (fail_closed).
        """
        x.result, x.body, x.model_apology = result, body, model_apology
        x.upstream_seconds += result.duration_seconds
        if result.response:
            self._observe_upstream(x.req.model, result)
        x.decisions.extend(decisions)
        x.triggers.extend(decisions)
        receipts = await self._build_receipts(x)
        receipts[-1]["receipt_id"] = receipt_id
        receipts[-1]["evidence"]["stream"] = stream
        appended = await self._commit(x, receipts)
        await self._after_commit(x, appended)
        return appended

    async def draft_escalation(self, case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """An approved escalation's answer (:data:`proxy.server.flow.review.escalations.Drafter`): the case's
        masked messages and parameters sent to its model, the answer screened by the output
        policies of the requester's policy set, Privacy's placeholders kept (the requester restores
        them with its key). Returns (chat.completion, evidence of the call: ``provider``, ``usage``,
        ``output_decisions``).

        Raises GatewayError as :meth:`chat` does: 409 when the case's model is no longer routed,
        503 while the ledger is down (fail_closed), the provider's mapped errors.
        """
        route = self.config.route(case["model"])
        if route is None:
            raise GatewayError(409, "The escalated request's model is no longer served by this gateway.",
                               code="model_not_found")
        policy = self.runtime.bind(case["actor"])
        await self.before_upstream(case["id"])
        try:
            result = await self.upstream.complete(case["model"], case["messages"], dict(case.get("params") or {}))
        except UpstreamError as exc:
            raise GatewayError(exc.status, exc.message, exc.type, exc.code, result="upstream_error") from None
        self._observe_upstream(case["model"], result)
        choice = (result.response.get("choices") or [{}])[0]
        tool_calls = (choice.get("message") or {}).get("tool_calls")
        try:
            out = await self.lanes.run(policy.engine.screen_output, result.content, None, tool_calls,
                                       chars=len(result.content or "") + text_chars(tool_calls), admit=False)
        except GatewayError:
            raise
        except Exception as exc:  # a detector raised: the answer is not kept
            raise guardrail_failed("output", case["id"], exc) from None
        body = completion_body(
            model=case["model"], content=out.text if (out.text or not tool_calls) else None,
            finish_reason="content_filter" if out.refused else (choice.get("finish_reason") or "stop"),
            usage=result.usage, completion_id=result.response.get("id"), created=result.response.get("created"),
            tool_calls=out.tool_calls)
        decisions = [{"policy_id": d.policy_id, "action": d.action, "stage": d.stage} for d in out.decisions]
        usage = {k: int(result.usage.get(k) or 0) for k in ("prompt_tokens", "completion_tokens")}
        return body, {"provider": route.provider, "usage": usage, "output_decisions": decisions,
                      **policy.evidence()}

    async def _continuity(self, x: Exchange) -> list[dict[str, Any]]:
        """The messages for the model: the screened ones, or a continuity policy's summary of them."""
        assert x.screen is not None
        engine, messages = x.policy.engine, x.screen.messages
        if all(isinstance(m.get("content"), (str, type(None))) for m in messages) \
                and text_chars(messages) <= INLINE_PLAN_CHARS:  # (image parts may be fetched to be counted)
            plan = engine.continuity_plan(messages, x.req.model)
        else:
            plan = await self._run(engine.continuity_plan, messages, x.req.model)
        if plan is None:
            return messages
        summarizer = plan.policy.summary_model or x.req.model
        summary = await self.upstream.complete(summarizer, engine.summary_request(plan), {})
        x.upstream_seconds += summary.duration_seconds
        self._observe_upstream(summarizer, summary)
        messages, decision = await self._run(engine.apply_summary, plan, summary.content, x.req.model)
        x.decisions.append(decision)
        x.triggers.append(decision)
        x.headers["x-sonate-continuity"] = "summarized"
        return messages

    async def _screen_output(self, x: Exchange, result: UpstreamResult) -> None:
        """Run the output guardrails on the model's answer and build the response body."""
        assert x.screen is not None
        choice = (result.response.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        t = time.perf_counter()
        tool_calls = message.get("tool_calls")
        with tracing.span("guardrails.output") as traced:
            try:
                out = await self.lanes.run(x.policy.engine.screen_output, result.content, x.screen.masker, tool_calls,
                                           chars=len(result.content or "") + text_chars(tool_calls), admit=False)
            except GatewayError:
                raise
            except Exception as exc:  # a detector raised: the answer is not delivered
                raise guardrail_failed("output", x.request_id, exc) from None
            tracing.record_screen(
                traced, "refuse" if out.refused else decisive_action([d.action for d in out.decisions]),
                out.decisions)
        self.metrics.guardrail_duration.labels("output").observe(time.perf_counter() - t)
        x.decisions.extend(out.decisions)
        x.triggers.extend(out.decisions)
        x.model_apology = out.model_apology
        x.body = completion_body(
            model=x.req.model,
            content=out.text if (out.text or not message.get("tool_calls")) else None,
            finish_reason="content_filter" if out.refused else (choice.get("finish_reason") or "stop"),
            usage=result.usage, completion_id=result.response.get("id"), created=result.response.get("created"),
            tool_calls=out.tool_calls)
        if not out.refused and out.text == result.content:
            x.chunks = result.chunks  # the provider's own deltas still spell the answer

    async def _build_receipts(self, x: Exchange) -> list[dict[str, Any]]:
        """One unsigned receipt per performed action (one ``allow`` receipt when none), with the
        request's stratum (domain, complexity, provider)."""
        assert x.screen is not None
        x.stratum = {"domain": x.screen.domain, "complexity": await self._complexity(x),
                     "provider": x.route.provider}
        fields = request_fields(request_id=x.request_id, actor=x.caller.actor, intent=x.screen.domain,
                                inputs_hash=x.inputs_hash, body=x.body, model=x.req.model,
                                provider=x.route.provider, stratum=x.stratum)
        # history turns the proxy already refused or escalated, withheld from the model (docs/architecture.md)
        withheld = {"withheld_turns": [s.evidence() for s in x.screen.settled]} if x.screen.settled else {}
        # the policy set's name and version go into every receipt
        receipts = build_receipts(x.decisions, fields, {**withheld, **x.policy.evidence()}, x.policy.policies)
        if x.model_apology:  # FAR-A counts model-initiated apologies too: the receipt must say so
            receipts[-1]["evidence"]["model_apology"] = True
        for receipt in receipts if x.endpoint else []:
            receipt["evidence"]["endpoint"] = x.endpoint
        return receipts

    async def _complexity(self, x: Exchange) -> str:
        """The declared complexity, else the rule's (proxy.kpi.strata.complexity_rule)."""
        if x.declared:
            return x.declared
        assert x.screen is not None
        prompt_tokens = x.result.usage["prompt_tokens"] if x.result else 0
        regulated = x.screen.action == "escalate" or any(d.kind == "compliance" for d in x.triggers)
        return complexity_rule(
            prompt_tokens=prompt_tokens or await self._run(x.policy.engine.count_tokens, x.req.model, x.messages),
            user_turns=sum(1 for m in x.messages if m.get("role") == "user"),
            uses_tools=bool(x.req.tools), regulated=regulated)

    async def _commit(self, x: Exchange, receipts: list[dict[str, Any]]) -> Appended:
        """Open the escalation case (if any), then append the receipts; 503 when they cannot be
        written (the case is aborted then)."""
        assert x.screen is not None
        escalation_id = x.screen.escalation_id if x.screen.action == "escalate" else None
        if escalation_id:
            x.headers[KEY_HEADER] = await self.escalations.open(
                escalation_id, request_id=x.request_id, caller=x.caller, model=x.req.model, domain=x.screen.domain,
                receipt_id=receipts[-1]["receipt_id"], messages=x.screen.messages,
                mapping=x.screen.masker.mapping if x.screen.masker else {}, api=x.endpoint or "chat",
                params={k: v for k, v in _upstream_params(x).items() if k not in _CASE_DROPS})
        abort = (lambda: self.escalations.abort(escalation_id)) if escalation_id else None
        return await self.receipting.commit(x.request_id, receipts, undo=abort)

    async def _after_commit(self, x: Exchange, appended: Appended) -> None:
        """Count the request, set the receipt headers and run the post-receipt hooks."""
        assert x.screen is not None
        self._observe_request(x, appended.receipts, written=not appended.pending)
        x.headers["x-sonate-receipt-status"] = "pending" if appended.pending else "appended"
        tracing.finish_operation(
            receipt_id=appended.receipts[-1]["receipt_id"], action=decisive_action([d.action for d in x.decisions]),
            policies=[d.policy_id for d in x.triggers], receipt_status=x.headers["x-sonate-receipt-status"],
            response=x.result.response if x.result else None, usage=x.result.usage if x.result else None,
            finish_reasons=[c.get("finish_reason") for c in x.body.get("choices") or []])
        await self.receipting.after_commit(self.sealed_hooks, x.request_id, appended.receipts,
                                           lambda: self._review_view(x), x.model_apology)
        x.headers["x-sonate-request-id"] = x.request_id

    async def _review_view(self, x: Exchange) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(messages, body) as the model saw them, for the post-receipt hooks (review items keep no
        personal data that Privacy hid; docs/security.md "Review"): the masked messages (a refused
        prompt, never masked on its way, is masked here) and the response with Privacy's
        placeholders put back in place of the originals the client got restored."""
        assert x.screen is not None
        if x.screen.action == "refuse":
            return await self._run(x.policy.engine.mask_messages, x.messages), x.body
        if x.screen.masker is None or not x.screen.masker.mapping:
            return x.screen.messages, x.body
        remask = x.screen.masker.remask
        choices = [{**c, "message": map_text(c.get("message") or {}, remask)} for c in x.body.get("choices", [])]
        return x.screen.messages, {**x.body, "choices": choices}

    # -- metrics ----------------------------------------------------------------------------------
    def _observe_upstream(self, model: str, result: UpstreamResult) -> None:
        """Count one provider call: duration, time to first token, tokens and cost."""
        route = self.config.route(model)
        provider = route.provider if route else "unknown"
        self.metrics.upstream_duration.labels(model, provider).observe(result.duration_seconds)
        if result.ttft_seconds is not None:
            self.metrics.time_to_first_token.labels(model, provider).observe(result.ttft_seconds)
        self.metrics.tokens.labels(model, provider, "prompt").inc(result.usage["prompt_tokens"])
        self.metrics.tokens.labels(model, provider, "completion").inc(result.usage["completion_tokens"])
        self.metrics.cost.labels(model, provider).inc(result.cost_usd)

    def _observe_request(self, x: Exchange, sealed: list[dict[str, Any]], written: bool = True) -> None:
        """Count one answered request: interactions, triggers, actions, receipts, evidence, apologies
        and durations (spooled receipts count as written when replayed, proxy.server.admission.sink)."""
        m, model = self.metrics, x.req.model
        domain, complexity = x.stratum["domain"], x.stratum["complexity"]
        m.interactions.labels(model, x.route.provider, domain, complexity).inc()
        self.receipting.count(x.triggers, sealed, written, x.policy.policies)
        for receipt in sealed:
            if receipt["guardrail_action"] == "refuse":
                m.apologies.labels("guardrail", receipt["policy_id"], domain, complexity).inc()
        if x.model_apology:
            m.apologies.labels("model", "none", domain, complexity).inc()
        total = time.perf_counter() - x.started
        m.request_duration.labels(model, decisive_action([d.action for d in x.decisions])).observe(total)
        m.overhead_duration.labels(model).observe(max(total - x.upstream_seconds, 0.0))
