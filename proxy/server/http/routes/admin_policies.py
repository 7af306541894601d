"""The serving policies: what is active, and reloading them without a restart (admin keys).

Routes::

  GET  /v1/admin/policies          the active policy version, when it was loaded, every policy set
                                   (its policies and detectors), the teams and actor → set assignments
  POST /v1/admin/policies/reload   read and validate the policy files and config.yaml's policy part,
                                   load the new models, then swap; 200 {"result": "applied" |
                                   "unchanged", "policy_version", "previous_version"}; an invalid edit
                                   → 400 ``invalid_policy`` with the same file/key/expected message as at
                                   start, and the old version keeps serving

:func:`register` also reloads on SIGHUP and, when ``policy_watch_seconds`` > 0, when a watched
file changes (:func:`proxy.server.flow.policy_runtime.watch_files`). The work is
:class:`proxy.server.flow.policy_runtime.PolicyRuntime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from aiohttp import web

from proxy.server.errors import GatewayError
from proxy.server.flow.policy_runtime import install_sighup, watch_files
from proxy.server.http.requests import ADMIN, SERVICES, caller, services

__all__ = ["get_policies", "register", "reload_policies"]

log = logging.getLogger("sonate.policies")

_WATCH: web.AppKey[asyncio.Task[Any]] = web.AppKey("policy_watch")
_SIGHUP: web.AppKey[bool] = web.AppKey("policy_sighup")


async def get_policies(request: web.Request) -> web.Response:
    """``GET /v1/admin/policies``: :meth:`PolicySnapshot.describe` of the serving version."""
    caller(request, ADMIN)
    return web.json_response(services(request).policy_runtime.current().describe())


async def reload_policies(request: web.Request) -> web.Response:
    """``POST /v1/admin/policies/reload``: 200 with the outcome, or 400 ``invalid_policy`` (the
    old version keeps serving; its version is in ``x-sonate-policy-version``)."""
    caller(request, ADMIN)
    outcome = await services(request).policy_runtime.reload("api")
    if outcome.result == "rejected":
        raise GatewayError(400, outcome.error or "the policies could not be reloaded", code="invalid_policy",
                           headers={"x-sonate-policy-version": outcome.version})
    return web.json_response(outcome.body(), headers={"x-sonate-policy-version": outcome.version})


async def _start_triggers(app: web.Application) -> None:
    """SIGHUP handler and, when configured, the file watch task."""
    svc = app[SERVICES]
    app[_SIGHUP] = install_sighup(svc.policy_runtime, asyncio.get_running_loop())
    interval = svc.config.policy_watch_seconds
    if interval > 0:
        app[_WATCH] = asyncio.get_running_loop().create_task(watch_files(svc.policy_runtime, interval))
        log.info("watching the policy files every %s s", interval)


async def _stop_triggers(app: web.Application) -> None:
    task = app.get(_WATCH)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if app.get(_SIGHUP):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


def register(app: web.Application) -> None:
    """Add the policy admin routes to ``app`` and hook the reload triggers into its life cycle."""
    app.router.add_get("/v1/admin/policies", get_policies)
    app.router.add_post("/v1/admin/policies/reload", reload_policies)
    app.on_startup.append(_start_triggers)
    app.on_cleanup.append(_stop_triggers)
