"""Signed checkpoints: the C2SP note format byte for byte, the Go reference vector, tampering,
and the background publisher against real stores."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

from proxy.primitives import merkle
from proxy.primitives.base64url import b64url_decode
from proxy.receipts import Ledger, Signer, entry_hash
from proxy.receipts.tree import publish_checkpoint, tree_root
from proxy.server.admission.publisher import CheckpointPublisher
from proxy.storage.base import LedgerStore
from proxy.tlog.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_signers,
    format_checkpoint,
    key_hash,
    parse_checkpoint,
    parse_note,
    sign_checkpoint,
    verifier_key,
    verify_checkpoint,
)
from tests.support.ledger import STORE_KINDS, keys, ledger_url, make_receipt, signer, store  # noqa: F401

both = pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)

# golang.org/x/mod/sumdb/note's reference key and note (note_test.go): Ed25519 is deterministic,
# so our signer must reproduce the published signature line byte for byte.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_SIG = "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
ROOT = hashlib.sha256(b"root").digest()
ORIGIN = "example.com/test-log"


def go_signer() -> Signer:
    raw = base64.b64decode(GO_SKEY.split("+", 4)[4])  # the key material itself may contain "+"
    assert raw[0] == 0x01
    return Signer(raw[1:])


def test_key_hash_and_signature_match_the_go_reference() -> None:
    peter = go_signer()
    assert verifier_key("PeterNeumann", peter.public_key) == GO_VKEY
    assert key_hash("PeterNeumann", peter.public_key).hex() == "c74f20a3"
    signature = b64url_decode(peter.sign(GO_TEXT.encode()))
    assert base64.b64encode(key_hash("PeterNeumann", peter.public_key) + signature).decode() == GO_SIG
    body, sigs = parse_note(GO_TEXT + "\n\u2014 PeterNeumann " + GO_SIG + "\n")
    assert body == GO_TEXT and sigs[0].name == "PeterNeumann" and sigs[0].key_hash.hex() == "c74f20a3"


def test_checkpoint_note_format_byte_for_byte(signer: Signer) -> None:
    body = format_checkpoint(ORIGIN, 42, ROOT)
    assert body == f"{ORIGIN}\n42\n{base64.b64encode(ROOT).decode()}\n"
    note = sign_checkpoint(body, signer)
    text, rest = note.split("\n\n")
    assert text + "\n" == body
    assert rest.startswith(f"\u2014 {ORIGIN} ") and rest.endswith("\n") and rest.count("\n") == 1
    blob = base64.b64decode(rest.split(" ")[2])
    assert blob[:4] == hashlib.sha256(ORIGIN.encode() + b"\n\x01" + signer.public_key).digest()[:4]
    assert len(blob) == 68
    assert sign_checkpoint(body, signer) == note  # deterministic: concurrent publishers agree
    parsed = parse_checkpoint(note)
    assert parsed == Checkpoint(ORIGIN, 42, ROOT) and parsed.body() == body
    assert verify_checkpoint(note, {signer.key_id: signer.public_key}) == []
    assert verify_checkpoint(note, {signer.key_id: signer.public_key}, origin=ORIGIN) == []
    assert checkpoint_signers(note, {signer.key_id: signer.public_key, "other": Signer.generate().public_key}) \
        == [signer.key_id]


def checks(note: str, trusted: dict[str, bytes], origin: str | None = None) -> list[str]:
    return [f.check for f in verify_checkpoint(note, trusted, origin)]


def test_tampered_checkpoints_fail(signer: Signer) -> None:
    trusted = {signer.key_id: signer.public_key}
    note = sign_checkpoint(format_checkpoint(ORIGIN, 42, ROOT), signer)
    other_root = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    assert checks(note.replace("\n42\n", "\n43\n"), trusted) == ["checkpoint_signature"]
    assert checks(note.replace(base64.b64encode(ROOT).decode(), other_root), trusted) == ["checkpoint_signature"]
    assert checks(note, trusted, origin="another/log") == ["origin"]
    assert checks(note, {"ed25519:other": Signer.generate().public_key}) == ["checkpoint_signature"]
    # a signature blob with one flipped bit: a known key whose signature fails
    line = note.split("\n\n")[1]
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    blob[10] ^= 1
    bad = note.replace(line, f"\u2014 {ORIGIN} {base64.b64encode(bytes(blob)).decode()}\n")
    failures = verify_checkpoint(bad, trusted)
    assert [f.check for f in failures] == ["checkpoint_signature"] and "does not verify" in failures[0].detail
    assert str(failures[0]).startswith("checkpoint (tree size 42): checkpoint_signature:")
    # a valid signature by our key but under another name does not count (the key name is the origin)
    renamed = sign_checkpoint(format_checkpoint(ORIGIN, 42, ROOT), signer, name="other-name")
    assert checks(renamed, trusted) == ["checkpoint_signature"]
    # an extra signature by an unknown key is ignored
    stranger = Signer.generate()
    extra = note + sign_checkpoint(format_checkpoint(ORIGIN, 42, ROOT), stranger).split("\n\n")[1]
    assert checks(extra, trusted) == []


def test_an_unsigned_body_parses_but_does_not_verify() -> None:
    body = format_checkpoint(ORIGIN, 42, ROOT)
    assert parse_checkpoint(body) == Checkpoint(ORIGIN, 42, ROOT)
    for text in (body, ""):
        failures = verify_checkpoint(text, {})
        assert [f.check for f in failures] == ["checkpoint"]
    assert "no blank line" in verify_checkpoint(body, {})[0].detail


@pytest.mark.parametrize("text, message", [
    (f"{ORIGIN}\n042\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a AAAAAAAA\n", "line 2"),
    (f"{ORIGIN}\n-1\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a AAAAAAAA\n", "line 2"),
    (f"{ORIGIN}\n42\n{base64.b64encode(ROOT[:31]).decode()}\n\n\u2014 a AAAAAAAA\n", "line 3"),
    (f"{ORIGIN}\n42\n\n\u2014 a AAAAAAAA\n", "3 lines"),
    (f"bad origin\n42\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a AAAAAAAA\n", "line 1"),
    (f"{ORIGIN}\r\n42\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a AAAAAAAA\n", "control"),
    (f"{ORIGIN}\n42\n{base64.b64encode(ROOT).decode()}\n\n- a AAAAAAAA\n", "signature line 1"),
    (f"{ORIGIN}\n42\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a AAAAAAAA", "end with a newline"),
    (f"{ORIGIN}\n42\n{base64.b64encode(ROOT).decode()}\n\n\u2014 a !!!!\n", "not base64"),
])
def test_malformed_notes_are_rejected_with_the_line(text: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        parse_checkpoint(text)
    failures = verify_checkpoint(text, {})
    assert [f.check for f in failures] == ["checkpoint"] and message in failures[0].detail


def test_format_rejects_bad_arguments() -> None:
    for args in (("has space", 1, ROOT), ("a+b", 1, ROOT), (ORIGIN, -1, ROOT), (ORIGIN, 1, ROOT[:5])):
        with pytest.raises(CheckpointError):
            format_checkpoint(*args)


# -- publishing against real stores --------------------------------------------------------------------


@both
async def test_publish_checkpoint_is_idempotent_and_signed_over_the_tree(store: LedgerStore, signer: Signer) -> None:
    ledger = Ledger(store, signer)
    assert await publish_checkpoint(store, signer, ORIGIN) is None  # empty tree: nothing to sign
    sealed = await ledger.append([make_receipt() for _ in range(5)])
    note = await publish_checkpoint(store, signer, ORIGIN)
    parsed = parse_checkpoint(note)
    leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in sealed]
    assert (parsed.origin, parsed.tree_size, parsed.root_hash) == (ORIGIN, 5, merkle.root_of_leaves(leaves))
    assert await tree_root(store, 5) == parsed.root_hash
    # a second publisher (another key, e.g. another process mid-rotation) gets the stored note back
    assert await publish_checkpoint(store, Signer.generate(), ORIGIN, 5) == note
    assert await store.put_checkpoint(5, "another note\n") is False
    assert await store.get_checkpoint(5) == note and await store.latest_checkpoint() == note
    await ledger.append([make_receipt()])
    newer = await publish_checkpoint(store, signer, ORIGIN)
    assert parse_checkpoint(newer).tree_size == 6 and await store.latest_checkpoint() == newer
    assert await store.checkpoint_sizes() == [5, 6] and await store.checkpoint_sizes(6) == [6]
    with pytest.raises(ValueError):
        await store.put_checkpoint(0, "x")


@both
async def test_background_publisher_every_n_entries_and_every_t_seconds(store: LedgerStore, signer: Signer) -> None:
    ledger = Ledger(store, signer)
    published: list[int] = []
    publisher = CheckpointPublisher(ledger, ORIGIN, every_entries=3, interval_s=30, on_publish=published.append)
    publisher.start()
    try:
        await ledger.append([make_receipt(), make_receipt()])
        await asyncio.sleep(0.3)
        assert published == []  # 2 < N and T not reached
        await ledger.append([make_receipt()])
        for _ in range(50):
            if published:
                break
            await asyncio.sleep(0.05)
        assert published == [3]
        assert parse_checkpoint(await store.latest_checkpoint()).tree_size == 3
    finally:
        await publisher.stop()
    timed = CheckpointPublisher(ledger, ORIGIN, every_entries=1000, interval_s=0.2, on_publish=published.append)
    timed.start()
    try:
        await ledger.append([make_receipt()])
        for _ in range(60):
            if published[-1] == 4:
                break
            await asyncio.sleep(0.05)
        assert published[-1] == 4  # below N: published by the interval
    finally:
        await timed.stop()
    assert verify_checkpoint(await store.latest_checkpoint(), {signer.key_id: signer.public_key}, ORIGIN) == []


# -- `sonate verify` on checkpoints, inclusion and consistency proofs (exit codes and messages) -------


async def test_sonate_verify_checkpoints_and_proofs(tmp_path, signer: Signer, capsys) -> None:
    import json

    from proxy.cli import verify as verify_cmd
    from proxy.receipts import open_store, public_key_entry
    from proxy.receipts.proofs import consistency_proof_doc, inclusion_proof_doc, receipt_leaf_hash
    from proxy.receipts.tree import consistency_proof, inclusion_proof

    store = open_store("sqlite:///" + str(tmp_path / "ledger.db"))
    try:
        ledger = Ledger(store, signer)
        sealed = await ledger.append([make_receipt() for _ in range(5)])
        old = await publish_checkpoint(store, signer, ORIGIN)
        sealed += await ledger.append([make_receipt() for _ in range(6)])
        new = await publish_checkpoint(store, signer, ORIGIN)
        inclusion = inclusion_proof_doc(3, 11, receipt_leaf_hash(sealed[3]), await inclusion_proof(store, 3, 11))
        consistency = consistency_proof_doc(5, 11, await consistency_proof(store, 5, 11))
    finally:
        await store.close()
    files = {"keys": {"keys": [public_key_entry(signer)]}, "r3": sealed[3], "r4": sealed[4],
             "inc": inclusion, "con": consistency}
    for name, doc in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    (tmp_path / "old.txt").write_text(old)
    (tmp_path / "new.txt").write_text(new)
    (tmp_path / "bad.txt").write_text(new.replace("\n11\n", "\n12\n"))
    keys = ["--keys", str(tmp_path / "keys.json")]

    def run(*argv: str) -> tuple[int, str]:
        code = verify_cmd.main([*(str(tmp_path / a) if a.endswith((".json", ".txt")) else a for a in argv), *keys])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    assert run("new.txt") == (0, "OK: 1 checkpoint verified\n")
    code, out = run("bad.txt")
    assert code == 1 and "checkpoint (tree size 12): checkpoint_signature:" in out
    assert run("r3.json", "--inclusion", "inc.json", "--checkpoint", "new.txt")[0] == 0
    code, out = run("r4.json", "--inclusion", "inc.json", "--checkpoint", "new.txt")
    assert code == 1 and "inclusion proof (leaf 3, tree size 11): inclusion: leaf_index 3 is not" in out
    code, out = run("r3.json", "--inclusion", "inc.json", "--checkpoint", "old.txt")
    assert code == 1 and "the checkpoint is for 5" in out
    assert run("--consistency", "con.json", "--checkpoint", "old.txt", "--checkpoint", "new.txt")[0] == 0
    code, out = run("--consistency", "con.json", "--checkpoint", "new.txt", "--checkpoint", "old.txt")
    assert code == 1 and "consistency proof (5 -> 11): consistency:" in out
    code, out = run("--consistency", "con.json", "--checkpoint", "old.txt")
    assert code == 2 and "two --checkpoint" in out
    code, out = run("r3.json", "--checkpoint", "old.txt")
    assert code == 2 and "--checkpoint goes with" in out
