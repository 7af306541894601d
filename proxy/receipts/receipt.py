"""The trust receipt: fields, construction, sealing and the chain hash.

The contract is docs/architecture.md, "Trust receipts". A receipt is a plain ``dict``
with exactly :data:`RECEIPT_FIELDS`; it holds no floats. Pure: no I/O.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from functools import partial
from typing import Any, Protocol

from proxy.primitives.canonical import assert_no_floats, canonical, sha256_ref

__all__ = [
    "CHAIN_FIELDS",
    "GENESIS_PREV_HASH",
    "OPTIONAL_FIELDS",
    "RECEIPT_FIELDS",
    "RECEIPT_VERSION",
    "entry_hash",
    "new_receipt",
    "schema_problems",
    "seal",
    "signing_payload",
    "utc_timestamp",
]

RECEIPT_VERSION = 1
GENESIS_PREV_HASH = "sha256:" + "0" * 64
"""``prev_hash`` of the receipt at height 0."""

RECEIPT_FIELDS: tuple[str, ...] = (
    "v", "receipt_id", "request_id", "ts", "actor", "intent", "inputs_hash",
    "outputs_hash", "policy_id", "guardrail_action", "evidence", "model",
    "provider", "stratum", "key_id", "ledger_height", "prev_hash", "ed25519_sig",
)
CHAIN_FIELDS: tuple[str, ...] = ("key_id", "ledger_height", "prev_hash", "ed25519_sig")
OPTIONAL_FIELDS: tuple[str, ...] = ("ledger",)
"""Fields a receipt may carry beyond :data:`RECEIPT_FIELDS`: ``ledger``, the name of the ledger
(chain) it was written to when the deployment partitions its receipts (``ledger.partition``,
:mod:`proxy.receipts.ledgers`); absent on a single-ledger deployment and on receipts written
before ledgers were partitioned. Signed like every other field."""
"""Fields :func:`seal` adds; an unsealed receipt has all other fields."""

_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_RECEIPT_ID = re.compile(r"rcpt_[0-9a-f]{32}")
_KEY_ID = re.compile(r"ed25519:[0-9a-f]{16}")
_LEDGER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SIG = re.compile(r"[A-Za-z0-9_-]{85}[AQgw]")  # 64 bytes, canonical unpadded base64url
_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


class _Signer(Protocol):
    key_id: str

    def sign(self, message: bytes) -> str: ...


def utc_timestamp(now: datetime | None = None) -> str:
    """Return an RFC 3339 UTC timestamp with milliseconds, e.g. ``2026-11-22T03:04:05.123Z``.

    ``now`` defaults to the current time; naive datetimes are taken as UTC.
    """
    now = now or datetime.now(timezone.utc)
    if now.tzinfo is not None:
        now = now.astimezone(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _valid_ts(value: Any) -> bool:
    if not isinstance(value, str) or not _TS.fullmatch(value):
        return False
    try:
        datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _opt_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _matches(pattern: re.Pattern[str], value: Any) -> bool:
    """True when ``value`` is a string that ``pattern`` matches whole (fullmatch: no trailing newline).
    Bound to its pattern in :data:`_CHECKS` with functools.partial, so this code runs when a receipt
    is checked (not when the table is built) and mutation testing can reach it."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


_CHECKS: dict[str, tuple[Any, str]] = {
    "v": (lambda v: _is_int(v) and v == RECEIPT_VERSION, f"must be the integer {RECEIPT_VERSION}"),
    "receipt_id": (partial(_matches, _RECEIPT_ID), "must be rcpt_ + 32 lowercase hex"),
    "request_id": (_nonempty_str, "must be a non-empty string"),
    "ts": (_valid_ts, "must be RFC 3339 UTC with milliseconds, e.g. 2026-11-22T03:04:05.123Z"),
    "actor": (_nonempty_str, "must be a non-empty string"),
    "intent": (_opt_str, "must be a string or null"),
    "inputs_hash": (partial(_matches, _HASH), "must be sha256: + 64 lowercase hex"),
    "outputs_hash": (partial(_matches, _HASH), "must be sha256: + 64 lowercase hex"),
    "policy_id": (_opt_str, "must be a string or null"),
    "guardrail_action": (_nonempty_str, "must be a non-empty string"),
    "evidence": (lambda v: isinstance(v, dict), "must be an object"),
    "model": (_opt_str, "must be a string or null"),
    "provider": (_opt_str, "must be a string or null"),
    "stratum": (lambda v: isinstance(v, dict), "must be an object"),
    "key_id": (partial(_matches, _KEY_ID), "must be ed25519: + 16 lowercase hex"),
    "ledger_height": (lambda v: _is_int(v) and 0 <= v <= 2**53 - 1, "must be an integer >= 0"),
    "prev_hash": (partial(_matches, _HASH), "must be sha256: + 64 lowercase hex"),
    "ed25519_sig": (partial(_matches, _SIG), "must be 64 bytes as unpadded base64url"),
    "ledger": (partial(_matches, _LEDGER), "must be 1-64 of letters, digits, '_', '.' or '-'"),
}


def schema_problems(receipt: Any, *, sealed: bool = True, check_floats: bool = True) -> list[tuple[str, str]]:
    """Return ``[(field, problem), ...]`` for a receipt; empty means well-formed.

    Checks (docs/architecture.md, "Trust receipts"): the receipt is an object with
    exactly :data:`RECEIPT_FIELDS` (without :data:`CHAIN_FIELDS` when
    ``sealed`` is False), each field has its type and format, and no float
    appears anywhere (the field is ``"$..."`` path of the float then). A caller
    that has already walked the receipt for floats passes ``check_floats=False``.
    """
    if not isinstance(receipt, dict):
        return [("$", "receipt must be a JSON object")]
    expected = RECEIPT_FIELDS if sealed else tuple(f for f in RECEIPT_FIELDS if f not in CHAIN_FIELDS)
    problems: list[tuple[str, str]] = []
    for name in expected:
        if name not in receipt:
            problems.append((name, "missing"))
            continue
        check, message = _CHECKS[name]
        if not check(receipt[name]):
            problems.append((name, f"{message}, got {receipt[name]!r:.80}"))
    for name in OPTIONAL_FIELDS:
        if name in receipt:
            check, message = _CHECKS[name]
            if not check(receipt[name]):
                problems.append((name, f"{message}, got {receipt[name]!r:.80}"))
    for name in receipt:
        if name not in expected and name not in OPTIONAL_FIELDS:
            problems.append((str(name), "unexpected field"))
    if check_floats:
        try:
            assert_no_floats(receipt)
        except TypeError as exc:
            problems.append(("$", str(exc)))
    return problems


def new_receipt(
    *,
    request_id: str,
    actor: str,
    intent: str | None,
    inputs_hash: str,
    outputs_hash: str,
    policy_id: str | None,
    guardrail_action: str,
    evidence: dict[str, Any],
    model: str | None,
    provider: str | None,
    stratum: dict[str, Any],
    ts: str | None = None,
) -> dict[str, Any]:
    """Build an unsigned, unchained receipt (``v``, a fresh ``receipt_id``, ``ts``).

    ``receipt_id`` = ``"rcpt_" + uuid4().hex``; ``ts`` defaults to
    :func:`utc_timestamp`. ``inputs_hash``/``outputs_hash`` are
    ``sha256:<hex>`` (see :func:`proxy.primitives.canonical.json_hash`).
    ``evidence`` and ``stratum`` are JSON objects without floats (scores as
    decimal strings). :func:`seal` adds the chain fields.

    Raises ``TypeError`` if a float (or an integer beyond ±2**53−1) appears,
    ``ValueError`` for any other malformed field.
    """
    receipt = {
        "v": RECEIPT_VERSION,
        "receipt_id": "rcpt_" + uuid.uuid4().hex,
        "request_id": request_id,
        "ts": ts if ts is not None else utc_timestamp(),
        "actor": actor,
        "intent": intent,
        "inputs_hash": inputs_hash,
        "outputs_hash": outputs_hash,
        "policy_id": policy_id,
        "guardrail_action": guardrail_action,
        "evidence": evidence,
        "model": model,
        "provider": provider,
        "stratum": stratum,
    }
    assert_no_floats(receipt)
    problems = schema_problems(receipt, sealed=False)
    if problems:
        raise ValueError("; ".join(f"{field}: {problem}" for field, problem in problems))
    return receipt


def signing_payload(receipt: dict[str, Any]) -> bytes:
    """Return ``canonical(receipt without ed25519_sig)``: the bytes Ed25519 signs."""
    return canonical({k: v for k, v in receipt.items() if k != "ed25519_sig"})


def seal(receipt: dict[str, Any], *, ledger_height: int, prev_hash: str, signer: _Signer) -> dict[str, Any]:
    """Return a new dict: ``receipt`` chained at ``ledger_height`` after ``prev_hash`` and signed.

    Adds ``key_id`` (the signer's), ``ledger_height``, ``prev_hash`` and
    ``ed25519_sig`` = Ed25519 over :func:`signing_payload` (base64url, no
    padding). Any chain fields already present are replaced. The input is
    not modified. Raises ``ValueError`` for a malformed receipt, a negative
    height or a malformed ``prev_hash``, and ``TypeError`` for floats.
    """
    body = {k: v for k, v in receipt.items() if k not in CHAIN_FIELDS}
    assert_no_floats(body)
    problems = schema_problems(body, sealed=False)
    if problems:
        raise ValueError("; ".join(f"{field}: {problem}" for field, problem in problems))
    if not _is_int(ledger_height) or ledger_height < 0:
        raise ValueError(f"ledger_height must be an integer >= 0, got {ledger_height!r}")
    if not isinstance(prev_hash, str) or not _HASH.fullmatch(prev_hash):
        raise ValueError(f"prev_hash must be sha256: + 64 lowercase hex, got {prev_hash!r}")
    sealed = {**body, "key_id": signer.key_id, "ledger_height": ledger_height, "prev_hash": prev_hash}
    sealed["ed25519_sig"] = signer.sign(signing_payload(sealed))
    return sealed


def entry_hash(receipt: dict[str, Any]) -> str:
    """Return ``sha256_ref(canonical(receipt))`` over the full receipt, signature included.

    The next receipt's ``prev_hash`` must equal this value (docs/architecture.md, "Chain").
    """
    return sha256_ref(canonical(receipt))
