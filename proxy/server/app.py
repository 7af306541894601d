"""The aiohttp application: routes, error handling, start-up and shutdown.

Routes (OpenAI-compatible where OpenAI has one):
  POST /v1/chat/completions            chat completions, JSON or SSE
  GET  /v1/models                      configured routes (demo routes labelled)
  GET  /v1/receipts/{receipt_id}       a trust receipt (own receipts; admins/reviewers: all)
  GET  /v1/keys                        public verify keys by key_id
  GET  /v1/escalations/{id}            status of one's own escalated request
  GET  /v1/admin/escalations           review queue (admin)          ?status=pending|resolved|all
  POST /v1/admin/escalations/{id}/resolve  record a reviewer decision (admin), receipted
  GET  /healthz  /readyz  /metrics
  /v1/review/...                       blind two-pass adjudication (proxy/server/routes/review.py)
  GET  /verify/                       in-browser receipt/bundle verifier (proxy/server/routes/verifier.py)
  GET  /v1/ledger/checkpoint|proof/*   transparency log: checkpoints, proofs (proxy/server/routes/ledger.py)
Every error is an OpenAI error object; unexpected failures are logged and answered with a
500 that carries no traceback.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from proxy import __version__
from proxy.config import Config
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.schema import load_policies
from proxy.server.metrics import Metrics
from proxy.receipts.chain import Ledger
from proxy.receipts.keyring import Keyring
from proxy.receipts.signing import Signer, public_key_entry
from proxy.storage.base import LedgerError, LedgerStore, open_store
from proxy.server.auth import Authenticator
from proxy.server.requests import caller, read_model
from proxy.server.routes import review as review_routes
from proxy.server.pipeline import Gateway, GatewayError
from proxy.server import tasks as ledger_tasks
from proxy.server.sink import build_sink
from proxy.server.routes import verifier as web_routes
from proxy.server.routes import ledger as ledger_routes
from proxy.server.wire import ChatCompletionRequest, error_body, stream_events
from proxy.server.upstream import Upstream

log = logging.getLogger("sonate.server")
ADMIN = ("admin",)
REVIEW = ("admin", "reviewer")


@dataclass
class Services:
    """Everything a running proxy holds: built once at start-up."""

    config: Config
    signer: Signer
    store: LedgerStore
    ledger: Ledger
    engine: GuardrailEngine
    upstream: Upstream
    metrics: Metrics
    gateway: Gateway
    auth: Authenticator
    executor: ThreadPoolExecutor
    keyring: Keyring | None = None
    """The signing keyring (active key + published history; README "Keys and rotation")."""


async def build_services(config: Config) -> Services:
    """Load the signing key, open the ledger store and load every policy's models (slow: the
    NER, embedding and toxicity models load here, once, never at request time).

    Raises ConfigError / KeyFileError / ValueError with a clear message on bad configuration.
    """
    from proxy.guardrails.detectors.apology import ApologyDetector
    from proxy.guardrails.detectors.embeddings import warm_up

    keyring_file = config.signing.keyring_file
    keyring = Keyring(config.path(config.signing.key_file),
                      config.path(keyring_file) if keyring_file else None).load()  # 0600 enforced here
    signer = keyring.current()
    log.info("signing key %s (%s; keyring %s)", signer.key_id, keyring.key_file, keyring.keyring_file)
    store = open_store(config.ledger_url)
    policies = load_policies(config.path(config.policies))
    upstream = Upstream(config)
    executor = ThreadPoolExecutor(config.server.detector_threads, thread_name_prefix="guardrails")
    loop = asyncio.get_running_loop()

    def load_engine() -> GuardrailEngine:
        engine = GuardrailEngine(policies, count_tokens=upstream.count_tokens, apology_detector=ApologyDetector())
        warm_up()
        engine.screen_input([{"role": "user", "content": "Hello, my name is Ada. What is 2 + 2?"}])
        return engine

    engine = await loop.run_in_executor(executor, load_engine)
    metrics = Metrics()
    ledger = Ledger(store, signer, signer_source=keyring.current)
    gateway = Gateway(config, engine, upstream, ledger, metrics, executor,
                      sink=build_sink(config, ledger, metrics))  # ledger.on_unavailable
    log.info("policies: %s", ", ".join(f"{p.id} ({p.kind}: {', '.join(p.stages)})" for p in policies))
    return Services(config, signer, store, ledger, engine, upstream, metrics, gateway,
                    Authenticator(config.auth), executor, keyring=keyring)


def json_error(status: int, message: str, type: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> web.Response:
    """An OpenAI-format error response."""
    return web.json_response(error_body(message, type, param, code), status=status)


_HTTP_CODES = {404: ("not_found", "Unknown URL"), 405: ("method_not_allowed", "Method not allowed"),
               413: ("request_too_large", "Request body too large")}


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Turn every failure into an OpenAI error object and count requests by result."""
    metrics: Metrics = request.app["services"].metrics
    route = _route_label(request)
    try:
        response = await handler(request)
        metrics.requests.labels(route, "ok" if response.status < 400 else "client_error").inc()
        return response
    except GatewayError as exc:
        metrics.requests.labels(route, exc.result).inc()
        return json_error(exc.status, exc.message, exc.type, exc.code, exc.param)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code, text = _HTTP_CODES.get(exc.status, ("http_error", exc.reason))
        if exc.status == 413:
            text = f"{text}: the limit is {request.app['services'].config.server.max_body_bytes} bytes"
        elif exc.status in (404, 405):
            text = f"{text}: {request.method} {request.path}"
        metrics.requests.labels(route, "client_error").inc()
        return json_error(exc.status, text, code=code)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        metrics.requests.labels(route, "server_error").inc()
        return json_error(500, "The proxy had an internal error; it has been logged.", "api_error", "internal_error")


def _services(request: web.Request) -> Services:
    return request.app["services"]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    services = _services(request)
    who = caller(request)
    req, raw = await read_model(request, ChatCompletionRequest)
    outcome = await services.gateway.chat(raw, req, who, request.headers.get("x-sonate-complexity"))
    headers = {"x-sonate-receipt-id": outcome.receipt_id, "x-sonate-guardrail-action": outcome.action,
               **outcome.headers}
    if not outcome.stream:
        return web.json_response(outcome.body, headers=headers)
    response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in stream_events(outcome.body, outcome.pieces, outcome.include_usage):
        await response.write(event)
    await response.write_eof()
    return response


async def list_models(request: web.Request) -> web.Response:
    caller(request)
    data = []
    for route in _services(request).config.model_list:
        entry = {"id": route.model_name, "object": "model", "created": 0, "owned_by": route.provider}
        if route.is_demo:
            entry["owned_by"] = "sonate-demo"
            entry["description"] = ("Demo route: answered locally by litellm's mock_response, no provider "
                                    "and no network. Point model_list at a real provider for real answers.")
        data.append(entry)
    return web.json_response({"object": "list", "data": data})


async def get_receipt(request: web.Request) -> web.Response:
    who = caller(request)
    receipt_id = request.match_info["receipt_id"]
    bundle = ledger_routes.wants_bundle(request)  # ?bundle=1: the offline bundle (proxy/server/routes/ledger.py)
    try:
        receipt = await _services(request).store.get_by_id(receipt_id)
    except LedgerError:
        raise GatewayError(503, "The trust ledger is unavailable.", "api_error", "ledger_unavailable",
                           result="ledger_error") from None
    if receipt is None:  # fault policy "spool": still waiting in this process's spool?
        pending = _services(request).gateway.sink.pending(receipt_id)
        if pending is not None and (who.role != "client" or pending.get("actor") == who.actor):
            return web.json_response({"receipt_id": receipt_id, "status": "pending", "receipt": pending},
                                     status=202, headers={"x-sonate-receipt-status": "pending"})
    if receipt is None or (who.role == "client" and receipt.get("actor") != who.actor):
        raise GatewayError(404, f"No receipt with id '{receipt_id}'.", code="not_found")
    if bundle:
        return await ledger_routes.bundle_response(request, receipt)
    return web.json_response(receipt)


async def get_keys(request: web.Request) -> web.Response:
    services = _services(request)  # every key ever used, with its validity window (keyring)
    keys = services.keyring.entries() if services.keyring else [public_key_entry(services.signer)]
    return web.json_response({"keys": keys})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "version": __version__})


async def readyz(request: web.Request) -> web.Response:
    services = _services(request)
    checks: dict[str, str] = {"models": "loaded"}
    try:
        await services.store.ping()
        checks["ledger"] = "ok"
    except LedgerError as exc:
        checks["ledger"] = f"unavailable: {exc}"
    ready = checks["ledger"] == "ok"
    spool = getattr(services.gateway.sink, "spool", None)
    if spool is not None:  # fault policy "spool": answers (pending receipts) while the ledger is down
        checks["spool"] = f"{spool.depth} receipt(s) pending"
        ready = True
    detectors = {pid: getattr(d, "name", None) for pid, d in services.engine.detectors.items() if d is not None}
    return web.json_response({"status": "ready" if ready else "not_ready", "checks": checks,
                              "detectors": detectors}, status=200 if ready else 503)


async def metrics_endpoint(request: web.Request) -> web.Response:
    services = _services(request)
    if not services.config.server.public_metrics:
        caller(request, ADMIN)
    return web.Response(body=services.metrics.render(), headers={"Content-Type": services.metrics.content_type})


class ResolveRequest(BaseModel):
    """Body of POST /v1/admin/escalations/{id}/resolve."""

    model_config = ConfigDict(strict=True, extra="forbid")
    decision: Literal["approve", "reject"]
    note: str = Field("", max_length=4000)


async def list_escalations(request: web.Request) -> web.Response:
    caller(request, ADMIN)
    status = request.query.get("status", "pending")
    if status not in ("pending", "resolved", "aborted", "all"):
        raise GatewayError(400, "status must be pending, resolved, aborted or all", param="status")
    try:
        cases = await _services(request).store.list_cases(None if status == "all" else status)
    except LedgerError:
        raise GatewayError(503, "The review queue is unavailable.", "api_error", "ledger_unavailable",
                           result="ledger_error") from None
    return web.json_response({"object": "list", "data": cases})


async def resolve_escalation(request: web.Request) -> web.Response:
    who = caller(request, ADMIN)
    body, raw = await read_model(request, ResolveRequest)
    case, receipt_id = await _services(request).gateway.resolve_case(
        request.match_info["case_id"], who, body.decision, body.note, raw)
    return web.json_response(case, headers={"x-sonate-receipt-id": receipt_id,
                                            "x-sonate-guardrail-action": "resolve"})


async def get_escalation(request: web.Request) -> web.Response:
    who = caller(request)
    case_id = request.match_info["case_id"]
    case = await _services(request).store.get_case(case_id)
    if case is None or (who.role == "client" and case.get("actor") != who.actor):
        raise GatewayError(404, f"No escalation with id '{case_id}'.", code="not_found")
    return web.json_response({k: v for k, v in case.items() if k != "messages"})


def create_app(services: Services) -> web.Application:
    """The aiohttp application over already-built services (see :func:`build_services`)."""
    app = web.Application(middlewares=[error_middleware], client_max_size=services.config.server.max_body_bytes)
    app["services"] = services
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/receipts/{receipt_id}", get_receipt)
    app.router.add_get("/v1/keys", get_keys)
    app.router.add_get("/v1/escalations/{case_id}", get_escalation)
    app.router.add_get("/v1/admin/escalations", list_escalations)
    app.router.add_post("/v1/admin/escalations/{case_id}/resolve", resolve_escalation)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    review_routes.register(app)
    web_routes.register(app)  # GET /verify: the in-browser receipt verifier
    ledger_routes.register(app)  # checkpoints, proofs, bundles + the checkpoint publisher
    ledger_tasks.register(app)  # receipt spool replay (ledger.on_unavailable: spool) + ledger audit

    async def close(_: web.Application) -> None:
        await services.store.close()
        services.executor.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(close)
    return app
