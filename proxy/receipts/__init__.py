"""Trust receipts: canonical JSON, Ed25519 signing, the hash-chained ledger and its verification.

The contract is docs/architecture.md, "Trust receipts". Domain modules (``canonical``,
``model``, ``verify``) do no I/O; stores (``sqlite_store``, ``redis_store``)
do, behind :class:`~proxy.storage.base.LedgerStore`.
"""

from proxy.primitives.canonical import assert_no_floats, canonical, json_hash, sha256_ref
from proxy.primitives.failure import Failure
from proxy.receipts.chain import Ledger
from proxy.receipts.receipt import (
    GENESIS_PREV_HASH,
    RECEIPT_FIELDS,
    RECEIPT_VERSION,
    entry_hash,
    new_receipt,
    seal,
    signing_payload,
    utc_timestamp,
)
from proxy.receipts.signing import (
    KeyFileError,
    Signer,
    key_id_for,
    load_or_create_signer,
    load_public_keys,
    public_key_entry,
    verify_signature,
)
from proxy.receipts.verify import verify_chain, verify_receipt, verify_store
from proxy.storage import open_store
from proxy.storage.base import Head, LedgerConflict, LedgerError, LedgerStore, LedgerUnavailable

__all__ = [
    "GENESIS_PREV_HASH",
    "RECEIPT_FIELDS",
    "RECEIPT_VERSION",
    "Failure",
    "Head",
    "KeyFileError",
    "Ledger",
    "LedgerConflict",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailable",
    "Signer",
    "assert_no_floats",
    "canonical",
    "entry_hash",
    "json_hash",
    "key_id_for",
    "load_or_create_signer",
    "load_public_keys",
    "new_receipt",
    "open_store",
    "public_key_entry",
    "seal",
    "sha256_ref",
    "signing_payload",
    "utc_timestamp",
    "verify_chain",
    "verify_receipt",
    "verify_signature",
    "verify_store",
]
