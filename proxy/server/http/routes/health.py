"""Liveness, readiness and Prometheus metrics.

Routes::

  GET /healthz   {"status": "ok", "version"}: the process answers
  GET /readyz    200 when requests can be answered with receipts (ledger reachable, or the spool
                 takes them), else 503; with the checks, the loaded detectors and, when an operator-
                 configured model fallback is in use, ``fallbacks``: policy id → {model, reason, used}
  GET /metrics   Prometheus text format (a ``metrics`` or ``admin`` key unless ``server.public_metrics``)
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy import __version__
from proxy.server.http.requests import ADMIN, caller, services
from proxy.storage.base import LedgerError

__all__ = ["healthz", "metrics_endpoint", "readyz", "register"]


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``."""
    return web.json_response({"status": "ok", "version": __version__})


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``."""
    svc = services(request)
    checks: dict[str, str] = {"models": "loaded"}
    try:
        await svc.store.ping()
        checks["ledger"] = "ok"
    except LedgerError as exc:
        checks["ledger"] = f"unavailable: {exc}"
    ready = checks["ledger"] == "ok"
    spool = getattr(svc.gateway.sink, "spool", None)
    if spool is not None:  # fault policy "spool": answers (pending receipts) while the ledger is down
        checks["spool"] = f"{spool.depth} receipt(s) pending"
        ready = True
    detectors = {pid: getattr(d, "name", None) for pid, d in svc.engine.detectors.items() if d is not None}
    # an operator-configured model fallback in use (safety policy detector.toxicity.fallback)
    fallbacks: dict[str, Any] = {}
    for pid, d in svc.engine.detectors.items():
        safety: Any = d  # fallback and toxicity: attributes of the Safety detector, not of every Detector
        if getattr(safety, "fallback", None):
            fallbacks[pid] = {**safety.fallback, "used": safety.toxicity.name}
    body: dict[str, Any] = {"status": "ready" if ready else "not_ready", "checks": checks, "detectors": detectors}
    if fallbacks:
        body["fallbacks"] = fallbacks
    return web.json_response(body, status=200 if ready else 503)


#: Roles that may read ``/metrics`` when it is not public: the scraper's own role, and admins.
METRICS_READERS = ("metrics", *ADMIN)


async def metrics_endpoint(request: web.Request) -> web.Response:
    """``GET /metrics``: 401 without a key, 403 for a client or reviewer key, unless ``server.public_metrics``."""
    svc = services(request)
    if not svc.config.server.public_metrics:
        caller(request, METRICS_READERS)
    return web.Response(body=svc.metrics.render(), headers={"Content-Type": svc.metrics.content_type})


def register(app: web.Application) -> None:
    """Add the health and metrics routes to ``app``."""
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
