"""Bearer-key authentication: ``Authorization: Bearer <key>`` → :class:`Caller` (actor, role).

Roles (``auth.keys[].role``): client, reviewer, admin, and metrics, which the default ``roles`` of
:meth:`Authenticator.authenticate` exclude: a metrics key reads ``GET /metrics`` and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac

from proxy.config import AuthConfig
from proxy.server.errors import Caller, GatewayError


def _digest(key: str) -> bytes:
    """SHA-256 of the key as UTF-8. A header aiohttp decoded from non-UTF-8 bytes holds lone surrogates
    (``surrogateescape``); ``surrogatepass`` encodes them too, and they match no configured key
    (a 401 instead of a UnicodeEncodeError answered 500; tests/e2e/test_fuzz.py)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Authenticator:
    """Looks keys up by SHA-256 digest with a constant-time comparison; keys never get logged."""

    def __init__(self, auth: AuthConfig) -> None:
        self._keys = {_digest(k.key): Caller(k.actor, k.role) for k in auth.keys}

    def authenticate(self, header: str | None, *, roles: tuple[str, ...] = ("client", "admin", "reviewer")) -> Caller:
        """The caller for an Authorization header value.

        Raises GatewayError 401 (missing, malformed or unknown key; OpenAI's ``invalid_api_key``)
        or 403 (a valid key whose role may not use this endpoint).
        """
        if not header or not header.lower().startswith("bearer ") or not header[7:].strip():
            raise GatewayError(401, "You didn't provide an API key. Send 'Authorization: Bearer <key>'.",
                               code="invalid_api_key", result="auth_error")
        digest = _digest(header[7:].strip())
        caller = next((c for d, c in self._keys.items() if hmac.compare_digest(d, digest)), None)
        if caller is None:
            raise GatewayError(401, "Incorrect API key provided.", code="invalid_api_key", result="auth_error")
        if caller.role not in roles:
            raise GatewayError(403, f"This endpoint needs one of the roles {', '.join(roles)}; "
                               f"your key has role '{caller.role}'.", type="permission_error",
                               code="insufficient_role", result="auth_error")
        return caller
