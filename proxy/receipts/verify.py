"""Receipt and chain verification (docs/architecture.md, "Trust receipts").

Every verifier (this module, ``sonate verify`` and the browser page)
implements the same rules: exact schema without floats, a known ``key_id``,
a valid Ed25519 signature (RFC 8032) over the RFC 8785 canonical receipt
without ``ed25519_sig``, ``prev_hash`` = entry hash of the previous receipt,
the genesis hash at height 0, contiguous heights and one receipt per height
and per receipt_id. Pure except :func:`verify_store`, which reads a store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from proxy.primitives.canonical import CanonicalizationError
from proxy.primitives.failure import Failure
from proxy.receipts.receipt import GENESIS_PREV_HASH, entry_hash, schema_problems, signing_payload
from proxy.receipts.signing import verify_signature

if TYPE_CHECKING:
    from proxy.storage.base import LedgerStore

__all__ = ["CHECKS", "ChainVerifier", "verify_chain", "verify_receipt", "verify_store"]

CHECKS = ("schema", "unknown_key", "signature", "genesis", "prev_hash", "height", "duplicate", "head",
          "key_window")
"""Check names a :class:`Failure` can carry. ``head``: the store's head does
not match its last receipt, or a receipt is stored above the head. ``key_window``: the receipt's
``ts`` is at or after its key's ``not_after`` (a retired key), or its ``ledger_height`` is below its key's
``not_before_height`` (sealed before the key existed); docs/receipts.md "Keys and rotation"."""


def _height(receipt: Any) -> int | None:
    """A receipt's ``ledger_height`` when it is an object holding a non-negative integer there, else None
    (also used by :mod:`proxy.receipts.audit`)."""
    value = receipt.get("ledger_height") if isinstance(receipt, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _receipt_id(receipt: Any) -> str | None:
    value = receipt.get("receipt_id") if isinstance(receipt, dict) else None
    return value if isinstance(value, str) else None


def _entry_hash_or_none(receipt: Any) -> str | None:
    try:
        return entry_hash(receipt)
    except (CanonicalizationError, TypeError, ValueError, AttributeError):
        return None


def _key_window(receipt: dict[str, Any], key_id: str, public_keys: dict[str, bytes]) -> list[Failure]:
    """``key_window`` failures of a receipt signed by ``key_id`` (docs/receipts.md "Keys and rotation").

    Two bounds, from the keyring (:class:`proxy.receipts.signing.PublicKeys`; a plain dict has none):

    - ``ts`` at or after the key's ``not_after``: a retired key signed it. Both sides use the same
      fixed-width RFC 3339 form (the schema and the key loader check it), so string order is time order.
    - ``ledger_height`` below the key's ``not_before_height``: that height was sealed before the key
      existed (the keyring records the ledger size read just before a rotation), so the receipt was
      rewritten later. The time ``not_before`` is not checked: a spooled receipt keeps the ``ts`` of its
      request and may be sealed after a rotation (at a height above the recorded one).
    """
    height, receipt_id = _height(receipt), _receipt_id(receipt)
    fails = []
    not_after = getattr(public_keys, "windows", {}).get(key_id, (None, None))[1]
    ts = receipt.get("ts")
    if not_after is not None and isinstance(ts, str) and ts >= not_after:
        fails.append(Failure(height, receipt_id, "key_window",
                             f"ts {ts} is not before {key_id}'s not_after {not_after} (key retired)"))
    first = getattr(public_keys, "heights", {}).get(key_id)
    if first is not None and height is not None and height < first:
        fails.append(Failure(height, receipt_id, "key_window",
                             f"ledger_height {height} is below {key_id}'s not_before_height {first}: the key did "
                             "not exist when that height was sealed (history rewritten after a rotation?)"))
    return fails


def _check_self(receipt: Any, public_keys: dict[str, bytes]) -> list[Failure]:
    """Schema, key, signature and genesis checks of one receipt on its own."""
    height, receipt_id = _height(receipt), _receipt_id(receipt)
    fails = [Failure(height, receipt_id, "schema", f"{name}: {problem}") for name, problem in schema_problems(receipt)]
    if not isinstance(receipt, dict):
        return fails
    key_id = receipt.get("key_id")
    if not isinstance(key_id, str) or key_id not in public_keys:
        fails.append(Failure(height, receipt_id, "unknown_key", f"key_id {key_id!r} is not a trusted key"))
    else:
        try:
            payload: bytes | None = signing_payload(receipt)
        except (CanonicalizationError, TypeError, ValueError):
            payload = None
        signature = receipt.get("ed25519_sig")
        if payload is None or not isinstance(signature, str) or not verify_signature(
            public_keys[key_id], payload, signature
        ):
            fails.append(Failure(height, receipt_id, "signature", f"Ed25519 signature does not verify with {key_id}"))
        fails += _key_window(receipt, key_id, public_keys)
    prev_hash = receipt.get("prev_hash")
    if height == 0 and prev_hash != GENESIS_PREV_HASH:
        fails.append(Failure(0, receipt_id, "genesis", f"height 0 must carry prev_hash {GENESIS_PREV_HASH}, got {prev_hash}"))
    elif height is not None and height > 0 and prev_hash == GENESIS_PREV_HASH:
        fails.append(Failure(height, receipt_id, "genesis", "only height 0 may carry the genesis prev_hash"))
    return fails


def _check_link(receipt: Any, previous: Any, previous_hashes: Iterable[str | None] = ()) -> list[Failure]:
    """Height and prev_hash checks of ``receipt`` against the receipt before it."""
    height, receipt_id = _height(receipt), _receipt_id(receipt)
    before = _height(previous)
    if height is None or before is None:
        return []
    if height == before:
        return [Failure(height, receipt_id, "duplicate",
                        f"fork: {_receipt_id(previous)} is also at height {height}")]
    if height < before:
        return [Failure(height, receipt_id, "height", f"out of order: height {height} comes after {before}")]
    if height > before + 1:
        missing = f"{before + 1}" if height == before + 2 else f"{before + 1}..{height - 1}"
        return [Failure(height, receipt_id, "height", f"gap: height {missing} missing after {before}")]
    expected = _entry_hash_or_none(previous)
    actual = receipt.get("prev_hash")
    if actual != expected and actual not in set(previous_hashes):
        return [Failure(height, receipt_id, "prev_hash", f"expected {expected} got {actual}")]
    return []


def verify_receipt(
    receipt: Any, public_keys: dict[str, bytes], previous: dict[str, Any] | None = None
) -> list[Failure]:
    """Verify one receipt; return its failures (empty list = valid).

    ``public_keys`` maps key_id to 32-byte Ed25519 keys (see
    :func:`proxy.receipts.signing.load_public_keys`). With ``previous``, also
    check ``ledger_height == previous.ledger_height + 1`` and
    ``prev_hash == entry_hash(previous)``. Never raises on malformed input.
    """
    fails = _check_self(receipt, public_keys)
    if previous is not None:
        fails += _check_link(receipt, previous)
        if _receipt_id(receipt) is not None and _receipt_id(receipt) == _receipt_id(previous):
            fails.append(Failure(_height(receipt), _receipt_id(receipt), "duplicate",
                                 "same receipt_id as the previous receipt"))
    return fails


@dataclass
class ChainVerifier:
    """Streaming verifier of an ordered run of receipts.

    ``previous``: the receipt just before the run (its link is checked);
    ``first_height``: the height the run must start at (None: any).
    Call :meth:`feed` per receipt in order, then :meth:`finish`. ``count``
    and ``failures`` accumulate. Remembers every receipt_id seen (memory
    grows with the run) to detect duplicates.
    """

    public_keys: dict[str, bytes]
    previous: dict[str, Any] | None = None
    first_height: int | None = None
    count: int = 0
    failures: list[Failure] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._last: Any = self.previous
        self._last_hashes: set[str | None] = {_entry_hash_or_none(self.previous)} if self.previous else set()
        self._seen: dict[str, int | None] = {}
        if self.previous is not None and (previous_id := _receipt_id(self.previous)):
            self._seen[previous_id] = _height(self.previous)

    def feed(self, receipt: Any) -> list[Failure]:
        """Check the next receipt; return (and record) its failures."""
        self.count += 1
        height, receipt_id = _height(receipt), _receipt_id(receipt)
        fails = _check_self(receipt, self.public_keys)
        if receipt_id is not None:
            if receipt_id in self._seen:
                fails.append(Failure(height, receipt_id, "duplicate",
                                     f"receipt_id already seen at height {self._seen[receipt_id]}"))
            else:
                self._seen[receipt_id] = height
        if height is not None:
            last_height = _height(self._last)
            if last_height is None:
                if self.first_height is not None and height != self.first_height:
                    fails.append(Failure(height, receipt_id, "height",
                                         f"run should start at height {self.first_height}, starts at {height}"))
                self._advance(receipt)
            else:
                fails += _check_link(receipt, self._last, self._last_hashes)
                if height == last_height:
                    self._last_hashes.add(_entry_hash_or_none(receipt))
                elif height > last_height:
                    self._advance(receipt)
        self.failures += fails
        return fails

    def _advance(self, receipt: Any) -> None:
        self._last = receipt
        self._last_hashes = {_entry_hash_or_none(receipt)}

    def finish(self, end: int | None = None) -> list[Failure]:
        """Close the run; with ``end`` (exclusive), report heights missing before it."""
        fails: list[Failure] = []
        last_height = _height(self._last)
        expected_last = None if end is None else end - 1
        if expected_last is not None and expected_last >= (self.first_height or 0):
            if last_height is None or last_height < expected_last:
                begin = (self.first_height or 0) if last_height is None else last_height + 1
                span = str(begin) if begin == expected_last else f"{begin}..{expected_last}"
                fails.append(Failure(expected_last, None, "height", f"missing: height {span} not found"))
        self.failures += fails
        return fails


def verify_chain(
    receipts: Iterable[Any], public_keys: dict[str, bytes], previous: dict[str, Any] | None = None
) -> list[Failure]:
    """Verify an ordered run of receipts (any iterable, consumed once); return all failures.

    Detects gaps, forks (two receipts at one height), out-of-order heights,
    broken ``prev_hash`` links, duplicate receipt_ids, plus every check of
    :func:`verify_receipt`. ``previous`` is the receipt before the run, if any.
    """
    verifier = ChainVerifier(public_keys, previous=previous)
    for receipt in receipts:
        verifier.feed(receipt)
    verifier.finish()
    return verifier.failures


async def verify_store(
    store: "LedgerStore",
    public_keys: dict[str, bytes],
    start: int = 0,
    end: int | None = None,
    page: int = 500,
    ledger: str | None = None,
) -> tuple[int, list[Failure]]:
    """Verify heights ``start <= h < end`` of a store (``end`` None: up to the head).

    Reads ``page`` receipts at a time. Checks the link into ``start`` from
    the receipt before it, and, when the run reaches the head, that the head
    names the last receipt's height and entry hash and that nothing is stored
    above it (a store without a head but with a receipt at ``start`` fails ``head``). ``ledger``: the
    name of the ledger the store holds (:mod:`proxy.receipts.ledgers`): each receipt's signed
    ``ledger`` field must name it (check ``ledger``; in ``default`` it may be absent, as on
    receipts written before ledgers were partitioned). Returns ``(receipts checked, failures)``. Raises
    :class:`proxy.storage.base.LedgerUnavailable` if the store is down,
    ``ValueError`` for a negative ``start`` or ``page`` < 1.
    """
    if start < 0 or page < 1:
        raise ValueError("start must be >= 0 and page >= 1")
    head = await store.head()
    if head is None:  # an empty ledger, unless receipts were stored without a head (its head was deleted)
        stray = await store.get_by_height(start)
        if stray is not None and await store.head() is None:  # (not a first append landing meanwhile)
            return 0, [Failure(start, _receipt_id(stray), "head", "receipts are stored but the ledger has no head")]
        return 0, []
    top = head.height
    stop = top + 1 if end is None else min(end, top + 1)
    previous = None
    early: list[Failure] = []
    if 0 < start < stop:
        previous = await store.get_by_height(start - 1)
        if previous is None:
            early.append(Failure(start - 1, None, "height", "missing: the receipt before the range is not stored"))
    verifier = ChainVerifier(public_keys, previous=previous, first_height=start)
    last: Any = previous
    for lo in range(start, stop, page):
        for receipt in await store.range(lo, min(lo + page, stop)):
            verifier.feed(receipt)
            if ledger is not None and isinstance(receipt, dict):
                named = receipt.get("ledger", "default" if ledger == "default" else None)
                if named != ledger:
                    early.append(Failure(_height(receipt), _receipt_id(receipt), "ledger",
                                         f"receipt names ledger {named!r} but is stored in ledger {ledger!r}"))
            last = receipt
    verifier.finish(stop)
    failures = early + verifier.failures
    if stop == top + 1 and start <= top:
        last_hash = None if last is None else _entry_hash_or_none(last)  # no receipt read: no hash (not that of null)
        if _height(last) != head.height or last_hash != head.entry_hash:
            failures.append(Failure(head.height, _receipt_id(last), "head",
                                    f"head says {head.entry_hash} at {head.height}, "
                                    f"last receipt is {last_hash} at {_height(last)}"))
        above = await store.get_by_height(head.height + 1)
        now = await store.head() if above is not None else None
        if above is not None and (now is None or now.height <= head.height):  # not a concurrent append
            failures.append(Failure(head.height + 1, _receipt_id(above), "head", "receipt stored above the head"))
    return verifier.count, failures
