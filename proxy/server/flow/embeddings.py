"""The request flow of one ``POST /v1/embeddings`` (docs/operations.md "Embeddings").

accept (route, declared complexity, pass-through checks, token arrays refused, canonical hash) →
**screen input** (Privacy masks every input string; Safety judges them when
``server.embeddings_safety`` is on) → **forward** the masked strings (litellm ``aembedding``) →
**one receipt** (``privacy`` mask, ``matrix`` allow, or the Safety policy's refuse) appended
before the response leaves (fail_closed as chat) → metrics. Compliance and Continuity do not apply:
an embedding is not an answer a human reads, and there is no conversation to summarize.

The vectors the client receives are those of the MASKED text (placeholders such as
``<PERSON_1>``); nothing is restored. A Safety refusal is an OpenAI error: HTTP 400,
``code: "content_policy_violation"``, ``param: "input"``, with the receipt headers.

Reuses the :class:`proxy.server.flow.pipeline.Gateway`'s services (engine, upstream, sink, lanes,
metrics); knows nothing of aiohttp.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.guardrails.decisions import Decision, privacy_decision, safety_decision, worst_scores
from proxy.guardrails.detectors.pii import PiiMasker
from proxy.guardrails.engine import GENERAL_DOMAIN, GuardrailEngine
from proxy.guardrails.fields import free_text_path
from proxy.kpi.strata import complexity_rule, declared_complexity
from proxy.primitives.canonical import json_hash
from proxy.server.admission.limits import ScreenSize, too_many_pieces
from proxy.server.errors import Caller, GatewayError
from proxy.server.flow.pipeline import Gateway
from proxy.server.flow.policy_runtime import ActivePolicySet
from proxy.server.flow.receipting import build_receipts, request_fields
from proxy.server.flow.upstream import UpstreamError, UpstreamResult
from proxy.server.flow.wire import EmbeddingRequest, embedding_body, error_body
from proxy.server.telemetry import tracing

__all__ = ["EmbeddingResult", "EmbeddingScreen", "Embeddings", "REFUSAL_CODE", "screen_embedding_inputs"]

#: OpenAI error code of a Safety refusal of an embeddings request.
REFUSAL_CODE = "content_policy_violation"
#: ``evidence.endpoint`` of every embeddings receipt (a chat receipt has none).
ENDPOINT = "embeddings"


@dataclass
class EmbeddingScreen:
    """The input stage of an embeddings request: ``action`` (refuse / mask / allow), ``texts`` and
    ``params`` as they may leave (masked), ``decisions`` performed (at most one: one receipt) and
    every ``triggers`` (for metrics)."""

    action: str
    texts: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    triggers: list[Decision] = field(default_factory=list)


def _leaves(value: Any, path: str) -> list[tuple[str, str]]:
    """(path, string) of every string leaf of ``value`` in document order (``user``,
    ``extra_body.input_type``, ``extra_body.tags.0``); ``value`` is parsed JSON, already bounded in
    depth (``server.limits.max_json_depth``)."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}.{i}")]
    return []


def _map_leaves(value: Any, fn: Any) -> Any:
    """``value`` with every string leaf replaced by ``fn(leaf)``, in :func:`_leaves` order."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_leaves(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_leaves(v, fn) for v in value]
    return value


def screen_embedding_inputs(engine: GuardrailEngine, texts: list[str], safety: bool,
                            params: dict[str, Any] | None = None) -> EmbeddingScreen:
    """Safety (when ``safety``) then Privacy over ``texts`` with ``engine``'s input policies.

    Safety: every input Safety policy judges the non-blank texts (worst score per category,
    :func:`proxy.guardrails.decisions.worst_scores`); the first that fires refuses. Privacy: the
    first input Privacy policy masks each text, then every string leaf of the provider ``params``
    (``user``, passed-through fields: client text too, as in chat completions), with typed
    placeholders numbered over the whole request (:class:`PiiMasker`). Receipt spans carry
    ``message`` = the input's index and ``field`` = ``"input"`` (a parameter: ``message`` null,
    ``field`` its path, e.g. ``user``). CPU-bound: run it in a guardrail lane.
    """
    params = params or {}
    if safety:
        judged = [t for t in texts if t.strip()]
        fired = [safety_decision(p, "input", worst_scores(engine.detect(p, judged)), engine.detectors[p.id])
                 for p in engine.policies if p.kind == "safety" and "input" in p.stages and judged]
        refusals = [d for d in fired if d is not None]
        if refusals:
            return EmbeddingScreen("refuse", texts, params, [refusals[0]], refusals)
    leaves = _leaves(params, "")
    where: list[int | None] = [*range(len(texts)), *[None] * len(leaves)]
    fields = ["input"] * len(texts) + [path for path, _ in leaves]
    for policy in (p for p in engine.policies if p.kind == "privacy" and "input" in p.stages):
        spans = engine.detect(policy, texts + [text for _, text in leaves])
        if not any(spans):
            break
        masker = PiiMasker()
        remaining = iter(spans)
        masked = [masker.mask(text, next(remaining)) for text in texts]
        masked_params = _map_leaves(params, lambda text: masker.mask(text, next(remaining)))  # noqa: B023  (runs now)
        decision = privacy_decision(policy, "input", where, spans, engine.detectors[policy.id], fields=fields)
        return EmbeddingScreen("mask", masked, masked_params, [decision], [decision])
    return EmbeddingScreen("allow", list(texts), params)


def _screened(params: dict[str, Any]) -> dict[str, Any]:
    """The client-written provider parameters Privacy screens: ``user`` and ``extra_body`` (not
    litellm's own ``allowed_openai_params``, nor numbers)."""
    return {k: v for k, v in params.items() if k in ("user", "extra_body")}


@dataclass
class EmbeddingResult:
    """What the HTTP layer sends: the embeddings list ``body``, the receipt id, the action and
    extra headers (``x-sonate-request-id``, ``x-sonate-receipt-status``)."""

    body: dict[str, Any]
    receipt_id: str
    action: str
    headers: dict[str, str]


@dataclass
class _Call:
    """One embeddings request's state."""

    req: EmbeddingRequest
    caller: Caller
    provider: str
    declared: str | None
    inputs_hash: str
    texts: list[str]
    #: The caller's policy set, chosen on acceptance (:meth:`PolicyRuntime.bind`).
    policy: ActivePolicySet
    request_id: str = field(default_factory=lambda: "req_" + uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    screen: EmbeddingScreen | None = None
    result: UpstreamResult | None = None


class Embeddings:
    """Runs embeddings requests through the gateway's guardrails, provider and ledger."""

    def __init__(self, gateway: Gateway) -> None:
        """Share ``gateway``'s config, engine, upstream, sink, lanes and metrics; no I/O."""
        self.gateway = gateway

    async def embed(self, raw: dict[str, Any], req: EmbeddingRequest, caller: Caller,
                    complexity_header: str | None = None) -> EmbeddingResult:
        """Answer one embeddings request (``raw``: the JSON object as received, hashed into the receipt).

        Raises GatewayError: 400 (token arrays, empty strings, forbidden or free-text extra fields,
        un-canonicalizable JSON, a Safety refusal ``content_policy_violation`` with its receipt
        headers), 404 (unknown model), 413/503 (guardrail lanes), mapped provider errors, 503
        ``ledger_unavailable`` (fail_closed: nothing forwarded or returned without its receipt).
        """
        g = self.gateway
        x = self._accept(raw, req, caller, complexity_header)
        tracing.start_operation("embeddings", req.model, x.provider, request_id=x.request_id, actor=x.caller.actor)
        t = time.perf_counter()
        params = req.upstream_params()
        screened = _screened(params)
        leaves = [text for _, text in _leaves(screened, "")]  # what the screen reads besides the inputs
        size = ScreenSize(sum(map(len, x.texts)) + sum(map(len, leaves)), len(x.texts) + len(leaves))
        max_pieces = g.config.server.limits.max_screen_pieces
        if max_pieces and size.pieces > max_pieces:
            raise too_many_pieces(size.pieces, max_pieces)
        with tracing.span("guardrails.input") as traced:
            screen = x.screen = await g.lanes.run(screen_embedding_inputs, x.policy.engine, x.texts,
                                                  g.config.server.embeddings_safety, screened,
                                                  chars=size.chars, pieces=size.pieces)
            tracing.record_screen(traced, screen.action, screen.triggers)
        g.metrics.guardrail_duration.labels("input").observe(time.perf_counter() - t)
        if screen.action == "refuse":
            policy = screen.decisions[0].policy_id
            error = error_body(f"The input was refused by the gateway's safety policy '{policy}'; "
                               "it was not sent to the model.", param="input", code=REFUSAL_CODE)
            receipt_id, headers = await self._seal(x, error)
            raise GatewayError(400, error["error"]["message"], code=REFUSAL_CODE, param="input",
                               headers={**headers, "x-sonate-receipt-id": receipt_id,
                                        "x-sonate-guardrail-action": "refuse"})
        await self._forward(x)
        assert x.result is not None
        vectors = [item["embedding"] for item in sorted(x.result.response.get("data") or [],
                                                        key=lambda item: item.get("index", 0))]
        body = embedding_body(model=req.model, vectors=vectors, encoding_format=req.encoding_format,
                              usage=x.result.response.get("usage") or {})
        receipt_id, headers = await self._seal(x, body)
        return EmbeddingResult(body, receipt_id, screen.action, headers)

    def _accept(self, raw: dict[str, Any], req: EmbeddingRequest, caller: Caller,
                complexity_header: str | None) -> _Call:
        """Route, declared complexity, extra fields, screenable input, canonical hash (400/404)."""
        route = self.gateway.config.route(req.model)
        if route is None:
            raise GatewayError(404, f"The model '{req.model}' does not exist or you do not have access to it.",
                               code="model_not_found", param="model")
        if isinstance(route.litellm_params.get("mock_response"), str):  # e.g. the demo route
            raise GatewayError(400, f"The model '{req.model}' is a mock chat route (litellm mock_response) and "
                                    "serves no embeddings; route an embeddings model in model_list.",
                               param="model", code="model_not_supported")
        try:
            declared = declared_complexity(complexity_header, None)
        except ValueError as exc:
            raise GatewayError(400, str(exc), param="x-sonate-complexity") from None
        for name, value in (req.model_extra or {}).items():
            if name in self.gateway.config.server.forbidden_params or free_text_path(value, name) is not None:
                raise GatewayError(400, f"The parameter '{name}' is not allowed by this gateway (forbidden, or "
                                        "free text the guardrails do not screen).", param=name,
                                   code="unsupported_parameter")
        texts = req.texts()
        if texts is None:
            raise GatewayError(400, "Token-array input cannot be screened by this gateway's guardrails; send "
                                    "the input as a string or a list of strings.", param="input",
                               code="unsupported_input")
        if any(not t for t in texts):
            raise GatewayError(400, "The input must not contain empty strings.", param="input", code="invalid_value")
        try:
            inputs_hash = json_hash(raw)
        except Exception as exc:  # rfc8785 refuses e.g. integers beyond IEEE 754 precision
            raise GatewayError(400, f"The request JSON cannot be canonicalized (RFC 8785): {exc}",
                               code="invalid_json") from None
        return _Call(req, caller, route.provider, declared, inputs_hash, texts,
                     self.gateway.runtime.bind(caller.actor))  # this request's policy set

    async def _forward(self, x: _Call) -> None:
        """The provider call with the screened texts (503 fail_closed while the ledger is down)."""
        g = self.gateway
        await g.before_upstream(x.request_id)
        assert x.screen is not None
        try:
            x.result = await g.upstream.embed(x.req.model, x.screen.texts,
                                              {**x.req.upstream_params(), **x.screen.params})
        except UpstreamError as exc:
            raise GatewayError(exc.status, exc.message, exc.type, exc.code, result="upstream_error") from None
        g.metrics.upstream_duration.labels(x.req.model, x.provider).observe(x.result.duration_seconds)
        g.metrics.tokens.labels(x.req.model, x.provider, "prompt").inc(x.result.usage["prompt_tokens"])
        g.metrics.cost.labels(x.req.model, x.provider).inc(x.result.cost_usd)

    async def _seal(self, x: _Call, body: dict[str, Any]) -> tuple[str, dict[str, str]]:
        """Build and append the request's one receipt (``outputs_hash`` over ``body``), count it;
        (receipt id, headers). 503 when it cannot be appended (fail_closed)."""
        g = self.gateway
        assert x.screen is not None
        stratum = {"domain": GENERAL_DOMAIN, "complexity": await self._complexity(x), "provider": x.provider}
        fields = request_fields(request_id=x.request_id, actor=x.caller.actor, intent=GENERAL_DOMAIN,
                                inputs_hash=x.inputs_hash, body=body, model=x.req.model, provider=x.provider,
                                stratum=stratum)
        endpoint = {"endpoint": ENDPOINT, "inputs": len(x.texts), **x.policy.evidence()}
        receipts = build_receipts(x.screen.decisions, fields, endpoint, self._evaluated(x))
        appended = await g.receipting.commit(x.request_id, receipts)
        self._observe(x, appended.receipts, written=not appended.pending)
        tracing.finish_operation(
            receipt_id=appended.receipts[-1]["receipt_id"], action=x.screen.action,
            policies=[d.policy_id for d in x.screen.triggers],
            receipt_status="pending" if appended.pending else "appended",
            response=x.result.response if x.result else None,
            usage={"prompt_tokens": x.result.usage["prompt_tokens"]} if x.result else None)
        return appended.receipts[-1]["receipt_id"], {
            "x-sonate-request-id": x.request_id,
            "x-sonate-receipt-status": "pending" if appended.pending else "appended"}

    def _evaluated(self, x: _Call) -> list[str]:
        """Ids of the policies an embeddings request is screened by (input Privacy; Safety when on)."""
        kinds = ("privacy", "safety") if self.gateway.config.server.embeddings_safety else ("privacy",)
        return [p.id for p in x.policy.engine.policies if p.kind in kinds and "input" in p.stages]

    async def _complexity(self, x: _Call) -> str:
        """The declared complexity, else the rule's over the provider's prompt tokens (or litellm's count)."""
        if x.declared:
            return x.declared
        tokens = x.result.usage["prompt_tokens"] if x.result else 0
        if not tokens:
            messages = [{"role": "user", "content": t} for t in x.texts]
            tokens = await asyncio.get_running_loop().run_in_executor(
                self.gateway.executor, x.policy.engine.count_tokens, x.req.model, messages)
        return complexity_rule(prompt_tokens=tokens, user_turns=1, uses_tools=False, regulated=False)

    def _observe(self, x: _Call, sealed: list[dict[str, Any]], written: bool) -> None:
        """Count the request as chat does (:meth:`proxy.server.flow.receipting.Receipting.count`), except
        ``sonate_interactions_total`` and the apology counter: an embeddings request is not a chat
        interaction (FAR-A's denominator and numerator; docs/kpi.md, proxy.evaluation.kpi_report)."""
        m, model = self.gateway.metrics, x.req.model
        assert x.screen is not None
        self.gateway.receipting.count(x.screen.triggers, sealed, written, x.policy.policies)
        total = time.perf_counter() - x.started
        m.request_duration.labels(model, x.screen.action).observe(total)
        upstream = x.result.duration_seconds if x.result else 0.0
        m.overhead_duration.labels(model).observe(max(total - upstream, 0.0))
