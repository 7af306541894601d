"""Witness cosignatures (C2SP tlog-cosignature) and the add-checkpoint state machine (C2SP tlog-witness):
byte layout, key IDs, forgeries, forks, rewinds, bad proofs, and `sonate verify --witness-key`."""

from __future__ import annotations

import base64
import hashlib
import io
import json

import nacl.signing
import pytest

from proxy.cli import build_parser
from proxy.cli.verify import run as verify_run
from proxy.primitives import merkle
from proxy.receipts import Ledger, Signer
from proxy.server.admission.publisher import CheckpointPublisher
from proxy.storage.base import LedgerStore
from proxy.tlog.checkpoint import (
    COSIGNATURE_TYPE,
    CheckpointError,
    append_signatures,
    cosign_checkpoint,
    cosignature_message,
    cosigner_key_hash,
    cosigner_verifier_key,
    format_checkpoint,
    parse_note,
    parse_verifier_key,
    sign_checkpoint,
    verified_cosignatures,
    verifier_key,
    verify_cosignatures,
)
from proxy.tlog.witness import (
    MAX_PROOF_LINES,
    SIZE_CONTENT_TYPE,
    LogState,
    Witness,
    WitnessError,
    format_add_checkpoint,
    parse_add_checkpoint,
    state_from_json,
    state_to_json,
)
from tests.support.ledger import STORE_KINDS, keys, ledger_url, make_receipt, signer, store  # noqa: F401

ORIGIN = "example.test/log"
NAME = "witness.test/w1"
LOG_KEY = Signer(bytes(range(32)))
WITNESS_KEY = Signer(bytes(range(32, 64)))
NOW = 1_700_000_000


def leaves(n: int, tag: bytes = b"") -> list[bytes]:
    return [merkle.leaf_hash(tag + i.to_bytes(4, "big")) for i in range(n)]


def tree(entries: list[bytes]) -> dict:
    nodes, _ = merkle.extend(0, [], entries)
    return nodes


def root(entries: list[bytes]) -> bytes:
    return merkle.root_of_leaves(entries)


def proof(entries: list[bytes], first: int, second: int) -> list[bytes]:
    return merkle.hashes_for_ranges(merkle.consistency_ranges(first, second), tree(entries))


def note_for(entries: list[bytes], signer: Signer = LOG_KEY, origin: str = ORIGIN) -> str:
    return sign_checkpoint(format_checkpoint(origin, len(entries), root(entries)), signer)


def witness() -> Witness:
    return Witness(NAME, WITNESS_KEY, {ORIGIN: {"log": LOG_KEY.public_key}})


# -- tlog-cosignature ------------------------------------------------------------------------------


def test_cosignature_bytes_follow_the_spec():
    body = format_checkpoint(ORIGIN, 5, root(leaves(5)))
    line = cosign_checkpoint(sign_checkpoint(body, LOG_KEY), WITNESS_KEY, NAME, 1679315147)
    assert line.startswith(f"\u2014 {NAME} ") and line.endswith("\n")
    blob = base64.b64decode(line.split(" ")[2])
    assert len(blob) == 4 + 8 + 64
    # key ID: SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4]; timestamp: u64 big-endian; then the signature
    assert blob[:4] == hashlib.sha256(NAME.encode() + b"\n\x04" + WITNESS_KEY.public_key).digest()[:4]
    assert blob[:4] == cosigner_key_hash(NAME, WITNESS_KEY.public_key)
    assert int.from_bytes(blob[4:12], "big") == 1679315147
    message = b"cosignature/v1\ntime 1679315147\n" + body.encode()
    assert cosignature_message(body, 1679315147) == message
    nacl.signing.VerifyKey(WITNESS_KEY.public_key).verify(message, blob[12:])  # raises if wrong


def test_verifier_keys_round_trip_and_key_ids_are_checked():
    vkey = cosigner_verifier_key(NAME, WITNESS_KEY.public_key)
    assert parse_verifier_key(vkey) == (NAME, COSIGNATURE_TYPE, WITNESS_KEY.public_key)
    assert parse_verifier_key(verifier_key(ORIGIN, LOG_KEY.public_key)) == (ORIGIN, 0x01, LOG_KEY.public_key)
    name, key_id, key = vkey.split("+")
    with pytest.raises(CheckpointError, match="does not match"):
        parse_verifier_key(f"other.test/w+{key_id}+{key}")  # the key ID commits to the name
    with pytest.raises(CheckpointError):
        parse_verifier_key(f"{name}+{key_id}")


def test_cosignatures_verify_and_forgeries_fail():
    note = note_for(leaves(7))
    cosigned = append_signatures(note, cosign_checkpoint(note, WITNESS_KEY, NAME, NOW))
    trusted = {NAME: WITNESS_KEY.public_key}
    valid, bad = verified_cosignatures(cosigned, trusted)
    assert [(c.name, c.timestamp) for c in valid] == [(NAME, NOW)] and bad == []
    assert verify_cosignatures(cosigned, trusted, 1) == []
    # the log's own signature and a note without cosignature do not count
    assert [f.check for f in verify_cosignatures(note, trusted, 1)] == ["cosignature"]
    # a changed timestamp (it is signed) or signature byte is a forgery
    body, sigs = parse_note(cosigned)
    blob = bytearray(sigs[-1].key_hash + sigs[-1].signature)
    for offset in (11, 40):
        forged_blob = bytearray(blob)
        forged_blob[offset] ^= 1
        forged = note + f"\u2014 {NAME} {base64.b64encode(bytes(forged_blob)).decode()}\n"
        fails = verify_cosignatures(forged, trusted, 1)
        assert any("does not verify" in f.detail for f in fails)
    # a cosignature of another checkpoint moved onto this one fails
    other = note_for(leaves(8))
    moved = note + cosign_checkpoint(other, WITNESS_KEY, NAME, NOW)
    assert verify_cosignatures(moved, trusted, 1)
    # signed by another key under the witness's name: ignored (key ID differs), so the quorum fails
    impostor = note + cosign_checkpoint(note, Signer.generate(), NAME, NOW)
    assert [f.check for f in verify_cosignatures(impostor, trusted, 1)] == ["cosignature"]


def test_quorum_counts_distinct_trusted_witnesses():
    note = note_for(leaves(3))
    second = Signer.generate()
    trusted = {NAME: WITNESS_KEY.public_key, "witness.test/w2": second.public_key}
    one = note + cosign_checkpoint(note, WITNESS_KEY, NAME, NOW)
    assert verify_cosignatures(one, trusted, 1) == []
    assert "1 of the 2" in verify_cosignatures(one, trusted, 2)[0].detail
    both = one + cosign_checkpoint(note, second, "witness.test/w2", NOW)
    assert verify_cosignatures(both, trusted, 2) == []


# -- tlog-witness add-checkpoint ----------------------------------------------------------------


def test_request_body_round_trips_and_malformed_bodies_are_400():
    entries = leaves(9)
    body = format_add_checkpoint(4, proof(entries, 4, 9), note_for(entries))
    parsed = parse_add_checkpoint(body.encode())
    assert parsed.old_size == 4 and list(parsed.proof) == proof(entries, 4, 9) and parsed.note == note_for(entries)
    for bad in ("old 01\n\n" + note_for(entries), "old 4\nnot-base64\n\n" + note_for(entries),
                "old 4\n" + note_for(entries), "old 0\n" + "AAAA\n" * 64 + "\n" + note_for(entries), b"\xff"):
        with pytest.raises(WitnessError) as info:
            parse_add_checkpoint(bad)
        assert info.value.status == 400


def test_witness_cosigns_a_consistent_history_and_keeps_the_latest():
    w, entries = witness(), leaves(20)
    first = w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries[:5])), {}, NOW)
    assert first.status == 200 and first.state == LogState(5, root(entries[:5]), note_for(entries[:5]))
    assert verify_cosignatures(note_for(entries[:5]) + first.body, {NAME: WITNESS_KEY.public_key}, 1) == []
    states = {ORIGIN: first.state}
    grown = w.add_checkpoint(format_add_checkpoint(5, proof(entries, 5, 20), note_for(entries)), states, NOW + 1)
    assert grown.status == 200 and grown.state.size == 20
    again = w.add_checkpoint(format_add_checkpoint(20, [], note_for(entries)), {ORIGIN: grown.state}, NOW + 2)
    assert again.status == 200  # the same checkpoint again is cosigned again


def test_witness_refuses_rewinds_forks_and_bad_proofs():
    w, entries = witness(), leaves(20)
    states = {ORIGIN: LogState(12, root(entries[:12]), note_for(entries[:12]))}
    # rewind: the client claims the witness is empty, then admits 12 for a tree of 8
    stale = w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries[:8])), states, NOW)
    assert (stale.status, stale.body, stale.content_type, stale.state) == (409, "12\n", SIZE_CONTENT_TYPE, None)
    assert w.add_checkpoint(format_add_checkpoint(12, [], note_for(entries[:8])), states, NOW).status == 400
    # fork at the same size: another root
    forked = leaves(12, b"fork")
    same = w.add_checkpoint(format_add_checkpoint(12, [], note_for(forked)), states, NOW)
    assert (same.status, same.body, same.state) == (409, "12\n", None)
    # fork at a larger size: its own (valid for it) proof does not lead from the root the witness holds
    forked = leaves(20, b"fork")
    fork = w.add_checkpoint(format_add_checkpoint(12, proof(forked, 12, 20), note_for(forked)), states, NOW)
    assert fork.status == 422 and fork.state is None
    # a tampered proof of the real history
    hashes = proof(entries, 12, 20)
    hashes[0] = bytes(32)
    assert w.add_checkpoint(format_add_checkpoint(12, hashes, note_for(entries)), states, NOW).status == 422
    # a proof when the old size is 0
    bad = w.add_checkpoint(format_add_checkpoint(0, [bytes(32)], note_for(entries[:3])), {}, NOW)
    assert bad.status == 422


def test_witness_checks_origin_and_log_signature():
    w, entries = witness(), leaves(4)
    unknown = w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries, origin="other.test/log")), {}, NOW)
    assert unknown.status == 404
    impostor = w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries, signer=Signer.generate())), {}, NOW)
    assert impostor.status == 403
    too_old = w.add_checkpoint(format_add_checkpoint(5, [], note_for(entries)), {}, NOW)
    assert too_old.status == 400


def test_state_file_round_trips_and_rejects_inconsistent_entries():
    entries = leaves(6)
    states = {ORIGIN: LogState(6, root(entries), note_for(entries))}
    assert state_from_json(state_to_json(states)) == states
    document = state_to_json(states)
    document["logs"][ORIGIN]["size"] = 5
    with pytest.raises(ValueError, match="do not match"):
        state_from_json(document)


# -- sonate verify --witness-key --------------------------------------------------------------------


def verify(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["verify", *argv])
    return verify_run(args, stdout=out, stderr=err), out.getvalue() + err.getvalue()


def test_verify_requires_the_witness_cosignature(tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": [{"key_id": "%s", "alg": "Ed25519", "public_key": "%s"}]}' % (
        LOG_KEY.key_id, base64.urlsafe_b64encode(LOG_KEY.public_key).decode().rstrip("=")))
    note = note_for(leaves(5))
    vkey = cosigner_verifier_key(NAME, WITNESS_KEY.public_key)
    cosigned = tmp_path / "cosigned.txt"
    cosigned.write_text(append_signatures(note, cosign_checkpoint(note, WITNESS_KEY, NAME, NOW)))
    plain = tmp_path / "plain.txt"
    plain.write_text(note)
    assert verify([str(cosigned), "--keys", str(keys)])[0] == 0
    assert verify([str(cosigned), "--keys", str(keys), "--witness-key", vkey]) == (0, "OK: 1 checkpoint verified\n")
    status, output = verify([str(plain), "--keys", str(keys), "--witness-key", vkey])
    assert status == 1 and "cosignature" in output
    forged = tmp_path / "forged.txt"
    forged.write_text(note + cosign_checkpoint(note_for(leaves(6)), WITNESS_KEY, NAME, NOW))
    assert verify([str(forged), "--keys", str(keys), "--witness-key", vkey])[0] == 1
    log_vkey = verifier_key(ORIGIN, LOG_KEY.public_key)
    assert verify([str(cosigned), "--keys", str(keys), "--witness-key", log_vkey])[0] == 2  # not a cosigner key
    assert verify([str(cosigned), "--keys", str(keys), "--witness-key", vkey, "--witness-quorum", "2"])[0] == 2


# -- storage of cosignatures and the publisher against a witness over HTTP (real stores) -----------

both = pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)


@both
async def test_stores_keep_one_cosignature_per_witness_and_size(store: LedgerStore) -> None:
    first = f"\u2014 {NAME} AAAA\n"
    await store.put_cosignature(3, NAME, first)
    await store.put_cosignature(3, "a.test/w0", "\u2014 a.test/w0 BBBB\n")
    await store.put_cosignature(3, NAME, f"\u2014 {NAME} CCCC\n")  # a newer cosignature replaces the older
    assert await store.get_cosignatures(3) == ["\u2014 a.test/w0 BBBB\n", f"\u2014 {NAME} CCCC\n"]
    assert await store.get_cosignatures(4) == []
    for size, name, line in ((0, NAME, first), (3, NAME, "\u2014 other.test/w AAAA\n"), (3, NAME, first * 2)):
        with pytest.raises(ValueError):
            await store.put_cosignature(size, name, line)


async def _serve_witness(tmp_path, logs) -> tuple[object, str]:
    from aiohttp import web

    from proxy.cli.witness import build_app

    runner = web.AppRunner(build_app(Witness(NAME, WITNESS_KEY, logs), tmp_path / "state.json", {}))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


@both
async def test_publisher_gets_checkpoints_cosigned_and_learns_the_witness_size(store: LedgerStore, signer: Signer,
                                                                             tmp_path) -> None:
    from types import SimpleNamespace

    runner, url = await _serve_witness(tmp_path, {"o.test/log": {"log": signer.public_key}})
    config = SimpleNamespace(url=url, key=cosigner_verifier_key(NAME, WITNESS_KEY.public_key), timeout_seconds=5)
    ledger = Ledger(store, signer)
    publisher = CheckpointPublisher(ledger, "o.test/log", every_entries=1, interval_s=30, witnesses=[config])
    restarted = CheckpointPublisher(ledger, "o.test/log", every_entries=1, interval_s=30, witnesses=[config])
    try:
        await ledger.append([make_receipt() for _ in range(3)])
        note = await publisher.publish_now()
        assert len(await store.get_cosignatures(3)) == 1
        await ledger.append([make_receipt() for _ in range(4)])
        note = await restarted.publish_now()  # believes the witness is empty: 409 "3", then a proof 3 -> 7
        lines = await store.get_cosignatures(7)
        assert restarted.witnesses[0].size == 7 and len(lines) == 1
        assert verify_cosignatures(note + lines[0], {NAME: WITNESS_KEY.public_key}, 1) == []
        state = state_from_json(json.loads((tmp_path / "state.json").read_text()))
        assert state["o.test/log"].size == 7
    finally:
        await publisher.stop()
        await restarted.stop()
        await runner.cleanup()


@both
async def test_publisher_stores_nothing_when_the_witness_refuses(store: LedgerStore, signer: Signer, tmp_path) -> None:
    from types import SimpleNamespace

    runner, url = await _serve_witness(tmp_path, {"o.test/log": {"log": Signer.generate().public_key}})  # 403
    config = SimpleNamespace(url=url, key=cosigner_verifier_key(NAME, WITNESS_KEY.public_key), timeout_seconds=5)
    unreachable = SimpleNamespace(url="http://127.0.0.1:9", key=cosigner_verifier_key("w2.test/w", bytes(32)),
                                  timeout_seconds=1)
    ledger = Ledger(store, signer)
    publisher = CheckpointPublisher(ledger, "o.test/log", every_entries=1, interval_s=30,
                                    witnesses=[config, unreachable])
    try:
        await ledger.append([make_receipt()])
        assert await publisher.publish_now() is not None  # the checkpoint is published all the same
        assert await store.get_cosignatures(1) == []
    finally:
        await publisher.stop()
        await runner.cleanup()
    with pytest.raises(ValueError, match="not a cosigner key"):
        CheckpointPublisher(ledger, "o.test/log", 1, 30, witnesses=[SimpleNamespace(
            url=url, key=verifier_key("o.test/log", signer.public_key), timeout_seconds=1)])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_63_proof_lines_parse_and_64_do_not() -> None:
    note = note_for(leaves(4))
    hashes = [bytes([i]) * 32 for i in range(MAX_PROOF_LINES)]
    parsed = parse_add_checkpoint(format_add_checkpoint(1, hashes, note))
    assert parsed.old_size == 1 and list(parsed.proof) == hashes and parsed.note == note
    with pytest.raises(WitnessError, match="^more than 63 consistency proof lines$") as info:
        parse_add_checkpoint(format_add_checkpoint(1, hashes + [bytes(32)], note))
    assert info.value.status == 400


def test_bad_proof_lines_are_numbered_from_1_and_base64_is_strict() -> None:
    note = note_for(leaves(4))
    good = b64(bytes(32))
    for lines, number in (([good[:8] + "!" + good[8:]], 1), ([good, good + " "], 2), ([good, good, "AAAA"], 3),
                          ([good + "\x00"], 1)):
        body = "old 1\n" + "".join(line + "\n" for line in lines) + "\n" + note
        with pytest.raises(WitnessError) as info:
            parse_add_checkpoint(body)
        assert (info.value.status, str(info.value)) == (400, f"proof line {number} is not the base64 of a 32-byte hash")


def test_witness_error_carries_its_reason() -> None:
    error = WitnessError(422, "the reason")
    assert (error.status, str(error), error.args) == (422, "the reason", ("the reason",))


def test_refusals_answer_the_reason_as_text() -> None:
    w, entries = witness(), leaves(4)
    unknown = w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries, origin="other.test/log")), {}, NOW)
    assert (unknown.status, unknown.body, unknown.content_type) == (
        404, "unknown log origin 'other.test/log'\n", "text/plain")
    malformed = w.add_checkpoint(b"old 01\n\n" + note_for(entries).encode(), {}, NOW)
    assert (malformed.status, malformed.body) == (400, "the first line must be 'old <size>' (decimal, no leading "
                                                       "zeroes)\n")


def test_cosigned_answer_is_text_plain() -> None:
    outcome = witness().add_checkpoint(format_add_checkpoint(0, [], note_for(leaves(5))), {}, NOW)
    assert (outcome.status, outcome.content_type, outcome.origin) == (200, "text/plain", ORIGIN)
    assert outcome.body == cosign_checkpoint(note_for(leaves(5)), WITNESS_KEY, NAME, NOW)


def test_a_fork_at_the_same_size_is_409_with_the_size_content_type() -> None:
    entries = leaves(12)
    states = {ORIGIN: LogState(12, root(entries), note_for(entries))}
    forked = witness().add_checkpoint(format_add_checkpoint(12, [], note_for(leaves(12, b"fork"))), states, NOW)
    assert (forked.status, forked.body, forked.content_type, forked.state) == (409, "12\n", SIZE_CONTENT_TYPE, None)


def test_held_size_0_needs_an_empty_proof_and_size_1_a_consistency_proof() -> None:
    """A stored state of size 0 (the empty tree) is like no state; size 1 is proved like any size."""
    w, entries = witness(), leaves(5)
    empty = {ORIGIN: LogState(0, merkle.EMPTY_ROOT, note_for([]))}
    with_proof = w.add_checkpoint(format_add_checkpoint(0, [bytes(32)], note_for(entries)), empty, NOW)
    assert (with_proof.status, with_proof.body) == (422, "the consistency proof must be empty when the old size "
                                                         "is 0\n")
    assert w.add_checkpoint(format_add_checkpoint(0, [], note_for(entries)), empty, NOW).status == 200
    one = {ORIGIN: LogState(1, root(entries[:1]), note_for(entries[:1]))}
    grown = w.add_checkpoint(format_add_checkpoint(1, proof(entries, 1, 5), note_for(entries)), one, NOW)
    assert (grown.status, grown.state) == (200, LogState(5, root(entries), note_for(entries)))
    bad = w.add_checkpoint(format_add_checkpoint(1, [bytes(32)] * 3, note_for(entries)), one, NOW)
    assert (bad.status, bad.body) == (422, "the consistency proof from 1 to 5 does not verify (RFC 9162 §2.1.4.2)\n")


@pytest.mark.parametrize("document", [
    [], "x", None, {"version": 2, "logs": {}}, {"version": 1, "logs": []}, {"logs": {}}, {"version": 1},
], ids=["list", "str", "none", "version-2", "logs-list", "no-version", "no-logs"])
def test_state_file_needs_version_1_and_a_logs_object(document: object) -> None:
    with pytest.raises(ValueError, match='^expected {"version": 1, "logs": {...}}$'):
        state_from_json(document)


def test_state_file_root_base64_is_strict() -> None:
    entries = leaves(6)
    states = {ORIGIN: LogState(6, root(entries), note_for(entries))}
    document = json.loads(json.dumps(state_to_json(states)))
    assert document["logs"][ORIGIN]["root"] == b64(root(entries))
    assert state_from_json(document) == states
    for bad in ("!" + b64(root(entries)), b64(root(entries)) + "\n"):
        document["logs"][ORIGIN]["root"] = bad
        with pytest.raises(ValueError, match=f"^log '{ORIGIN}': "):
            state_from_json(document)
