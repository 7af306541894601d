"""Transparency-log HTTP API: signed checkpoints, inclusion and consistency proofs, receipt bundles.

Routes::

    GET /v1/ledger/checkpoint[?tree_size=N]                 latest (or the stored N) checkpoint, text/plain
    GET /v1/ledger/proof/inclusion?height=H[&tree_size=N]   {"leaf_index", "tree_size", "leaf_hash", "hashes"}
    GET /v1/ledger/proof/consistency?from=M[&to=N]          {"first", "second", "hashes"}
    GET /v1/receipts/{id}?bundle=1                          offline bundle (routes.receipts calls bundle_response)

Checkpoints and proofs are **public** (no bearer key): they carry only tree sizes and hashes,
and monitors/auditors must be able to fetch them (as CT and Rekor logs serve them); receipts
and bundles keep the receipt endpoint's authentication. Proof sizes may be any tree size up to
the stored Merkle tree (``N <= tree size``), so a client can prove against any checkpoint it
holds; ``tree_size``/``to`` default to the latest checkpoint's size. A proof is only as good as
a signed checkpoint of that size: verify it against one. Bad or missing parameters answer 400,
an unknown checkpoint 404 (OpenAI error objects). ``register(app)`` also starts the background
checkpoint publisher (``ledger.checkpoint_every_entries`` / ``ledger.checkpoint_interval_seconds``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from aiohttp import web

from proxy.receipts.ledgers import ledger_origin
from proxy.receipts.proofs import consistency_proof_doc, inclusion_proof_doc
from proxy.receipts.tree import TreeError, bundle_for, consistency_proof, inclusion_proof, leaf_hash_at
from proxy.server.admission.publisher import CheckpointPublisher
from proxy.server.errors import GatewayError, ledger_unavailable
from proxy.server.http.requests import SERVICES, services
from proxy.storage.base import LedgerError
from proxy.tlog.checkpoint import CheckpointError, parse_checkpoint

__all__ = ["bundle_response", "register", "wants_bundle"]

log = logging.getLogger("sonate.ledger_routes")
_MAX_SIZE = 2**53 - 1
#: A size or height: ASCII digits only. ``str.isdigit`` also accepts "²" or "١", which ``int``
#: then refuses (a 500) or reads as another number.
_DECIMAL = re.compile(r"[0-9]{1,16}")
_PUBLISHER: web.AppKey[CheckpointPublisher] = web.AppKey("ledger_checkpoint_publisher", CheckpointPublisher)
_PUBLISHERS: web.AppKey[list] = web.AppKey("ledger_checkpoint_publishers", list)


def _store(request: web.Request) -> Any:
    """The store of the ledger named by ``?ledger=`` (absent: ``default``); 404 for a name the
    deployment does not have (``ledger.partition``, docs/receipts.md "Several ledgers")."""
    name = request.query.get("ledger") or None
    try:
        return services(request).ledger_named(name).store
    except KeyError:
        raise GatewayError(404, "No ledger with this name.", code="not_found", param="ledger") from None


def _unavailable(exc: Exception) -> GatewayError:
    return ledger_unavailable(str(exc))


def _int_param(request: web.Request, name: str, minimum: int, required: bool) -> int | None:
    """Query parameter ``name`` as an ASCII decimal integer >= ``minimum`` (at most 16 digits and 2**53 - 1).

    Raises GatewayError 400 naming ``name`` when it is bad (signs, spaces, non-ASCII digits) or,
    if ``required``, missing.
    """
    raw = request.query.get(name)
    if raw is None or raw == "":
        if required:
            raise GatewayError(400, f"Missing required parameter '{name}'.", param=name, code="missing_parameter")
        return None
    if _DECIMAL.fullmatch(raw) is None or not minimum <= int(raw) <= _MAX_SIZE:
        raise GatewayError(400, f"Invalid value for '{name}': expected an integer >= {minimum}.",
                           param=name, code="invalid_value")
    return int(raw)


async def _latest_size(request: web.Request, param: str) -> int:
    """The latest checkpoint's tree size (the default of ``param``); 404 when none is published."""
    store = _store(request)
    try:
        note = await store.latest_checkpoint()
    except LedgerError as exc:
        raise _unavailable(exc) from None
    if note is None:
        raise GatewayError(404, f"No checkpoint has been published yet; pass '{param}' explicitly.",
                           code="not_found", param=param)
    return parse_checkpoint(note).tree_size


async def _stored_size(request: web.Request) -> int:
    try:
        return await _store(request).tree_size()
    except LedgerError as exc:
        raise _unavailable(exc) from None


def _too_big(name: str, value: int, stored: int) -> GatewayError:
    return GatewayError(400, f"Invalid value for '{name}': {value} exceeds the log's tree size {stored}.",
                        param=name, code="invalid_value")


async def get_checkpoint(request: web.Request) -> web.Response:
    """``GET /v1/ledger/checkpoint``: the latest signed checkpoint, or the one stored for ``?tree_size=``."""
    size = _int_param(request, "tree_size", 1, required=False)
    store = _store(request)
    try:
        note = await (store.latest_checkpoint() if size is None else store.get_checkpoint(size))
    except LedgerError as exc:
        raise _unavailable(exc) from None
    if note is None:
        what = "has been published yet" if size is None else f"is stored for tree size {size}"
        raise GatewayError(404, f"No checkpoint {what}.", code="not_found", param=None if size is None else "tree_size")
    try:  # witness cosignatures stored beside the note (C2SP tlog-cosignature; proxy.server.admission.publisher)
        note += "".join(await store.get_cosignatures(parse_checkpoint(note).tree_size))
    except LedgerError as exc:
        raise _unavailable(exc) from None
    headers = {"Cache-Control": "no-cache" if size is None else "public, max-age=31536000, immutable"}
    return web.Response(text=note, content_type="text/plain", charset="utf-8", headers=headers)


async def _upper_size(request: web.Request, name: str) -> int:
    """The proof's tree size: query parameter ``name`` (>= 1), else the latest checkpoint's size;
    a 400 naming ``name`` when it exceeds what the ledger holds."""
    size = _int_param(request, name, 1, required=False)
    if size is None:
        size = await _latest_size(request, name)
    stored = await _stored_size(request)
    if size > stored:
        raise _too_big(name, size, stored)
    return size


async def get_inclusion_proof(request: web.Request) -> web.Response:
    """``GET /v1/ledger/proof/inclusion?height=H[&tree_size=N]`` (RFC 9162 §2.1.3.1)."""
    height = _int_param(request, "height", 0, required=True)
    size = await _upper_size(request, "tree_size")
    assert height is not None
    if height >= size:
        raise GatewayError(400, f"Invalid value for 'height': {height} is not below tree_size {size}.",
                           param="height", code="invalid_value")
    store = _store(request)
    try:
        hashes = await inclusion_proof(store, height, size)
        leaf = await leaf_hash_at(store, height)
    except LedgerError as exc:
        raise _unavailable(exc) from None
    return web.json_response(inclusion_proof_doc(height, size, leaf, hashes))


async def get_consistency_proof(request: web.Request) -> web.Response:
    """``GET /v1/ledger/proof/consistency?from=M[&to=N]`` (RFC 9162 §2.1.4.1)."""
    first = _int_param(request, "from", 1, required=True)
    second = await _upper_size(request, "to")
    assert first is not None
    if first > second:
        raise GatewayError(400, f"Invalid value for 'from': {first} exceeds 'to' ({second}).", param="from",
                           code="invalid_value")
    try:
        hashes = await consistency_proof(_store(request), first, second)
    except LedgerError as exc:
        raise _unavailable(exc) from None
    return web.json_response(consistency_proof_doc(first, second, hashes))


def _current_signer(svc: Any) -> Any:
    ledger = svc.ledger
    source = getattr(ledger, "signer_source", None)
    return source() if source is not None else ledger.signer


async def bundle_response(request: web.Request, receipt: dict[str, Any],
                          key_entries: list[dict[str, Any]]) -> web.Response:
    """The offline bundle of ``receipt`` (already authorised by the caller of this function),
    carrying the published ``key_entries`` (``GET /v1/keys``).

    Publishes a checkpoint on demand when none covers the receipt yet (idempotent per size).
    503 when the ledger is down or its tree has not indexed the receipt yet.
    """
    svc = services(request)
    name = receipt.get("ledger")
    try:
        bundle = await bundle_for(svc.ledger_named(name).store, receipt, key_entries,
                                  signer=_current_signer(svc), origin=ledger_origin(svc.config.ledger.origin, name))
    except TreeError as exc:
        raise GatewayError(503, f"No proof is available for this receipt yet: {exc}", "api_error",
                           "tree_unavailable", result="ledger_error") from None
    except LedgerError as exc:
        raise _unavailable(exc) from None
    return web.json_response(bundle)


def wants_bundle(request: web.Request) -> bool:
    """True for ``?bundle=1|true``, False when absent or ``0|false``; 400 for anything else."""
    value = request.query.get("bundle")
    if value is None or value in ("0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise GatewayError(400, "Invalid value for 'bundle': expected 1 or 0.", param="bundle",
                       code="invalid_value")


def register(app: web.Application) -> None:
    """Add the ledger routes and the checkpoint publisher (started/stopped with the app) to ``app``."""
    app.router.add_get("/v1/ledger/checkpoint", get_checkpoint)
    app.router.add_get("/v1/ledger/proof/inclusion", get_inclusion_proof)
    app.router.add_get("/v1/ledger/proof/consistency", get_consistency_proof)

    async def start(app: web.Application) -> None:
        svc = app[SERVICES]
        config = svc.config.ledger
        metrics = svc.metrics
        def counter(name: str) -> Any:
            if not hasattr(metrics, "ledger_checkpoints_published"):
                return None

            def on_publish(size: int) -> None:
                metrics.ledger_checkpoints_published.labels(name).inc()
                metrics.ledger_checkpoint_tree_size.labels(name).set(size)
            return on_publish
        publishers = []
        for name, ledger in svc.ledger_list():  # one publisher per ledger, each with its own origin
            on_publish = counter(name)
            publisher = CheckpointPublisher(ledger, ledger_origin(config.origin, name), config.checkpoint_every_entries,
                                            config.checkpoint_interval_seconds, on_publish=on_publish,
                                            witnesses=config.witnesses)
            publishers.append(publisher)
            try:
                stored, head = await ledger.store.tree_size(), await ledger.store.head()
                if head is not None and stored < head.height + 1:
                    log.warning("ledger %s: the Merkle tree covers %d of %d receipts: run `sonate ledger reindex` "
                                "to backfill it", name, stored, head.height + 1)
            except (LedgerError, CheckpointError) as exc:
                log.warning("ledger %s: cannot read the Merkle tree size at start-up: %s", name, exc)
            publisher.start()
        app[_PUBLISHER] = publishers[0]
        app[_PUBLISHERS] = publishers

    async def stop(app: web.Application) -> None:
        for publisher in app.get(_PUBLISHERS, []):
            await publisher.stop()

    app.on_startup.append(start)
    app.on_cleanup.insert(0, stop)  # before the store closes
