"""Redis ledger store (``redis.asyncio``), safe for many processes and Redis Cluster.

Every key carries the hash tag ``{namespace}`` so all of a ledger lives in one
Cluster slot (docs/architecture.md, "Trust receipts"). Keys::

    {ns}:head                 hash   height, entry_hash
    {ns}:r:<height>           string canonical JSON (RFC 8785) of the receipt
    {ns}:id:<receipt_id>      string height
    {ns}:tree:size            string Merkle tree size
    {ns}:tree:frontier        string <size>:<hex hashes>, the compact range at that tree size
    {ns}:turn                 list   the turn token of contended writers: <height>|<entry hash>|<frontier>
    {ns}:t:<level>:<chunk>    string 65,536 node hashes of 32 bytes (zero = not stored)
    {ns}:cp                   hash   tree size -> checkpoint note
    {ns}:cp:sizes             zset   checkpoint tree sizes
    {ns}:cosig:<size>         hash   witness name -> cosignature line on checkpoint <size>
    {ns}:cases                hash   escalation id -> JSON (queue "escalations")
    {ns}:cases:status         hash   id -> status
    {ns}:cases:seq            string creation counter
    {ns}:cases:all            zset   id scored by creation order
    {ns}:cases:s:<status>     zset   same, per status
    {ns}:adj...               the same five keys for queue "adjudications" (adj, adj:status, ...)
    {ns}:eval:<series>        list   JSON evaluation results of a series, in append order
    {ns}:eval:<series>:ids    set    their run ids (duplicate check)

``compare_and_append`` is one Lua script (head compare-and-set, duplicate
checks and all writes), so appends from any number of processes can neither
fork nor gap the chain; a writer that lost the race gets the current head
(and compact range) back in the same reply. Scripts only touch keys passed in ``KEYS``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
from typing import Any, AsyncIterator, Sequence

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisError, ResponseError

from proxy.primitives.canonical import canonical, sha256_ref
from proxy.storage.base import (
    AppendOutcome,
    Head,
    LedgerConflict,
    LedgerStore,
    LedgerUnavailable,
    TreeUpdate,
    check_batch,
    check_checkpoint,
    check_cosignature,
    check_item,
    check_limit,
    check_page,
    check_queue,
    check_result,
    check_tree_update,
)

__all__ = ["RedisStore"]

_log = logging.getLogger("sonate.storage.redis")

_NAMESPACE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_CHUNK = 1000
_NODE_CHUNK_BITS = 16  # 65,536 nodes (2 MiB) per Redis string
_ZERO_HASH = bytes(32)

# KEYS: head, tree:size, tree:frontier, turn, then r:<h>, id:<rid> per receipt, then node chunk keys.
# ARGV: expected height, expected entry hash, new height, new entry hash, n receipts,
#       tree old size ('' = no tree), tree new size, node count, new frontier ('' = none),
#       release the turn ('1' or ''), then per receipt: height, body; then per node: KEYS index,
#       byte offset, 32-byte hash.
# Returns {1} when appended, else {0, current height, current entry hash, stored frontier}
# ('' for an empty ledger / no frontier) so the loser re-seals on the new head at once. With
# ARGV[10], the turn token (the head after this call, see RedisStore.take_turn) is pushed back
# unless one is already waiting.
_APPEND_LUA = """
local K, A = 4, 10
local cur = redis.call('HMGET', KEYS[1], 'height', 'entry_hash')
if (ARGV[1] == '' and cur[1]) or (ARGV[1] ~= '' and (cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2])) then
  local frontier = redis.call('GET', KEYS[3]) or ''
  if ARGV[10] ~= '' and redis.call('LLEN', KEYS[4]) == 0 then
    redis.call('RPUSH', KEYS[4], (cur[1] or '') .. '|' .. (cur[2] or '') .. '|' .. frontier)
  end
  return {0, cur[1] or '', cur[2] or '', frontier}
end
local n = tonumber(ARGV[5])
for i = 1, n do
  if redis.call('EXISTS', KEYS[K + 2 * i]) == 1 then
    return redis.error_reply('SONATE_DUPLICATE_ID ' .. KEYS[K + 2 * i])
  end
  if redis.call('EXISTS', KEYS[K + 2 * i - 1]) == 1 then
    return redis.error_reply('SONATE_HEIGHT_TAKEN ' .. KEYS[K + 2 * i - 1])
  end
end
for i = 1, n do
  redis.call('SET', KEYS[K + 2 * i - 1], ARGV[A + 2 * i])
  redis.call('SET', KEYS[K + 2 * i], ARGV[A + 2 * i - 1])
end
local frontier = ''
if ARGV[6] ~= '' then
  local base = A + 2 * n
  for j = 0, tonumber(ARGV[8]) - 1 do
    local a = base + 3 * j
    redis.call('SETRANGE', KEYS[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), ARGV[a + 3])
  end
  local size = tonumber(redis.call('GET', KEYS[2]) or '0')
  if size == tonumber(ARGV[6]) then
    redis.call('SET', KEYS[2], ARGV[7])
    if ARGV[9] ~= '' then
      redis.call('SET', KEYS[3], ARGV[9])
      frontier = ARGV[9]
    end
  end
end
redis.call('HSET', KEYS[1], 'height', ARGV[3], 'entry_hash', ARGV[4])
if ARGV[10] ~= '' and redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], ARGV[3] .. '|' .. ARGV[4] .. '|' .. frontier)
end
return {1}
"""

# KEYS: head, tree:size, node chunk keys. ARGV: old size, new size, node count, then triples as above.
_PUT_NODES_LUA = """
local size = tonumber(redis.call('GET', KEYS[2]) or '0')
if size ~= tonumber(ARGV[1]) then return 0 end
local top = redis.call('HGET', KEYS[1], 'height')
local stored = top and (tonumber(top) + 1) or 0
if tonumber(ARGV[2]) > stored then return 0 end
for j = 0, tonumber(ARGV[3]) - 1 do
  local a = 3 + 3 * j
  redis.call('SETRANGE', KEYS[tonumber(ARGV[a + 1])], tonumber(ARGV[a + 2]), ARGV[a + 3])
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

# KEYS: cp, cp:sizes. ARGV: size, note.
_PUT_CHECKPOINT_LUA = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1])
return 1
"""

#: The key prefix of each review queue (names kept from before the queues were one API).
_QUEUE_PREFIXES = {"escalations": "cases", "adjudications": "adj"}

# KEYS: items, items:status, items:seq, items:all, items:s:<status>. ARGV: id, status, body.
_PUT_ITEM_LUA = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[4], seq, ARGV[1])
redis.call('ZADD', KEYS[5], seq, ARGV[1])
return 1
"""

# KEYS: eval:<series>, eval:<series>:ids. ARGV: run_id, body. Returns 0 (run id stored already) or 1.
_APPEND_RESULT_LUA = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
return 1
"""

# KEYS: items, items:status, items:all, items:s:<old>, items:s:<new>. ARGV: id, old status, new status, body.
# Returns 0 (no such item), -1 (the status moved on since it was read) or 1.
_UPDATE_ITEM_LUA = """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return 0 end
if cur ~= ARGV[2] then return -1 end
local seq = redis.call('ZSCORE', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], seq, ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""


# KEYS: items, items:all, then the index zsets to read (items:all or items:s:<status>...).
# ARGV: the cursor id ("" for the first page), how many to return. One atomic snapshot: the
# cursor's creation number, then the next ARGV[2] ids of the indexes merged in creation order.
# Returns nil for an unknown cursor, else the bodies.
_PAGE_ITEMS_LUA = """
local start = '-inf'
if ARGV[1] ~= '' then
  local seq = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not seq then return false end
  start = '(' .. seq
end
local n = tonumber(ARGV[2])
local picked = {}
for i = 3, #KEYS do
  local r = redis.call('ZRANGEBYSCORE', KEYS[i], start, '+inf', 'WITHSCORES', 'LIMIT', 0, n)
  for j = 1, #r, 2 do table.insert(picked, {tonumber(r[j + 1]), r[j]}) end
end
table.sort(picked, function(a, b) return a[1] < b[1] end)
local out = {}
for j = 1, math.min(n, #picked) do out[j] = redis.call('HGET', KEYS[1], picked[j][2]) end
return out
"""

def _frontier_text(size: int, frontier: Sequence[bytes]) -> str:
    """``{ns}:tree:frontier`` value: ``<tree size>:<hex of each compact-range hash>``."""
    return f"{size}:" + "".join(bytes(h).hex() for h in frontier)


def _parse_frontier(text: str, size: int) -> list[bytes] | None:
    """The compact range stored in ``text`` if it belongs to tree ``size`` and is well formed, else None."""
    stored, _, hexes = text.partition(":")
    if stored != str(size) or len(hexes) != 64 * bin(size).count("1"):
        return None
    try:
        return [bytes.fromhex(hexes[i:i + 64]) for i in range(0, len(hexes), 64)]
    except ValueError:
        return None


@contextlib.asynccontextmanager
async def _translate_errors() -> AsyncIterator[None]:
    """Map redis-py/OS errors to :class:`LedgerUnavailable` / :class:`LedgerConflict`."""
    try:
        yield
    except ResponseError as exc:
        message = str(exc)
        if "SONATE_DUPLICATE_ID" in message:
            receipt_id = message.rsplit(":id:", 1)[-1]
            raise LedgerConflict(f"receipt_id {receipt_id} is already in the ledger") from None
        if "SONATE_HEIGHT_TAKEN" in message:
            raise LedgerConflict(f"ledger height already occupied: {message.split()[-1]}") from None
        raise LedgerUnavailable(f"Redis ledger refused the command: {message}") from exc
    except (RedisError, OSError) as exc:
        raise LedgerUnavailable(f"Redis ledger unreachable: {exc}") from exc


def _client(url: str, decode: bool, socket_timeout_s: float, connect_timeout_s: float,
            cluster: bool = False) -> aioredis.Redis:
    """A ``redis.asyncio`` client with few, quick retries (``cluster``: a Redis Cluster client that
    finds every node from the one in ``url`` and sends each key to its slot's master).

    A retried append whose first try did commit is caught by the duplicate-id check
    (see :meth:`proxy.receipts.chain.Ledger.append`).
    """
    if cluster:
        from redis.asyncio.cluster import RedisCluster

        # the same command API for one slot's keys, so the ledger code takes either client
        return RedisCluster.from_url(  # type: ignore[return-value]
            url, decode_responses=decode, socket_timeout=socket_timeout_s,
            socket_connect_timeout=connect_timeout_s,
            retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.01), 2))
    return aioredis.Redis.from_url(
        url, decode_responses=decode, socket_timeout=socket_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.01), 2))


def _text(value: Any) -> str:
    """A reply of the decoding client as ``str`` (redis-py types every reply as ``bytes | str``)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore(LedgerStore):
    """A :class:`LedgerStore` in Redis under the hash tag ``{namespace}``.

    ``url`` is a redis-py URL (``redis://host:port/db``) without the
    ``namespace`` parameter. Connection, timeout and server errors surface as
    :class:`LedgerUnavailable`. Raises ``ValueError`` for a namespace outside
    ``[A-Za-z0-9_.:-]{1,100}``.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "sonate",
        socket_timeout_s: float = 5.0,
        connect_timeout_s: float = 2.0,
        cluster: bool = False,
    ) -> None:
        """Create the client (connections open lazily); ``cluster``: a Redis Cluster client."""
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"bad ledger namespace {namespace!r}: use 1-100 of [A-Za-z0-9_.:-]")
        self.namespace = namespace
        self._prefix = "{" + namespace + "}:"
        self.cluster = cluster
        self._redis = _client(url, True, socket_timeout_s, connect_timeout_s, cluster)
        # Merkle nodes are raw bytes: read them through a client that does not decode.
        self._raw = _client(url, False, socket_timeout_s, connect_timeout_s, cluster)
        self._append = self._redis.register_script(_APPEND_LUA)
        self._put_nodes = self._redis.register_script(_PUT_NODES_LUA)
        self._put_checkpoint = self._redis.register_script(_PUT_CHECKPOINT_LUA)
        self._put_item = self._redis.register_script(_PUT_ITEM_LUA)
        self._update_item = self._redis.register_script(_UPDATE_ITEM_LUA)
        self._page_items = self._redis.register_script(_PAGE_ITEMS_LUA)
        self._append_result = self._redis.register_script(_APPEND_RESULT_LUA)
        self._turns_refused = False

    def key(self, *parts: str | int) -> str:
        """Return the full key for ``parts``, e.g. ``key("r", 5)`` -> ``{ns}:r:5``."""
        return self._prefix + ":".join(str(p) for p in parts)

    # -- receipts -------------------------------------------------------------
    async def head(self) -> Head | None:
        """Return the last receipt's height and entry hash, or None when empty."""
        async with _translate_errors():
            height, digest = await self._redis.hmget(self.key("head"), ["height", "entry_hash"])
        return None if height is None else Head(int(height), _text(digest))

    def node_location(self, node: tuple[int, int]) -> tuple[str, int]:
        """Return ``(key, byte offset)`` of Merkle node ``(level, index)`` (see the module docstring)."""
        level, index = node
        return self.key("t", level, index >> _NODE_CHUNK_BITS), (index & ((1 << _NODE_CHUNK_BITS) - 1)) * 32

    def _node_args(self, nodes: dict[tuple[int, int], bytes], keys: list[str]) -> list[str | int | bytes]:
        """Append node chunk keys to ``keys``; return the (key index, offset, hash) triples for Lua."""
        slots: dict[str, int] = {}
        args: list[str | int | bytes] = []
        for node, digest in sorted(nodes.items()):
            key, offset = self.node_location(node)
            if key not in slots:
                keys.append(key)
                slots[key] = len(keys)  # Lua KEYS are 1-based
            args += [slots[key], offset, bytes(digest)]
        return args

    async def compare_and_append(
        self, receipts: list[dict[str, Any]], expected: Head | None, tree: TreeUpdate | None = None,
        *, encoded: Sequence[bytes] | None = None, frontier: Sequence[bytes] | None = None,
        release_turn: bool = False,
    ) -> AppendOutcome:
        """Compare-and-set append as one Lua script, tree nodes included (see :class:`LedgerStore`).

        ``frontier``: the Merkle compact range after this batch (from
        :func:`proxy.primitives.merkle.extend`), kept in ``{ns}:tree:frontier``
        with the tree size so a writer that loses the race gets it back with
        the new head. ``release_turn``: push the turn token (:meth:`take_turn`)
        back, carrying the head after this call, unless one is waiting already.
        """
        check_batch(receipts, expected)
        if tree is not None:
            check_tree_update(tree, receipts)
        bodies = list(encoded) if encoded is not None else [canonical(r) for r in receipts]
        if len(bodies) != len(receipts):
            raise ValueError("encoded must hold one body per receipt")
        last = Head(receipts[-1]["ledger_height"], sha256_ref(bodies[-1]))
        keys = [self.key("head"), self.key("tree", "size"), self.key("tree", "frontier"), self.key("turn")]
        args: list[str | int | bytes] = [
            "" if expected is None else expected.height,
            "" if expected is None else expected.entry_hash,
            last.height,
            last.entry_hash,
            len(receipts),
            "" if tree is None else tree.old_size,
            "" if tree is None else tree.new_size,
            0 if tree is None else len(tree.nodes),
            "" if tree is None or frontier is None else _frontier_text(tree.new_size, frontier),
            "1" if release_turn and not self._turns_refused else "",
        ]
        for receipt, body in zip(receipts, bodies):
            keys += [self.key("r", receipt["ledger_height"]), self.key("id", receipt["receipt_id"])]
            args += [receipt["ledger_height"], body]
        if tree is not None:
            args += self._node_args(tree.nodes, keys)
        async with _translate_errors():
            reply = await self._append(keys=keys, args=args)
        if int(reply[0]) == 1:
            return AppendOutcome(True, last)
        head = None if reply[1] == "" else Head(int(reply[1]), reply[2])
        return AppendOutcome(False, head, _parse_frontier(reply[3], 0 if head is None else head.height + 1))

    async def take_turn(self, timeout_s: float) -> tuple[Head | None, list[bytes] | None] | None:
        """Wait up to ``timeout_s`` for the turn token (``BLPOP {ns}:turn``); see :meth:`ReceiptLog.take_turn`.

        A Redis that refuses ``BLPOP`` (an ACL without list commands) turns turn-taking off
        for this store, with one warning: appends go on without it.
        """
        if self._turns_refused:
            return None
        try:
            async with _translate_errors():
                popped = await self._redis.blpop([self.key("turn")], timeout=timeout_s)
        except LedgerUnavailable as exc:
            if not isinstance(exc.__cause__, ResponseError):
                raise
            self._turns_refused = True
            _log.warning("Redis refused BLPOP on the turn key (%s): appends go on without turn-taking", exc)
            return None
        if popped is None:
            return None
        height, _, rest = _text(popped[1]).partition("|")
        digest, _, frontier = rest.partition("|")
        head = Head(int(height), digest) if height.isdigit() and digest else None
        return head, _parse_frontier(frontier, 0 if head is None else head.height + 1)

    # -- Merkle tree and checkpoints ------------------------------------------
    async def tree_size(self) -> int:
        """Return the number of leaves whose complete Merkle nodes are stored."""
        async with _translate_errors():
            value = await self._redis.get(self.key("tree", "size"))
        return 0 if value is None else int(value)

    async def get_nodes(self, ids: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Return each node's 32-byte hash (None where not stored): one pipelined GETRANGE per node."""
        wanted = list(ids)
        if not wanted:
            return []
        async with _translate_errors():
            async with self._raw.pipeline(transaction=False) as pipe:
                for node in wanted:
                    key, offset = self.node_location(node)
                    pipe.getrange(key, offset, offset + 31)
                values = await pipe.execute()
        return [v if isinstance(v, bytes) and len(v) == 32 and v != _ZERO_HASH else None for v in values]

    async def put_nodes(self, update: TreeUpdate) -> bool:
        """Backfill nodes with a compare-and-set on the tree size, as one Lua script."""
        check_tree_update(update)
        keys = [self.key("head"), self.key("tree", "size")]
        args: list[str | int | bytes] = [update.old_size, update.new_size, len(update.nodes)]
        args += self._node_args(update.nodes, keys)
        async with _translate_errors():
            return bool(await self._put_nodes(keys=keys, args=args) == 1)

    async def put_checkpoint(self, tree_size: int, note: str) -> bool:
        """Store a checkpoint note unless one exists for ``tree_size`` (HSETNX + ZADD in Lua); True if written."""
        check_checkpoint(tree_size, note)
        async with _translate_errors():
            written = await self._put_checkpoint(keys=[self.key("cp"), self.key("cp", "sizes")],
                                                 args=[tree_size, note])
        return bool(written == 1)

    async def get_checkpoint(self, tree_size: int) -> str | None:
        """Return the checkpoint note for ``tree_size`` or None."""
        async with _translate_errors():
            note = await self._redis.hget(self.key("cp"), str(tree_size))
        return None if note is None else _text(note)

    async def latest_checkpoint(self) -> str | None:
        """Return the checkpoint note with the largest tree size, or None."""
        async with _translate_errors():
            sizes = await self._redis.zrevrange(self.key("cp", "sizes"), 0, 0)
            note = None if not sizes else await self._redis.hget(self.key("cp"), _text(sizes[0]))
        return None if note is None else _text(note)

    async def checkpoint_sizes(self, start: int = 0, end: int | None = None) -> list[int]:
        """Return stored checkpoint tree sizes in ``start <= size < end``, ascending."""
        upper = "+inf" if end is None else f"({end}"
        async with _translate_errors():
            sizes = await self._redis.zrangebyscore(self.key("cp", "sizes"), start, upper)
        return [int(_text(size)) for size in sizes]

    async def put_cosignature(self, tree_size: int, cosigner: str, line: str) -> None:
        """Store (or replace) ``cosigner``'s cosignature line on checkpoint ``tree_size`` (HSET)."""
        check_cosignature(tree_size, cosigner, line)
        async with _translate_errors():
            await self._redis.hset(self.key("cosig", tree_size), cosigner, line)

    async def get_cosignatures(self, tree_size: int) -> list[str]:
        """Return the cosignature lines stored for checkpoint ``tree_size``, by cosigner name."""
        async with _translate_errors():
            lines = await self._redis.hgetall(self.key("cosig", tree_size))
        return [_text(lines[name]) for name in sorted(lines)]

    async def get_by_height(self, height: int) -> dict[str, Any] | None:
        """Return the receipt at ``height`` or None."""
        async with _translate_errors():
            body = await self._redis.get(self.key("r", height))
        return None if body is None else json.loads(body)

    async def get_by_id(self, receipt_id: str) -> dict[str, Any] | None:
        """Return the receipt with ``receipt_id`` or None."""
        async with _translate_errors():
            height = await self._redis.get(self.key("id", receipt_id))
        return None if height is None else await self.get_by_height(int(height))

    async def range(self, start: int, end: int) -> list[dict[str, Any]]:
        """Return receipts with ``start <= height < end`` in height order (MGET in chunks)."""
        head = await self.head()
        end = min(end, 0 if head is None else head.height + 1)
        start = max(start, 0)
        out: list[dict[str, Any]] = []
        for lo in range(start, end, _CHUNK):
            keys = [self.key("r", h) for h in range(lo, min(lo + _CHUNK, end))]
            async with _translate_errors():
                bodies = await self._redis.mget(keys)
            out += [json.loads(body) for body in bodies if body is not None]
        return out

    # -- review queues ----------------------------------------------------------
    def _queue_keys(self, queue: str, *parts: str) -> str:
        """The key ``{ns}:<queue prefix>[:parts]`` of a review queue (see :data:`_QUEUE_PREFIXES`)."""
        return self.key(_QUEUE_PREFIXES[queue], *parts)

    async def put_item(self, queue: str, item: dict[str, Any]) -> None:
        """Insert an item (one Lua script); :class:`LedgerConflict` if the id exists."""
        check_item(queue, item)
        q = functools.partial(self._queue_keys, queue)
        keys = [q(), q("status"), q("seq"), q("all"), q("s", item["status"])]
        async with _translate_errors():
            created = await self._put_item(keys=keys, args=[item["id"], item["status"], json.dumps(item)])
        if created != 1:
            raise LedgerConflict(f"{queue} item {item['id']} already exists")

    async def get_item(self, queue: str, item_id: str) -> dict[str, Any] | None:
        """Return the item of ``queue`` or None."""
        check_queue(queue)
        async with _translate_errors():
            body = await self._redis.hget(self._queue_keys(queue), item_id)
        return None if body is None else json.loads(body)

    async def list_items(self, queue: str, status: str | None = None) -> list[dict[str, Any]]:
        """Return the items of ``queue``, oldest first, optionally only those with ``status``."""
        check_queue(queue)
        index = self._queue_keys(queue, "all") if status is None else self._queue_keys(queue, "s", status)
        out: list[dict[str, Any]] = []
        async with _translate_errors():
            ids = await self._redis.zrange(index, 0, -1)
            for lo in range(0, len(ids), _CHUNK):
                bodies = await self._redis.hmget(self._queue_keys(queue), [_text(i) for i in ids[lo:lo + _CHUNK]])
                out += [json.loads(b) for b in bodies if b is not None]
        # An item may change status between the two reads: filter on the body.
        return out if status is None else [i for i in out if i.get("status") == status]

    async def page_items(self, queue: str, statuses: str | Sequence[str] | None = None, *, after: str | None = None,
                         limit: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        """One page in creation order, read atomically by one Lua script over the creation-ordered
        index zsets (``ZRANGEBYSCORE (seq +inf LIMIT``); see :meth:`ReviewQueue.page_items`."""
        check_queue(queue)
        wanted = check_page(statuses, limit)
        q = functools.partial(self._queue_keys, queue)
        indexes = [q("all")] if wanted is None else [q("s", status) for status in dict.fromkeys(wanted)]
        async with _translate_errors():
            bodies = await self._page_items(keys=[q(), q("all"), *indexes], args=[after or "", limit + 1])
        if bodies is None:
            raise KeyError(after)
        items = [json.loads(b) for b in bodies[:limit]]
        return items, items[-1]["id"] if len(bodies) > limit else None

    async def update_item(self, queue: str, item: dict[str, Any], *, expected_status: str | None = None) -> None:
        """Replace an item; ``KeyError`` if missing, :class:`LedgerConflict` on a status mismatch.

        A compare-and-set on the status read just before (Lua), retried while
        other writers move the item between statuses.
        """
        check_item(queue, item)
        q = functools.partial(self._queue_keys, queue)
        body = json.dumps(item)
        for _ in range(100):
            async with _translate_errors():
                old = await self._redis.hget(q("status"), item["id"])
                if old is None:
                    raise KeyError(item["id"])
                old = _text(old)
                if expected_status is not None and old != expected_status:
                    raise LedgerConflict(f"{queue} item {item['id']} is {old}, not {expected_status}")
                keys = [q(), q("status"), q("all"), q("s", old), q("s", item["status"])]
                result = await self._update_item(keys=keys, args=[item["id"], old, item["status"], body])
            if result == 0:
                raise KeyError(item["id"])
            if result == 1:
                return
        raise LedgerConflict(f"{queue} item {item['id']} keeps changing; update abandoned")

    # -- lifecycle --------------------------------------------------------------
    # -- evaluation results -------------------------------------------------------
    async def append_result(self, series: str, result: dict[str, Any]) -> None:
        """RPUSH the result (one Lua script with the run-id check); :class:`LedgerConflict` on a repeated run_id."""
        check_result(series, result)
        async with _translate_errors():
            added = await self._append_result(keys=[self.key("eval", series), self.key("eval", series, "ids")],
                                              args=[result["run_id"], json.dumps(result, ensure_ascii=False)])
        if added != 1:
            raise LedgerConflict(f"evaluation run {result['run_id']} already stored in {series}")

    async def list_results(self, series: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The results of ``series`` in append order (``LRANGE``; the last ``limit``)."""
        check_result(series, {"run_id": "-", "generated": ""})
        check_limit(limit)
        async with _translate_errors():
            bodies = await self._redis.lrange(self.key("eval", series), 0 if limit is None else -limit, -1)
        return [json.loads(b) for b in bodies]

    async def ping(self) -> None:
        """Send PING; raise :class:`LedgerUnavailable` if Redis does not answer."""
        async with _translate_errors():
            await self._redis.ping()

    async def close(self) -> None:
        """Close the connection pools. Idempotent."""
        await self._redis.aclose()
        await self._raw.aclose()

    def __repr__(self) -> str:
        return f"RedisStore(namespace={self.namespace!r})"
