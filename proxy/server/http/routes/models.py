"""``GET /v1/models``: the configured model routes, OpenAI's model list format (demo routes labelled)."""

from __future__ import annotations

from aiohttp import web

from proxy.server.http.requests import caller, services

__all__ = ["list_models", "register"]

_DEMO_DESCRIPTION = ("Demo route: answered locally by litellm's mock_response, no provider and no network. "
                     "Point model_list at a real provider for real answers.")


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: ``{"object": "list", "data": [{"id", "object", "created", "owned_by"}...]}``."""
    caller(request)
    data = []
    for route in services(request).config.model_list:
        entry = {"id": route.model_name, "object": "model", "created": 0, "owned_by": route.provider}
        if route.is_demo:
            entry["owned_by"] = "sonate-demo"
            entry["description"] = _DEMO_DESCRIPTION
        data.append(entry)
    return web.json_response({"object": "list", "data": data})


def register(app: web.Application) -> None:
    """Add the model list route to ``app``."""
    app.router.add_get("/v1/models", list_models)
