"""Ledger storage: the store roles (:mod:`proxy.storage.base`) and one back end per module.

:mod:`proxy.storage.sqlite` (embedded, single node) and
:mod:`proxy.storage.redis` (many processes, Redis Cluster) implement
:class:`~proxy.storage.base.LedgerStore`; :func:`open_store` picks one from a
ledger URL.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

from proxy.storage.base import *  # noqa: F403  (the roles and errors)
from proxy.storage.base import LedgerStore
from proxy.storage.base import __all__ as _roles
from proxy.storage.sqlite import SQLiteStore

__all__ = [*_roles, "open_store"]


def open_store(url: str, *, create: bool = True) -> LedgerStore:
    """Return the store for a ledger URL (connections open lazily, on first use).

    ``create``: a SQLite ledger file that does not exist yet is created (the proxy's start); False
    for a reader (the CLI's ``verify``, ``report``, ``ledger``), whose first use then raises
    :class:`LedgerUnavailable` naming the path instead of creating an empty ledger (and its
    folders) where a mistyped URL points. A Redis ledger has no file: ``create`` does not apply.

    - ``sqlite:///relative/path.db`` (relative to the working directory),
      ``sqlite:////abs/path.db``;
    - ``redis://[user:password@]host:port/db[?namespace=name]`` (also
      ``rediss://``); the namespace (default ``sonate``) becomes the Redis
      Cluster hash tag ``{name}`` shared by every key; ``cluster=1`` connects a Redis Cluster
      client (any node's address; database 0).

    Raises ``ValueError`` with the accepted forms for anything else.
    """
    if not isinstance(url, str):
        raise ValueError(f"ledger URL must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise ValueError(
                f"bad SQLite ledger URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        return SQLiteStore(url[len("sqlite:///"):], create=create)
    if scheme in ("redis", "rediss"):
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        namespace = query.pop("namespace", ["sonate"])[-1]
        cluster = query.pop("cluster", ["0"])[-1].lower() in ("1", "yes", "true")
        if not parts.hostname:  # the URL may hold a password: not echoed
            raise ValueError("bad Redis ledger URL (no host): use redis://host:port/db[?namespace=name]")
        from proxy.storage.redis import RedisStore  # here: only a Redis ledger loads the redis client

        rest = urlencode(query, doseq=True)
        return RedisStore(parts._replace(query=rest).geturl(), namespace=namespace, cluster=cluster)
    raise ValueError(
        f"unsupported ledger URL {url!r}: use sqlite:///path.db, sqlite:////abs/path.db "
        "or redis://host:port/db[?namespace=name][&cluster=1]"
    )
