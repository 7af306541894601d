"""An operator with the database and the active key rewrites history: `sonate verify` must notice.

The two attacks of the security audit ("The operator can rewrite history"), on a real
SQLite ledger written by :class:`proxy.receipts.chain.Ledger` with the real keyring, edited with
plain SQL as the operator would, repaired with the real `sonate ledger reindex`, then checked
with the real `sonate verify`:

- (a) after `sonate keys rotate`, a receipt from before the rotation is edited (refuse → allow)
  and it and every later receipt are re-signed with the new key; the key's window
  (``not_before_height``, recorded at rotation) rejects them (docs/security.md).
- (b) the last 10 receipts are deleted with the tree size and later checkpoints, or an early
  receipt is rewritten and everything re-signed; a checkpoint the verifier saved earlier
  (``--trusted-checkpoint``) proves it (RFC 9162 consistency).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.primitives.canonical import canonical
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, open_store, verify_store
from proxy.receipts.keyring import Keyring
from proxy.receipts.receipt import GENESIS_PREV_HASH, entry_hash, seal
from proxy.receipts.signing import _read_key_file
from proxy.receipts.tree import publish_checkpoint
from proxy.storage.base import LedgerStore
from tests.support.ledger import keys, ledger_url, make_receipt, signer, store  # noqa: F401  (fixtures)
from tests.support.redis_server import redis_url

REFUSED_AT = 10


@pytest.fixture()
def sonate(capsys: pytest.CaptureFixture[str]):
    """Run the `sonate` CLI entry point in process (the same parser and code as the console script)."""
    from proxy.cli import main

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["sonate", *args], code, out, err)

    return run


async def _write(url: str, key_file: Path, count: int, checkpoint_every: int = 0) -> None:
    """Append ``count`` receipts one request at a time (the one at REFUSED_AT refused), as a proxy would."""
    keyring = Keyring(key_file, reload_interval_s=0).load()
    store = open_store(url)
    try:
        ledger = Ledger(store, keyring.current(), signer_source=keyring.current)
        head = await store.head()
        start = 0 if head is None else head.height + 1
        for height in range(start, start + count):
            action = "refuse" if height == REFUSED_AT else "allow"
            await ledger.append([make_receipt(guardrail_action=action, policy_id="safety" if action == "refuse"
                                              else "matrix")])
            if checkpoint_every and (height + 1) % checkpoint_every == 0:
                await publish_checkpoint(store, keyring.current())
    finally:
        await store.close()


def _rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        return [json.loads(body) for (body,) in conn.execute("SELECT body FROM receipts ORDER BY height")]


def _reseal_from(db: Path, start: int, signer: Any, edit: dict[str, Any]) -> None:
    """The operator's rewrite: edit the receipt at ``start``, re-sign it and every later one with ``signer``,
    write them back and drop the Merkle tree and every checkpoint (which would no longer match)."""
    receipts = _rows(db)
    prev = GENESIS_PREV_HASH if start == 0 else entry_hash(receipts[start - 1])
    with sqlite3.connect(db) as conn:
        for receipt in receipts[start:]:
            body = {k: v for k, v in receipt.items() if k not in ("key_id", "ledger_height", "prev_hash", "ed25519_sig")}
            if receipt["ledger_height"] == start:
                body.update(edit)
            sealed = seal(body, ledger_height=receipt["ledger_height"], prev_hash=prev, signer=signer)
            prev = entry_hash(sealed)
            conn.execute("UPDATE receipts SET body = ?, entry_hash = ? WHERE height = ?",
                         (canonical(sealed).decode(), prev, sealed["ledger_height"]))
        _drop_tree(conn)


def _drop_tree(conn: sqlite3.Connection, keep_checkpoints_up_to: int = -1) -> None:
    conn.execute("DELETE FROM tree_nodes")
    conn.execute("DELETE FROM ledger_meta WHERE name = 'tree_size'")
    conn.execute("DELETE FROM checkpoints WHERE tree_size > ?", (keep_checkpoints_up_to,))


def test_rewrite_after_rotation_is_caught_by_the_key_window(tmp_path: Path, sonate) -> None:
    db, key_file = tmp_path / "ledger.db", tmp_path / "keys" / "signing.json"
    url, keyring = "sqlite:///" + str(db), str(tmp_path / "keys" / "signing.keyring.json")
    assert sonate("keys", "generate", "--key-file", str(key_file)).returncode == 0
    asyncio.run(_write(url, key_file, 30))
    rotated = sonate("keys", "rotate", "--overlap-seconds", "0", "--key-file", str(key_file), "--ledger", url)
    assert rotated.returncode == 0, rotated.stderr
    assert "signs ledger heights from 30 on" in rotated.stderr
    asyncio.run(_write(url, key_file, 15))
    clean = sonate("verify", "--ledger", url, "--keys", keyring)
    assert clean.returncode == 0 and "OK: 45 ledger receipts verified" in clean.stdout, clean.stdout

    assert _rows(db)[REFUSED_AT]["guardrail_action"] == "refuse"
    _reseal_from(db, REFUSED_AT, _read_key_file(key_file), {"guardrail_action": "allow", "policy_id": "matrix"})
    assert sonate("ledger", "reindex", "--ledger", url).returncode == 0
    assert _rows(db)[REFUSED_AT]["guardrail_action"] == "allow"

    result = sonate("verify", "--ledger", url, "--keys", keyring)
    assert result.returncode == 1, result.stdout
    window = [line for line in result.stdout.splitlines() if ": key_window: " in line]
    assert len(window) == 30 - REFUSED_AT  # heights 10..29 carry a key made at height 30
    assert window[0].startswith(f"height {REFUSED_AT} ") and "not_before_height 30" in window[0]
    assert "FAILED: 20 failure(s) in 45 ledger receipts checked" in result.stdout


async def _saved_checkpoint(url: str, path: Path) -> str:
    """What a verifier does: fetch the latest checkpoint (GET /v1/ledger/checkpoint) and keep it."""
    store = open_store(url)
    try:
        note = await store.latest_checkpoint()
    finally:
        await store.close()
    assert note is not None
    path.write_text(note)
    return note


@pytest.mark.parametrize("attack", ["truncate", "rewrite"])
def test_saved_checkpoint_catches_truncation_and_rewrite(tmp_path: Path, sonate, attack: str) -> None:
    db, key_file = tmp_path / "ledger.db", tmp_path / "signing.json"
    url, keyring = "sqlite:///" + str(db), str(tmp_path / "signing.keyring.json")
    asyncio.run(_write(url, key_file, 40, checkpoint_every=10))
    saved = tmp_path / "saved-checkpoint.txt"
    note = asyncio.run(_saved_checkpoint(url, saved))
    assert note.splitlines()[1] == "40"
    trusted = ("--trusted-checkpoint", str(saved))
    assert sonate("verify", "--ledger", url, "--keys", keyring, *trusted).returncode == 0

    if attack == "truncate":  # the last 10 receipts, the tree size and the later checkpoints go
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM receipts WHERE height >= 30")
            _drop_tree(conn, keep_checkpoints_up_to=30)
        expected, line = 30, "trusted checkpoint (tree size 40): truncated: the ledger holds 30 receipts"
    else:  # an early receipt rewritten, everything after it re-signed with the same (active) key
        _reseal_from(db, REFUSED_AT, _read_key_file(key_file), {"guardrail_action": "allow", "policy_id": "matrix"})
        expected, line = 40, "trusted checkpoint (tree size 40): consistency: the stored tree of 40 leaves"
    assert sonate("ledger", "reindex", "--ledger", url).returncode == 0

    blind = sonate("verify", "--ledger", url, "--keys", keyring)
    assert blind.returncode == 0 and f"OK: {expected} ledger receipts verified" in blind.stdout, blind.stdout

    result = sonate("verify", "--ledger", url, "--keys", keyring, *trusted)
    assert result.returncode == 1, result.stdout
    assert line in result.stdout
    assert "FAILED: 1 failure(s)" in result.stdout


def test_trusted_checkpoint_must_be_signed_by_a_trusted_key(tmp_path: Path, sonate) -> None:
    from proxy.receipts.signing import Signer
    from proxy.tlog.checkpoint import format_checkpoint, parse_checkpoint, sign_checkpoint

    db, key_file = tmp_path / "ledger.db", tmp_path / "signing.json"
    url, keyring = "sqlite:///" + str(db), str(tmp_path / "signing.keyring.json")
    asyncio.run(_write(url, key_file, 12, checkpoint_every=12))
    genuine = parse_checkpoint(asyncio.run(_saved_checkpoint(url, tmp_path / "genuine.txt")))
    forged = tmp_path / "forged.txt"  # the same body, signed by someone else's key
    forged.write_text(sign_checkpoint(format_checkpoint(genuine.origin, 12, genuine.root_hash), Signer.generate()))
    result = sonate("verify", "--ledger", url, "--keys", keyring, "--trusted-checkpoint", str(forged))
    assert result.returncode == 1 and "checkpoint_signature" in result.stdout, result.stdout
    alone = sonate("verify", "--trusted-checkpoint", str(forged), "--keys", keyring)
    assert alone.returncode == 2 and "--trusted-checkpoint goes with --ledger" in alone.stderr


redis_only = pytest.mark.parametrize("ledger_url", ["redis"], indirect=True)


async def _delete(store: LedgerStore, *parts: tuple[object, ...]) -> None:
    client = aioredis.Redis.from_url(redis_url())
    try:
        await client.delete(*(store.key(*p) for p in parts))
    finally:
        await client.aclose()


@redis_only
async def test_receipts_without_a_head_fail_head_with_the_documented_detail(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """The head key deleted: the receipt at ``start`` is reported, at ``start``, and nothing is counted."""
    sealed = await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    await _delete(store, ("head",))
    count, failures = await verify_store(store, keys)
    assert (count, failures) == (0, [Failure(0, sealed[0]["receipt_id"], "head",
                                             "receipts are stored but the ledger has no head")])
    assert str(failures[0]) == f"height 0 ({sealed[0]['receipt_id']}): head: receipts are stored but the ledger has no head"
    assert await verify_store(store, keys, start=2) == (0, [Failure(2, sealed[2]["receipt_id"], "head",
                                                                    "receipts are stored but the ledger has no head")])
    assert await verify_store(store, keys, start=3) == (0, [])  # nothing stored at start: an empty ledger


@redis_only
async def test_a_head_over_no_stored_receipt_names_no_last_receipt_hash(
    store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """Every receipt deleted, the head kept: no receipt was read, so the head failure names no hash and no height
    (not the hash of JSON null, nor of any other stand-in)."""
    await Ledger(store, signer).append([make_receipt() for _ in range(3)])
    head = await store.head()
    await _delete(store, *(("r", h) for h in range(3)))
    count, failures = await verify_store(store, keys)
    assert (count, failures) == (0, [
        Failure(2, None, "height", "missing: height 0..2 not found"),
        Failure(2, None, "head", f"head says {head.entry_hash} at 2, last receipt is None at None"),
    ])
