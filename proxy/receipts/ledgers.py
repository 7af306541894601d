"""Several ledgers in one deployment: the partition rule and the set of ledgers a proxy writes.

One ledger is one hash chain with one compare-and-set head, so its appends go through one Redis
Cluster slot (one shard, one core). ``ledger.partition`` splits the receipts over several ledgers,
each a complete ledger of its own (chain, Merkle tree, signed checkpoints, witnesses) under its own
Redis hash tag or SQLite file, so a Redis Cluster spreads them over its shards:

- ``none`` (default): one ledger, the configured URL; receipts carry no ``ledger`` field;
- ``team``: the ledger of the team of the receipt's actor (``auth.keys[].team``), else ``default``;
- ``policy_set``: the ledger named after the policy set that screened the request
  (``evidence.policy_set``), else ``default``;
- ``hash``: ``shard-0`` .. ``shard-<N-1>`` by :func:`shard_of` the request id (one large tenant).

A partitioned receipt names its ledger in its signed ``ledger`` field
(:data:`proxy.receipts.receipt.OPTIONAL_FIELDS`). Where each ledger lives is
:func:`ledger_store_url`; the ``default`` ledger is the configured URL itself, and it also keeps
the review queues and evaluation results (they are not receipts and need no partition).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from proxy.receipts.chain import Ledger
from proxy.storage import open_store
from proxy.storage.base import LedgerStore

__all__ = [
    "DEFAULT_LEDGER",
    "LEDGER_NAME",
    "PARTITIONS",
    "Ledgers",
    "choose_ledger",
    "discover_ledgers",
    "ledger_names",
    "ledger_of",
    "ledger_origin",
    "ledger_store_url",
    "shard_of",
]

DEFAULT_LEDGER = "default"
"""The ledger of receipts no rule places elsewhere; it lives at the configured ledger URL."""

LEDGER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A ledger name (the receipt's ``ledger`` field): 1-64 of letters, digits, ``_``, ``.``, ``-``."""

PARTITIONS = ("none", "team", "policy_set", "hash")


def shard_of(request_id: str, shards: int) -> str:
    """``shard-<i>`` with ``i`` = the first 8 bytes of SHA-256(request_id) (big-endian) mod ``shards``.

    Stable across processes and releases (no Python ``hash``). Raises ``ValueError`` when
    ``shards`` < 1.
    """
    if shards < 1:
        raise ValueError("shards must be >= 1")
    digest = hashlib.sha256(request_id.encode()).digest()
    return f"shard-{int.from_bytes(digest[:8], 'big') % shards}"


def choose_ledger(partition: str, *, shards: int = 1, team: str | None = None, policy_set: str | None = None,
                  request_id: str | None = None) -> str | None:
    """The ledger name of a receipt under ``partition`` (see the module docstring); None for ``none``.

    ``team``/``policy_set``: the caller's team and the request's policy set (None: not known →
    :data:`DEFAULT_LEDGER`); ``request_id``: the key of the ``hash`` rule (required there).
    Raises ``ValueError`` for an unknown partition or a ``hash`` rule without a request id.
    """
    if partition == "none":
        return None
    if partition == "team":
        return team or DEFAULT_LEDGER
    if partition == "policy_set":
        return policy_set or DEFAULT_LEDGER
    if partition == "hash":
        if not request_id:
            raise ValueError("the hash partition needs the request id")
        return shard_of(request_id, shards)
    raise ValueError(f"unknown ledger partition {partition!r}: use one of {', '.join(PARTITIONS)}")


def ledger_of(receipt: Mapping[str, Any]) -> str:
    """The ledger a sealed receipt was appended to: its signed ``ledger`` field, or
    :data:`DEFAULT_LEDGER` for a receipt without one (a deployment of one ledger)."""
    named = receipt.get("ledger")
    return named if isinstance(named, str) else DEFAULT_LEDGER


def ledger_names(partition: str, *, shards: int = 1, teams: Iterable[str] = (),
                 policy_sets: Iterable[str] = ()) -> list[str]:
    """Every ledger a deployment can write under ``partition``, :data:`DEFAULT_LEDGER` first.

    ``none``: ``["default"]``; ``team``/``policy_set``: ``default`` and each configured name;
    ``hash``: ``default`` and ``shard-0`` .. ``shard-<shards-1>``. Raises ``ValueError`` for an
    unknown partition.
    """
    if partition == "none":
        extra: list[str] = []
    elif partition == "team":
        extra = sorted(teams)
    elif partition == "policy_set":
        extra = sorted(policy_sets)
    elif partition == "hash":
        extra = [f"shard-{i}" for i in range(shards)]
    else:
        raise ValueError(f"unknown ledger partition {partition!r}: use one of {', '.join(PARTITIONS)}")
    return [DEFAULT_LEDGER, *(n for n in extra if n != DEFAULT_LEDGER)]


def ledger_origin(origin: str, name: str | None) -> str:
    """The checkpoint origin (log name) of ledger ``name`` of a deployment whose ``ledger.origin`` is
    ``origin``: ``origin`` itself for the default ledger (None or :data:`DEFAULT_LEDGER`), else
    ``<origin>/<name>``. Distinct logs need distinct origins: a witness keeps one tree per origin."""
    return origin if name is None or name == DEFAULT_LEDGER else f"{origin}/{name}"


def ledger_store_url(url: str, name: str) -> str:
    """The store URL of ledger ``name`` of the deployment whose ledger URL is ``url``.

    :data:`DEFAULT_LEDGER` is ``url`` itself. Redis: the namespace (hash tag) becomes
    ``<namespace>:<name>`` (``{sonate:team-a}``), so each ledger hashes to its own Cluster slot.
    SQLite: a file beside the configured one, ``ledger.db`` → ``ledger.<name>.db``.
    Raises ``ValueError`` for a bad name or an unsupported URL.
    """
    if not LEDGER_NAME.fullmatch(name):
        raise ValueError(f"bad ledger name {name!r}: use 1-64 of letters, digits, '_', '.' or '-'")
    if name == DEFAULT_LEDGER:
        return url
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        return "sqlite:///" + str(path.with_name(f"{path.stem}.{name}{path.suffix or '.db'}"))
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        query = parse_qs(parts.query)
        namespace = query.pop("namespace", ["sonate"])[-1]
        query["namespace"] = [f"{namespace}:{name}"]
        return parts._replace(query=urlencode(query, doseq=True)).geturl()
    raise ValueError(f"unsupported ledger URL for ledger {name!r}")


async def discover_ledgers(url: str) -> list[str]:
    """The names of the ledgers stored for the deployment whose ledger URL is ``url``,
    :data:`DEFAULT_LEDGER` first, the others sorted (what ``sonate verify --all`` walks).

    SQLite: ``default`` plus each ``<stem>.<name>.db`` beside the configured file. Redis: ``default``
    plus each ``<name>`` with a ``{<namespace>:<name>}:head`` key (every master of a Cluster is
    scanned). The default ledger is listed even when empty. Raises ``ValueError`` for an
    unsupported URL and :class:`~proxy.storage.base.LedgerUnavailable` when Redis cannot be read.
    """
    found: set[str] = set()
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        suffix = path.suffix or ".db"
        for candidate in path.parent.glob(f"{path.stem}.*{suffix}"):
            name = candidate.name[len(path.stem) + 1:-len(suffix)]
            if LEDGER_NAME.fullmatch(name) and candidate != path:
                found.add(name)
        if not path.exists():  # no default ledger file: list only the others (a reader never creates one)
            found.discard(DEFAULT_LEDGER)
            return sorted(found)
    else:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("unsupported ledger URL: use sqlite:///path.db or redis://host:port/db")
        query = parse_qs(parts.query)
        namespace = query.pop("namespace", ["sonate"])[-1]
        cluster = query.pop("cluster", ["0"])[-1].lower() in ("1", "yes", "true")
        plain = parts._replace(query=urlencode(query, doseq=True)).geturl()
        from redis.asyncio import Redis
        from redis.asyncio.cluster import RedisCluster
        from redis.exceptions import RedisClusterException, RedisError

        client: Any = RedisCluster.from_url(plain, decode_responses=True) if cluster else \
            Redis.from_url(plain, decode_responses=True)
        pattern = "{" + re.sub(r"([*?\[\]])", r"\\\1", namespace) + ":*}:head"
        try:
            async for key in client.scan_iter(match=pattern, count=1000):
                name = key[len(namespace) + 2:-len("}:head")]
                if LEDGER_NAME.fullmatch(name):
                    found.add(name)
        except (RedisError, RedisClusterException, OSError) as exc:  # the cluster's is no RedisError
            from proxy.storage.base import LedgerUnavailable

            raise LedgerUnavailable(f"Redis ledger unreachable: {exc}") from exc
        finally:
            await client.aclose()
    found.discard(DEFAULT_LEDGER)
    return [DEFAULT_LEDGER, *sorted(found)]


class Ledgers:
    """The ledgers one proxy writes: one :class:`~proxy.receipts.chain.Ledger` per name, each on its
    own store, and the rule that routes each receipt to one of them.

    ``url``: the configured ledger URL; ``names``: :func:`ledger_names`; ``team_of``: actor → team
    (the ``team`` rule). ``ledger_factory(store)`` builds each name's :class:`Ledger` (signer and
    options); ``opener(url)`` opens a store (default :func:`proxy.storage.open_store`). Stores open
    on first use. Raises ``ValueError`` for an unknown partition or a bad name.
    """

    def __init__(self, url: str, partition: str, names: Iterable[str], ledger_factory: Callable[[LedgerStore], Ledger],
                 *, shards: int = 1, team_of: Mapping[str, str] | None = None,
                 opener: Callable[[str], LedgerStore] = open_store) -> None:
        """Open (lazily) the store of each ledger; no I/O."""
        if partition not in PARTITIONS:
            raise ValueError(f"unknown ledger partition {partition!r}: use one of {', '.join(PARTITIONS)}")
        self.partition = partition
        self.shards = shards
        self.team_of = dict(team_of or {})
        self.names: list[str] = list(dict.fromkeys([DEFAULT_LEDGER, *names]))
        self.ledgers: dict[str, Ledger] = {
            name: ledger_factory(opener(ledger_store_url(url, name))) for name in self.names}

    @property
    def default(self) -> Ledger:
        """The :data:`DEFAULT_LEDGER` ledger (the configured URL)."""
        return self.ledgers[DEFAULT_LEDGER]

    @property
    def store(self) -> LedgerStore:
        """The default ledger's store: the one pinged before a model call, and the review queues'."""
        return self.default.store

    def ledger(self, name: str | None) -> Ledger:
        """The ledger ``name`` (None: the default). Raises ``KeyError`` for a name this deployment lacks."""
        return self.default if name is None else self.ledgers[name]

    def route(self, receipt: Mapping[str, Any]) -> str | None:
        """The ledger name of an unsealed receipt: its own ``ledger`` field when set (e.g. a review
        step following its case), else :func:`choose_ledger` from its actor's team, its
        ``evidence.policy_set`` and its ``request_id``. None under ``none``."""
        if self.partition == "none":
            return None
        named = receipt.get("ledger")
        if isinstance(named, str):
            return named
        evidence = receipt.get("evidence") or {}
        name = choose_ledger(self.partition, shards=self.shards, team=self.team_of.get(receipt.get("actor", "")),
                             policy_set=evidence.get("policy_set"), request_id=receipt.get("request_id"))
        return name if name in self.ledgers else DEFAULT_LEDGER

    async def append(self, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Route each receipt (setting its ``ledger`` field, partitioned only) and append each ledger's
        share in one atomic write of that ledger; return the sealed receipts in the given order.

        A batch that spans ledgers (spool replay joins several requests) is atomic per ledger only;
        a retry is safe, :meth:`Ledger.append` being idempotent by receipt id and content. Raises
        like :meth:`Ledger.append`; ``KeyError`` for a ``ledger`` field naming an unknown ledger.
        """
        groups: dict[str | None, list[int]] = {}
        for i, receipt in enumerate(receipts):
            name = self.route(receipt)
            if name is not None:
                if name not in self.ledgers:
                    raise KeyError(f"unknown ledger {name!r}")
                receipt["ledger"] = name
            groups.setdefault(name, []).append(i)
        if len(groups) == 1:
            (name,) = groups
            return await self.ledger(name).append(receipts)
        parts = await asyncio.gather(*(self.ledger(name).append([receipts[i] for i in idx])
                                       for name, idx in groups.items()))
        sealed: list[dict[str, Any]] = [{}] * len(receipts)
        for idx, part in zip(groups.values(), parts):
            for i, receipt in zip(idx, part):
                sealed[i] = receipt
        return sealed

    async def get_by_id(self, receipt_id: str) -> dict[str, Any] | None:
        """The receipt ``receipt_id`` from whichever ledger holds it (all asked at once), or None.
        Raises :class:`~proxy.storage.base.LedgerUnavailable` when a store cannot be read."""
        if len(self.ledgers) == 1:
            return await self.default.store.get_by_id(receipt_id)
        found = await asyncio.gather(*(ledger.store.get_by_id(receipt_id) for ledger in self.ledgers.values()))
        return next((r for r in found if r is not None), None)

    async def close(self) -> None:
        """Close every ledger's store. Idempotent."""
        for ledger in self.ledgers.values():
            await ledger.store.close()

    def __repr__(self) -> str:
        return f"Ledgers(partition={self.partition!r}, names={self.names!r})"
