"""The in-browser receipt verifier: static files of ``proxy/web`` served at ``/verify/``.

Routes::

    GET /verify                 301 to /verify/ (query string kept, e.g. ?fallback=1)
    GET /verify/                the page (verify.html)
    GET /verify/{path}          its scripts, stylesheet and vendored libraries

No authentication: the page holds no data; it verifies what the user pastes, in the browser,
and fetches only ``/v1/keys`` from the same origin. Every response carries a Content-Security-
Policy that allows same-origin scripts, styles and fetches only, so the page can make no
third-party request. Files are read from the package directory, never outside it.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

__all__ = ["CONTENT_SECURITY_POLICY", "WEB_ROOT", "register", "web_file"]

WEB_ROOT = Path(__file__).resolve().parents[3] / "web"
"""Directory of the page and its assets (shipped as package data ``proxy/web``)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Same-origin only: no inline script, no third-party script, style, image or fetch."""

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    ".LICENSE": "text/plain; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def web_file(relative: str) -> web.FileResponse:
    """The file ``WEB_ROOT/relative`` with its type and the security headers; 404 otherwise.

    Rejects paths that leave ``WEB_ROOT`` (``..``, absolute paths, symlinks out) and file
    types outside :data:`_TYPES`.
    """
    root = WEB_ROOT.resolve()
    try:
        path = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError):
        raise web.HTTPNotFound() from None
    content_type = _TYPES.get(path.suffix)
    if not path.is_relative_to(root) or not path.is_file() or content_type is None:
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={**_HEADERS, "Content-Type": content_type})


async def verify_redirect(request: web.Request) -> web.Response:
    """``GET /verify``: redirect to ``/verify/`` so the page's relative asset URLs resolve."""
    location = "/verify/" + (f"?{request.query_string}" if request.query_string else "")
    raise web.HTTPMovedPermanently(location)


async def verify_page(request: web.Request) -> web.FileResponse:
    """``GET /verify/``: the verifier page."""
    return web_file("verify.html")


async def verify_asset(request: web.Request) -> web.FileResponse:
    """``GET /verify/{path}``: a script, stylesheet, vendored library or licence of the page."""
    return web_file(request.match_info["path"])


def register(app: web.Application) -> None:
    """Add the ``/verify`` routes to ``app``."""
    app.router.add_get("/verify", verify_redirect)
    app.router.add_get("/verify/", verify_page)
    app.router.add_get("/verify/{path:.+}", verify_asset)
