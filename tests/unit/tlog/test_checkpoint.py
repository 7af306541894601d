"""Signed checkpoints: the C2SP note format byte for byte, the Go reference vector, tampering,
and the background publisher against real stores."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

from proxy.primitives import merkle
from proxy.primitives.base64url import b64url_decode
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, entry_hash
from proxy.receipts.tree import publish_checkpoint, tree_root
from proxy.server.admission.publisher import CheckpointPublisher
from proxy.storage.base import LedgerStore
from proxy.tlog.checkpoint import (
    COSIGNATURE_TYPE,
    Checkpoint,
    CheckpointError,
    NoteSignature,
    append_signatures,
    checkpoint_signers,
    cosign_checkpoint,
    cosignature_message,
    cosigner_verifier_key,
    format_checkpoint,
    key_hash,
    parse_checkpoint,
    parse_note,
    parse_verifier_key,
    sign_checkpoint,
    verified_cosignatures,
    verifier_key,
    verify_checkpoint,
    verify_cosignatures,
)
from proxy.tlog.witness import (
    format_add_checkpoint,
)
from tests.support.ledger import STORE_KINDS, keys, ledger_url, make_receipt, signer, store  # noqa: F401
from tests.unit.tlog.test_witness import LOG_KEY, NAME, NOW, WITNESS_KEY, b64, leaves, note_for, root, witness
from tests.unit.tlog.test_witness import ORIGIN as LOG_ORIGIN

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


SECOND = Signer(bytes(range(64, 96)))


SECOND_NAME = "witness.test/w2"


MAX_TIMESTAMP = 2**63 - 1


def vkey_for(name: str, raw: bytes) -> str:
    """A verifier key whose key ID is right for ``raw`` (type byte ‖ key), whatever ``raw`` is."""
    key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    return f"{name}+{key_id}+{b64(raw)}"


def test_a_valid_signature_under_another_name_is_not_the_logs_signature() -> None:
    body = format_checkpoint(LOG_ORIGIN, 3, root(leaves(3)))
    renamed = sign_checkpoint(body, LOG_KEY, name="other.test/name")  # verifies with the log key
    _, signatures = parse_note(renamed)
    assert signatures[0].name == "other.test/name" and len(signatures[0].signature) == 64
    trusted = {"log": LOG_KEY.public_key}
    assert checkpoint_signers(renamed, trusted) == []
    assert checkpoint_signers(sign_checkpoint(body, LOG_KEY), trusted) == ["log"]
    assert [f.check for f in verify_checkpoint(renamed, trusted)] == ["checkpoint_signature"]
    # the witness answers 403 to such a note, not 200
    outcome = witness().add_checkpoint(format_add_checkpoint(0, [], renamed), {}, NOW)
    assert (outcome.status, outcome.body, outcome.state) == (403, "no signature by a trusted key of the log\n", None)


def test_size_0_is_a_checkpoint_and_bad_sizes_are_refused() -> None:
    assert format_checkpoint(LOG_ORIGIN, 0, merkle.EMPTY_ROOT) == f"{LOG_ORIGIN}\n0\n{b64(merkle.EMPTY_ROOT)}\n"
    for size in (-1, True, 1.0, "1", None):
        with pytest.raises(CheckpointError, match="^tree size must be an integer >= 0, got "):
            format_checkpoint(LOG_ORIGIN, size, ROOT)  # type: ignore[arg-type]


@pytest.mark.parametrize("origin", ["", None, 5, "a b", "a+b", "a\tb"])
def test_origin_must_be_a_non_empty_key_name(origin: object) -> None:
    with pytest.raises(CheckpointError, match="^origin must be a non-empty string without spaces or '\\+', got "):
        format_checkpoint(origin, 1, ROOT)  # type: ignore[arg-type]
    if isinstance(origin, str):
        with pytest.raises(CheckpointError, match="^line 1 \\(origin\\): origin must be a non-empty string"):
            parse_checkpoint(f"{origin}\n1\n{b64(ROOT)}\n")


def test_extension_lines_round_trip() -> None:
    """tlog-checkpoint: lines after the root hash are extensions, opaque but kept (and signed)."""
    body = format_checkpoint(LOG_ORIGIN, 7, ROOT, ("ext one", "ext two"))
    assert body == f"{LOG_ORIGIN}\n7\n{b64(ROOT)}\next one\next two\n"
    parsed = parse_checkpoint(body)
    assert parsed == Checkpoint(LOG_ORIGIN, 7, ROOT, ("ext one", "ext two")) and parsed.body() == body
    note = sign_checkpoint(body, LOG_KEY)
    assert note.startswith(body + "\n") and parse_checkpoint(note).extensions == ("ext one", "ext two")
    assert verify_checkpoint(note, {"log": LOG_KEY.public_key}) == []
    for bad in (("",), ("a\nb",), ("ok", "\n"), (5,)):
        with pytest.raises(CheckpointError, match="^bad checkpoint extension line "):
            format_checkpoint(LOG_ORIGIN, 7, ROOT, bad)  # type: ignore[arg-type]


def test_the_note_text_ends_before_the_last_blank_line() -> None:
    line = f"\u2014 n {b64(bytes(8))}\n"
    assert parse_note("a\n\nb\n\n" + line) == ("a\n\nb\n", [NoteSignature("n", bytes(4), bytes(4))])
    assert parse_note("\n\n" + line) == ("\n", [NoteSignature("n", bytes(4), bytes(4))])


def test_a_signature_blob_of_5_bytes_is_the_shortest() -> None:
    text = "t\n\n"
    assert parse_note(text + f"\u2014 n {b64(bytes(5))}\n")[1] == [NoteSignature("n", bytes(4), bytes(1))]
    with pytest.raises(CheckpointError, match="^signature line 1: signature too short$"):
        parse_note(text + f"\u2014 n {b64(bytes(4))}\n")


@pytest.mark.parametrize("line", [
    f"\u2014 n  {b64(bytes(8))}",           # two spaces
    f"\u2014 n {b64(bytes(8))} ",           # a trailing space
    f"\u2014 n {b64(bytes(8))} extra",      # three fields
    f"\u2014  {b64(bytes(8))}",             # no name
    "\u2014 n ",                             # no signature
])
def test_a_signature_line_is_exactly_name_space_base64(line: str) -> None:
    with pytest.raises(CheckpointError, match="^signature line 1 is not '\u2014 <name> <base64 signature>'$"):
        parse_note(f"t\n\n{line}\n")


def test_a_note_has_at_most_100_signatures() -> None:
    lines = [f"\u2014 n{i} {b64(bytes(8))}\n" for i in range(101)]
    assert len(parse_note("t\n\n" + "".join(lines[:100]))[1]) == 100
    with pytest.raises(CheckpointError, match="^signed note has more than 100 signatures$"):
        parse_note("t\n\n" + "".join(lines))


def test_checkpoint_failures_are_exact() -> None:
    note = note_for(leaves(3))
    where = "checkpoint (tree size 3)"
    assert verify_checkpoint("garbage", {}) == [
        Failure(None, None, "checkpoint", "checkpoint body must end with a newline", where="checkpoint")]
    assert [str(f) for f in verify_checkpoint("garbage", {})] == [
        "checkpoint: checkpoint: checkpoint body must end with a newline"]
    assert verify_checkpoint(note, {"log": LOG_KEY.public_key}, origin="x.test/log") == [
        Failure(None, None, "origin", "expected origin 'x.test/log', got 'example.test/log'", where=where)]
    assert verify_checkpoint(note, {}) == [Failure(None, None, "checkpoint_signature", "no signature by a trusted "
                                                   "key (signed by example.test/log/b2e16d9b; trusted: none)",
                                                   where=where)]
    stranger = sign_checkpoint(parse_note(note)[0], SECOND).split("\n\n")[1]
    fails = verify_checkpoint(note + stranger, {"z": SECOND.public_key[::-1], "a": bytes(32)})
    assert [str(f) for f in fails] == [
        "checkpoint (tree size 3): checkpoint_signature: no signature by a trusted key "
        "(signed by example.test/log/997dbd55, example.test/log/b2e16d9b; trusted: a, z)"]


def test_keys_and_signatures_that_do_not_match_are_skipped_not_final() -> None:
    """signed-note "Verifying": unknown signatures are ignored, so the trusted one later in the note counts;
    a trusted key of the wrong length is skipped, so a good key after it still counts."""
    note = note_for(leaves(3))
    stranger = sign_checkpoint(parse_note(note)[0], SECOND).split("\n\n")[1]
    body, log_line = note.split("\n\n")
    stranger_first = f"{body}\n\n{stranger}{log_line}"
    assert [s.name for s in parse_note(stranger_first)[1]] == [LOG_ORIGIN, LOG_ORIGIN]
    assert verify_checkpoint(stranger_first, {"log": LOG_KEY.public_key}) == []
    assert checkpoint_signers(stranger_first, {"log": LOG_KEY.public_key}) == ["log"]
    short_first = {"short": LOG_KEY.public_key[:31], "log": LOG_KEY.public_key}
    assert verify_checkpoint(note, short_first) == []


def test_verifier_key_base64_is_strict() -> None:
    vkey = cosigner_verifier_key(NAME, WITNESS_KEY.public_key)
    name, key_id, encoded = vkey.split("+", 2)
    assert parse_verifier_key(vkey) == (NAME, COSIGNATURE_TYPE, WITNESS_KEY.public_key)
    for bad in (f"{name}+{key_id}+{encoded[:8]}!{encoded[8:]}", f"{name}+{key_id}+{encoded} "):
        with pytest.raises(CheckpointError, match="^verifier key 'witness.test/w1': key ID is not hex or key is "
                                                  "not base64$"):
            parse_verifier_key(bad)


@pytest.mark.parametrize("raw", [
    bytes([0x02]) + WITNESS_KEY.public_key,          # 33 bytes, another type
    bytes([COSIGNATURE_TYPE]) + WITNESS_KEY.public_key[:31],  # the right type, a 31-byte key
    bytes([0x01]) + WITNESS_KEY.public_key + b"\x00",         # the right type, a 33-byte key
], ids=["type-0x02", "short-key", "long-key"])
def test_verifier_key_needs_type_01_or_04_and_a_32_byte_key(raw: bytes) -> None:
    with pytest.raises(CheckpointError, match="^verifier key 'witness.test/w1': expected type 0x01 or 0x04 "
                                              "and a 32-byte Ed25519 key$"):
        parse_verifier_key(vkey_for(NAME, raw))


@pytest.mark.parametrize("timestamp", [0, 1, MAX_TIMESTAMP])
def test_cosignature_timestamps_at_both_ends_of_the_range_are_valid(timestamp: int) -> None:
    note = note_for(leaves(4))
    body = parse_note(note)[0]
    assert cosignature_message(body, timestamp) == f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode()
    cosigned = append_signatures(note, cosign_checkpoint(note, WITNESS_KEY, NAME, timestamp))
    valid, bad = verified_cosignatures(cosigned, {NAME: WITNESS_KEY.public_key})
    assert [(c.name, c.timestamp) for c in valid] == [(NAME, timestamp)] and bad == []
    assert verify_cosignatures(cosigned, {NAME: WITNESS_KEY.public_key}, 1) == []


@pytest.mark.parametrize("timestamp", [-1, 2**63, True, False, 1.0, "1"])
def test_cosignature_timestamp_outside_the_range_or_not_an_int_is_refused(timestamp: object) -> None:
    with pytest.raises(CheckpointError, match="^cosignature timestamp must be an integer in 0..2\\*\\*63-1, got "):
        cosignature_message("o\n1\n" + b64(bytes(32)) + "\n", timestamp)  # type: ignore[arg-type]


def test_a_bare_checkpoint_body_is_cosigned_like_its_signed_note() -> None:
    note = note_for(leaves(5))
    body = parse_note(note)[0]
    assert "\n\n" not in body
    line = cosign_checkpoint(body, WITNESS_KEY, NAME, NOW)
    assert line == cosign_checkpoint(note, WITNESS_KEY, NAME, NOW)
    assert verify_cosignatures(note + line, {NAME: WITNESS_KEY.public_key}, 1) == []


def test_append_signatures_adds_each_new_line_once() -> None:
    note = note_for(leaves(6))
    first = cosign_checkpoint(note, WITNESS_KEY, NAME, NOW)
    second = cosign_checkpoint(note, SECOND, SECOND_NAME, NOW)
    both = append_signatures(note, first + second)
    assert both == note + first + second
    assert append_signatures(both, first) == both            # already there: unchanged
    assert append_signatures(both, second + first) == both
    assert append_signatures(note, "\n" + first + "\n") == note + first  # blank lines are skipped
    assert append_signatures(note, first + first) == note + first  # a line repeated in `lines`: once


def test_a_malformed_note_is_one_checkpoint_failure() -> None:
    trusted = {NAME: WITNESS_KEY.public_key}
    for note, detail in (("garbage", "checkpoint body must end with a newline"),
                         ("o\n1\n\n\u2014 x AAAAAAAA\n",
                          "checkpoint body needs 3 lines (origin, tree size, root hash), got 2")):
        fails = verify_cosignatures(note, trusted, 1)  # never raises
        assert fails == [Failure(None, None, "checkpoint", detail, where="checkpoint")]
        assert [str(f) for f in fails] == [f"checkpoint: checkpoint: {detail}"]


def test_quorum_failure_names_the_valid_and_trusted_witnesses() -> None:
    note = note_for(leaves(3))
    trusted = {NAME: WITNESS_KEY.public_key, SECOND_NAME: SECOND.public_key}
    where = "checkpoint (tree size 3)"
    assert verify_cosignatures(note, trusted, 1) == [Failure(
        None, None, "cosignature", "0 of the 1 witness cosignature(s) required "
        "(valid: none; trusted: witness.test/w1, witness.test/w2)", where=where)]
    two = note + cosign_checkpoint(note, WITNESS_KEY, NAME, NOW) + cosign_checkpoint(note, SECOND, SECOND_NAME, NOW)
    assert verify_cosignatures(two, trusted, 2) == []
    fails = verify_cosignatures(two, trusted, 3)
    assert fails == [Failure(None, None, "cosignature", "2 of the 3 witness cosignature(s) required "
                             "(valid: witness.test/w1, witness.test/w2; trusted: witness.test/w1, witness.test/w2)",
                             where=where)]
    one = note + cosign_checkpoint(note, WITNESS_KEY, NAME, NOW)
    assert [str(f) for f in verify_cosignatures(one, trusted, 2)] == [
        "checkpoint (tree size 3): cosignature: 1 of the 2 witness cosignature(s) required "
        "(valid: witness.test/w1; trusted: witness.test/w1, witness.test/w2)"]


def test_a_bad_cosignature_by_a_trusted_witness_is_named() -> None:
    note = note_for(leaves(7))
    line = cosign_checkpoint(note_for(leaves(8)), WITNESS_KEY, NAME, NOW)  # another checkpoint's cosignature
    moved = note + line
    trusted = {NAME: WITNESS_KEY.public_key}
    assert verified_cosignatures(moved, trusted) == ([], [NAME])
    where = "checkpoint (tree size 7)"
    assert verify_cosignatures(moved, trusted, 1) == [
        Failure(None, None, "cosignature", "the cosignature by witness witness.test/w1 does not verify", where=where),
        Failure(None, None, "cosignature", "0 of the 1 witness cosignature(s) required "
                "(valid: none; trusted: witness.test/w1)", where=where)]
    assert [str(f) for f in verify_cosignatures(moved, trusted, 0)] == [
        "checkpoint (tree size 7): cosignature: the cosignature by witness witness.test/w1 does not verify"]
