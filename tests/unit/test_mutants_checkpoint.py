"""Tests that kill surviving mutants in proxy/tlog/checkpoint.py and proxy/tlog/witness.py
(mutation/baseline.md lists what survives and why).

Where the behaviour comes from:
- C2SP tlog-checkpoint: origin (a key name: non-empty, no space, no '+'), decimal tree size (0 is
  a size), root hash, then optional extension lines that are kept and signed.
- C2SP signed-note: the note text ends before the last blank line; each signature line is exactly
  ``— <name> <base64(key hash ‖ signature)>``; verifiers may refuse more than 100 signatures;
  "Verifying": a signature counts only when its key name and key hash match a trusted key, unknown
  ones are skipped (a valid signature under another name is not the log's signature); "Verifier
  keys": ``<name>+<hex key ID>+<base64(type ‖ key)>``, key ID ``SHA-256(name ‖ 0x0A ‖ type ‖ key)[:4]``;
  base64 is strict everywhere (RFC 4648 §4: no stray characters).
- C2SP tlog-cosignature, "Format" / "Ed25519 signed message": the timestamp is a u64 in
  ``0 .. 2**63-1`` (both ends valid), the signed text is the checkpoint note text.
- C2SP tlog-witness, "add-checkpoint": at most 63 proof lines (63 is allowed), proof lines are
  base64 of 32-byte hashes, an empty proof from size 0 (RFC 9162 §2.1.4.2, first = 0), 409 with
  ``Content-Type: text/x.tlog.size`` for the wrong old size *and* for a fork at the same size; the
  client "MAY concatenate" the cosignature (lines it already has are not added again).
The verifier's failures are what a user reads, so they are asserted exactly (check, detail,
``where`` and ``str(Failure)``), as are the witness's answers (status, body, content type).
"""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from proxy.primitives import merkle
from proxy.primitives.failure import Failure
from proxy.receipts import Signer
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
    parse_checkpoint,
    parse_note,
    parse_verifier_key,
    sign_checkpoint,
    verified_cosignatures,
    verify_checkpoint,
    verify_cosignatures,
)
from proxy.tlog.witness import (
    MAX_PROOF_LINES,
    SIZE_CONTENT_TYPE,
    LogState,
    WitnessError,
    format_add_checkpoint,
    parse_add_checkpoint,
    state_from_json,
    state_to_json,
)
from tests.unit.test_witness import LOG_KEY, NAME, NOW, ORIGIN, WITNESS_KEY, leaves, note_for, proof, root, witness

SECOND = Signer(bytes(range(64, 96)))
SECOND_NAME = "witness.test/w2"
MAX_TIMESTAMP = 2**63 - 1
ROOT = hashlib.sha256(b"root").digest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def vkey_for(name: str, raw: bytes) -> str:
    """A verifier key whose key ID is right for ``raw`` (type byte ‖ key), whatever ``raw`` is."""
    key_id = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    return f"{name}+{key_id}+{b64(raw)}"


# -- signed-note: only the named key's signature counts ----------------------------------------------


def test_a_valid_signature_under_another_name_is_not_the_logs_signature() -> None:
    body = format_checkpoint(ORIGIN, 3, root(leaves(3)))
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


# -- tlog-checkpoint body: size, origin and extension lines ------------------------------------------


def test_size_0_is_a_checkpoint_and_bad_sizes_are_refused() -> None:
    assert format_checkpoint(ORIGIN, 0, merkle.EMPTY_ROOT) == f"{ORIGIN}\n0\n{b64(merkle.EMPTY_ROOT)}\n"
    for size in (-1, True, 1.0, "1", None):
        with pytest.raises(CheckpointError, match="^tree size must be an integer >= 0, got "):
            format_checkpoint(ORIGIN, size, ROOT)  # type: ignore[arg-type]


@pytest.mark.parametrize("origin", ["", None, 5, "a b", "a+b", "a\tb"])
def test_origin_must_be_a_non_empty_key_name(origin: object) -> None:
    with pytest.raises(CheckpointError, match="^origin must be a non-empty string without spaces or '\\+', got "):
        format_checkpoint(origin, 1, ROOT)  # type: ignore[arg-type]
    if isinstance(origin, str):
        with pytest.raises(CheckpointError, match="^line 1 \\(origin\\): origin must be a non-empty string"):
            parse_checkpoint(f"{origin}\n1\n{b64(ROOT)}\n")


def test_extension_lines_round_trip() -> None:
    """tlog-checkpoint: lines after the root hash are extensions, opaque but kept (and signed)."""
    body = format_checkpoint(ORIGIN, 7, ROOT, ("ext one", "ext two"))
    assert body == f"{ORIGIN}\n7\n{b64(ROOT)}\next one\next two\n"
    parsed = parse_checkpoint(body)
    assert parsed == Checkpoint(ORIGIN, 7, ROOT, ("ext one", "ext two")) and parsed.body() == body
    note = sign_checkpoint(body, LOG_KEY)
    assert note.startswith(body + "\n") and parse_checkpoint(note).extensions == ("ext one", "ext two")
    assert verify_checkpoint(note, {"log": LOG_KEY.public_key}) == []
    for bad in (("",), ("a\nb",), ("ok", "\n"), (5,)):
        with pytest.raises(CheckpointError, match="^bad checkpoint extension line "):
            format_checkpoint(ORIGIN, 7, ROOT, bad)  # type: ignore[arg-type]


# -- signed-note: the note text and signature lines ----------------------------------------------------


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


# -- signed-note verification: exact failures -----------------------------------------------------------


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
    assert [s.name for s in parse_note(stranger_first)[1]] == [ORIGIN, ORIGIN]
    assert verify_checkpoint(stranger_first, {"log": LOG_KEY.public_key}) == []
    assert checkpoint_signers(stranger_first, {"log": LOG_KEY.public_key}) == ["log"]
    short_first = {"short": LOG_KEY.public_key[:31], "log": LOG_KEY.public_key}
    assert verify_checkpoint(note, short_first) == []


# -- signed-note verifier keys -----------------------------------------------------------------------


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


# -- tlog-cosignature: the timestamp range and the signed message --------------------------------------


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


# -- append_signatures: concatenate, without duplicates ---------------------------------------------


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


# -- verify_cosignatures: exact failures -------------------------------------------------------------


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


# -- tlog-witness add-checkpoint: parsing ------------------------------------------------------------


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


# -- tlog-witness add-checkpoint: answers --------------------------------------------------------------


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


# -- the witness state file --------------------------------------------------------------------------


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
