"""Receipts: RFC 8785 canonical JSON, Ed25519 keys, sealing, tamper detection,
chain verification and the ``sonate verify`` command (docs/architecture.md, "Trust receipts")."""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import http.server
import io
import json
import os
import sqlite3
import stat
import struct
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import verify as verify_cmd
from proxy.primitives.base64url import b64url_decode, b64url_encode
from proxy.primitives.canonical import CanonicalizationError
from proxy.primitives.failure import Failure
from proxy.receipts import (
    GENESIS_PREV_HASH,
    RECEIPT_FIELDS,
    KeyFileError,
    Ledger,
    Signer,
    assert_no_floats,
    canonical,
    entry_hash,
    json_hash,
    key_id_for,
    load_or_create_signer,
    load_public_keys,
    open_store,
    public_key_entry,
    seal,
    sha256_ref,
    signing_payload,
    utc_timestamp,
    verify_chain,
    verify_receipt,
    verify_signature,
)
from tests.support.ledger import REPO_ROOT, keys, make_receipt, signer, sqlite_url  # noqa: F401  (fixtures)

# ---------------------------------------------------------------- RFC 8785 canonical JSON


def test_canonical_rfc8785_section_3_2_2_example() -> None:
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical(value) == expected.encode("utf-8")


def test_canonical_sorts_keys_by_utf16_code_units() -> None:
    # RFC 8785 §3.2.3: the emoji (surrogate pair D83D) sorts before U+FB33.
    value = {
        "\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys_in_order = [k for k, _ in json.loads(canonical(value)).items()]
    assert keys_in_order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert canonical(value).startswith(b'{"\\r":"Carriage Return","1":"One","\xc2\x80":"Control"')


@pytest.mark.parametrize(
    ("ieee754", "text"),
    [
        ("0000000000000000", "0"), ("8000000000000000", "0"), ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"), ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"), ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"), ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"), ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"), ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"), ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_canonical_numbers_rfc8785_appendix_b(ieee754: str, text: str) -> None:
    assert canonical(struct.unpack(">d", bytes.fromhex(ieee754))[0]) == text.encode()


def test_canonical_big_integers_read_as_doubles_and_non_finite_rejected() -> None:
    # ECMAScript prints the shortest round-trip digits: String(2**60) === "1152921504606847000".
    assert canonical({"seed": 2**60 + 1}) == b'{"seed":1152921504606847000}'
    assert canonical([2**53 - 1]) == b"[9007199254740991]"
    with pytest.raises(CanonicalizationError):
        canonical({"x": float("nan")})
    with pytest.raises(ValueError):
        canonical({1: "non-string key"})


def test_hash_helpers() -> None:
    assert sha256_ref(b"abc") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert json_hash({"b": 1, "a": [1.5, "x"]}) == json_hash({"a": [1.5, "x"], "b": 1})
    assert json_hash({"a": 1}) == "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()


def test_assert_no_floats_names_the_path() -> None:
    assert_no_floats({"a": [1, "0.5", True, None, {"b": "x"}]})
    with pytest.raises(TypeError, match=r"\$\.evidence\.scores\[1\]"):
        assert_no_floats({"evidence": {"scores": ["0.1", 0.2]}})
    with pytest.raises(TypeError, match=r'\$\["a b"\]'):
        assert_no_floats({"a b": 1.0})
    with pytest.raises(TypeError, match=r"\$\.n"):
        assert_no_floats({"n": 2**53})


# ---------------------------------------------------------------- model


def test_utc_timestamp_format() -> None:
    when = datetime(2026, 11, 22, 3, 4, 5, 123987, tzinfo=timezone.utc)
    assert utc_timestamp(when) == "2026-11-22T03:04:05.123Z"
    now = utc_timestamp()
    parsed = datetime.strptime(now, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - parsed).total_seconds()) < 5


def test_new_receipt_rejects_floats_and_bad_fields() -> None:
    with pytest.raises(TypeError, match=r"\$\.evidence\.scores\.toxicity"):
        make_receipt(evidence={"scores": {"toxicity": 0.91}})
    with pytest.raises(ValueError, match="inputs_hash"):
        make_receipt(inputs_hash="md5:abc")
    with pytest.raises(ValueError, match="ts"):
        make_receipt(ts="2026-11-22 03:04:05")
    receipt = make_receipt()
    assert set(receipt) == set(RECEIPT_FIELDS) - {"key_id", "ledger_height", "prev_hash", "ed25519_sig"}
    assert receipt["v"] == 1 and receipt["receipt_id"].startswith("rcpt_") and len(receipt["receipt_id"]) == 37


def test_seal_and_verify_round_trip(signer: Signer, keys: dict[str, bytes]) -> None:
    unsigned = make_receipt(evidence={"entities": [{"type": "EMAIL", "start": 3, "end": 17}], "note": "\u00e9\U0001f600"})
    before = copy.deepcopy(unsigned)
    sealed = seal(unsigned, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    assert unsigned == before  # input untouched
    assert tuple(sorted(sealed)) == tuple(sorted(RECEIPT_FIELDS))
    assert sealed["key_id"] == signer.key_id == key_id_for(signer.public_key)
    assert verify_signature(signer.public_key, signing_payload(sealed), sealed["ed25519_sig"])
    assert verify_receipt(sealed, keys) == []
    # The JSON round trip (what stores and clients do) keeps it valid.
    assert verify_receipt(json.loads(json.dumps(sealed)), keys) == []
    assert entry_hash(sealed) == sha256_ref(canonical(sealed))


def _mutate(value: Any) -> Any:
    """A different value of the same type that keeps the field's format valid where possible."""
    if isinstance(value, bool) or value is None:
        return "x"
    if isinstance(value, int):
        return value + 1
    if isinstance(value, dict):
        return {**value, "injected": "1"}
    assert isinstance(value, str)
    index = len(value) - 3  # a character inside hashes, ids, timestamps and signatures alike
    old = value[index]
    new = {"0": "1", "1": "2"}.get(old, "0" if old != "0" else "1")
    return value[:index] + new + value[index + 1:]


@pytest.mark.parametrize("field", [*RECEIPT_FIELDS, "evidence.detector.version"])
def test_every_field_is_tamper_evident(field: str, signer: Signer, keys: dict[str, bytes]) -> None:
    sealed = seal(make_receipt(), ledger_height=7, prev_hash=sha256_ref(b"previous"), signer=signer)
    tampered = copy.deepcopy(sealed)
    if field == "evidence.detector.version":
        tampered["evidence"]["detector"]["version"] = "1.3"
    else:
        tampered[field] = _mutate(sealed[field])
    assert tampered != sealed
    checks = {failure.check for failure in verify_receipt(tampered, keys)}
    expected = {"key_id": "unknown_key", "v": "schema"}.get(field, "signature")
    assert expected in checks, (field, checks)


@pytest.mark.parametrize("field", RECEIPT_FIELDS)
def test_missing_field_is_a_schema_failure(field: str, signer: Signer, keys: dict[str, bytes]) -> None:
    sealed = seal(make_receipt(), ledger_height=3, prev_hash=sha256_ref(b"p"), signer=signer)
    del sealed[field]
    assert any(f.check == "schema" and field in f.detail for f in verify_receipt(sealed, keys))


def test_extra_field_and_float_are_schema_failures(signer: Signer, keys: dict[str, bytes]) -> None:
    sealed = seal(make_receipt(), ledger_height=3, prev_hash=sha256_ref(b"p"), signer=signer)
    assert [f.check for f in verify_receipt({**sealed, "extra": "1"}, keys)][:1] == ["schema"]
    floaty = copy.deepcopy(sealed)
    floaty["evidence"]["scores"]["toxicity"] = 0.0132
    fails = verify_receipt(floaty, keys)
    assert any(f.check == "schema" and "$.evidence.scores.toxicity" in f.detail for f in fails)
    assert verify_receipt("not a receipt", keys)[0].check == "schema"


def test_wrong_key_is_unknown_key_or_bad_signature(signer: Signer) -> None:
    sealed = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    other = Signer.generate()
    assert [f.check for f in verify_receipt(sealed, {other.key_id: other.public_key})] == ["unknown_key"]
    # A key published under the right id but with other key material: signature fails.
    assert [f.check for f in verify_receipt(sealed, {signer.key_id: other.public_key})] == ["signature"]


def test_verify_signature_never_raises() -> None:
    signer = Signer.generate()
    good = signer.sign(b"m")
    assert verify_signature(signer.public_key, b"m", good)
    for public_key, signature in [
        (signer.public_key, "!!"), (signer.public_key, ""), (signer.public_key, good[:-2]),
        (b"short", good), (signer.public_key, None), (signer.public_key, good + "A"),
    ]:
        assert verify_signature(public_key, b"m", signature) is False  # type: ignore[arg-type]
    assert verify_signature(signer.public_key, b"other message", good) is False


def test_b64url_is_strict() -> None:
    data = bytes(range(64))
    text = b64url_encode(data)
    assert "=" not in text and b64url_decode(text) == data
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = text[:-1] + alphabet[alphabet.index(text[-1]) + 1]  # same data bits, a trailing bit set
    assert base64.urlsafe_b64decode(sibling + "==") == data  # a lenient decoder accepts it
    with pytest.raises(ValueError):
        b64url_decode(sibling)
    for bad in ("ab+c", "ab/c", "abc=", "a"):
        with pytest.raises(ValueError):
            b64url_decode(bad)


# ---------------------------------------------------------------- key files


def test_key_file_created_0600_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "nested" / "signing.json"
    first = load_or_create_signer(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(path.read_text())
    assert set(doc) == {"alg", "key_id", "private_key", "public_key", "created"}
    assert doc["alg"] == "Ed25519" and doc["key_id"] == first.key_id
    assert len(b64url_decode(doc["private_key"])) == 32
    again = load_or_create_signer(path)
    assert (again.key_id, again.public_key, again.created) == (first.key_id, first.public_key, first.created)
    assert verify_signature(first.public_key, b"x", again.sign(b"x"))
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind


def test_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "signing.json"
    load_or_create_signer(path)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError) as info:
        load_or_create_signer(path)
    message = str(info.value)
    assert str(path) in message and "0644" in message and "chmod 600" in message


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"alg": "RSA"}', '{"alg": "Ed25519", "private_key": "AAAA"}', "[]"],
)
def test_malformed_key_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "signing.json"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, content.encode())
    os.close(fd)
    with pytest.raises(KeyFileError, match=str(path)):
        load_or_create_signer(path)


def test_key_file_with_foreign_key_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "signing.json"
    load_or_create_signer(path)
    doc = json.loads(path.read_text())
    doc["key_id"] = "ed25519:0000000000000000"
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="does not match"):
        load_or_create_signer(path)


def test_public_key_documents(tmp_path: Path) -> None:
    signer = load_or_create_signer(tmp_path / "signing.json")
    entry = public_key_entry(signer)
    assert entry == {"key_id": signer.key_id, "alg": "Ed25519",
                     "public_key": b64url_encode(signer.public_key), "created": signer.created}
    expected = {signer.key_id: signer.public_key}
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [entry]}))
    assert load_public_keys({"keys": [entry]}) == expected
    assert load_public_keys([entry]) == expected
    assert load_public_keys(str(tmp_path / "keys.json")) == expected
    assert load_public_keys(tmp_path / "signing.json") == expected  # a signing key file works too
    with pytest.raises(KeyFileError, match="does not match"):
        load_public_keys({"keys": [{**entry, "key_id": "ed25519:ffffffffffffffff"}]})
    with pytest.raises(KeyFileError):
        load_public_keys(tmp_path / "missing.json")


# ---------------------------------------------------------------- chains


def _chain(signer: Signer, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for height in range(n):
        prev = GENESIS_PREV_HASH if height == 0 else entry_hash(out[-1])
        out.append(seal(make_receipt(), ledger_height=height, prev_hash=prev, signer=signer))
    return out


def _checks(failures: list[Failure]) -> list[tuple[int | None, str]]:
    return [(f.height, f.check) for f in failures]


def test_valid_chain_and_links(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 6)
    assert verify_chain(chain, keys) == []
    assert verify_chain(iter(chain[3:]), keys, previous=chain[2]) == []
    assert verify_receipt(chain[4], keys, previous=chain[3]) == []
    assert _checks(verify_receipt(chain[4], keys, previous=chain[2])) == [(4, "height")]


def test_chain_gap_is_detected(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 6)
    failures = verify_chain(chain[:3] + chain[4:], keys)
    assert _checks(failures) == [(4, "height")]
    assert "gap: height 3 missing" in str(failures[0])


def test_chain_fork_is_detected(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    rival = seal(make_receipt(), ledger_height=2, prev_hash=entry_hash(chain[1]), signer=signer)
    failures = verify_chain(chain[:3] + [rival] + chain[3:], keys)
    assert _checks(failures) == [(2, "duplicate")]
    assert "fork" in failures[0].detail


def test_chain_swapped_order_is_detected(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    swapped = [chain[0], chain[1], chain[3], chain[2], chain[4]]
    assert _checks(verify_chain(swapped, keys)) == [(3, "height"), (2, "height")]


def test_chain_broken_prev_hash_is_detected(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    # Validly signed, but linked to the wrong predecessor: only the chain check catches it.
    chain[3] = seal(chain[3], ledger_height=3, prev_hash=entry_hash(chain[1]), signer=signer)
    chain[4] = seal(chain[4], ledger_height=4, prev_hash=entry_hash(chain[3]), signer=signer)
    failures = verify_chain(chain, keys)
    assert _checks(failures) == [(3, "prev_hash")]
    assert str(failures[0]) == (
        f"height 3 ({chain[3]['receipt_id']}): prev_hash: "
        f"expected {entry_hash(chain[2])} got {entry_hash(chain[1])}"
    )


def test_chain_duplicate_receipt_id_and_genesis(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    copy_of_1 = seal({**chain[3], "receipt_id": chain[1]["receipt_id"]}, ledger_height=3,
                     prev_hash=entry_hash(chain[2]), signer=signer)
    assert _checks(verify_chain(chain[:3] + [copy_of_1], keys)) == [(3, "duplicate")]
    bad_genesis = seal(chain[0], ledger_height=0, prev_hash=sha256_ref(b"x"), signer=signer)
    assert _checks(verify_receipt(bad_genesis, keys)) == [(0, "genesis")]
    second_genesis = seal(chain[2], ledger_height=2, prev_hash=GENESIS_PREV_HASH, signer=signer)
    assert (2, "genesis") in _checks(verify_receipt(second_genesis, keys))


# ---------------------------------------------------------------- sonate verify


def _write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value))
    return str(path)


def _run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="sonate verify")
    verify_cmd.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = verify_cmd.run(parser.parse_args(argv), stdout=out, stderr=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def _run_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "proxy.cli.verify", *argv], capture_output=True,
                          text=True, timeout=60, env=env, cwd=REPO_ROOT)


@pytest.fixture
def key_doc(tmp_path: Path, signer: Signer) -> str:
    return _write(tmp_path / "keys.json", {"keys": [public_key_entry(signer)]})


def test_verify_cmd_receipt_files(tmp_path: Path, signer: Signer, key_doc: str) -> None:
    chain = _chain(signer, 3)
    first, second = _write(tmp_path / "r1.json", chain[1]), _write(tmp_path / "r2.json", chain[2])
    assert _run([second, "--keys", key_doc]) == (0, "OK: 1 receipt verified\n", "")
    assert _run([second, "--prev", first, "--keys", key_doc])[0] == 0
    assert _run(["-", "--keys", key_doc], stdin=json.dumps(chain[2]))[0] == 0
    assert _run([_write(tmp_path / "run.json", chain), "--keys", key_doc])[:2] == (0, "OK: 3 receipts verified\n")

    code, out, _ = _run([second, "--prev", _write(tmp_path / "r0.json", chain[0]), "--keys", key_doc])
    assert code == 1 and f"height 2 ({chain[2]['receipt_id']}): height: gap" in out

    tampered = {**chain[2], "guardrail_action": "refuse"}
    code, out, _ = _run([_write(tmp_path / "bad.json", tampered), "--keys", key_doc])
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith(f"height 2 ({chain[2]['receipt_id']}): signature: ")
    assert lines[-1].startswith("FAILED: 1 failure")


def test_verify_cmd_usage_errors_exit_2(tmp_path: Path, signer: Signer, key_doc: str) -> None:
    receipt = _write(tmp_path / "r.json", _chain(signer, 1)[0])
    cases = [
        ([receipt], "no public keys"),
        ([str(tmp_path / "missing.json"), "--keys", key_doc], "cannot read"),
        ([receipt, "--ledger", "sqlite:///x.db", "--keys", key_doc], "either RECEIPT.json or --ledger"),
        ([receipt, "--keys", str(tmp_path / "nokeys.json")], "cannot read key document"),
        (["--ledger", "ftp://nowhere", "--keys", key_doc], "unsupported ledger URL"),
        (["--ledger", "sqlite:///x.db", "--from", "5", "--to", "2", "--keys", key_doc], "--to >= --from"),
    ]
    for argv, message in cases:
        code, out, err = _run(argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith("sonate verify: error: ") and message in err, (argv, err)
    (tmp_path / "broken.json").write_text('{"v": 1, "v": 2}')
    code, _, err = _run([str(tmp_path / "broken.json"), "--keys", key_doc])
    assert code == 2 and "duplicate member 'v'" in err


def test_verify_cmd_keys_url(tmp_path: Path, signer: Signer) -> None:
    body = json.dumps({"keys": [public_key_entry(signer)]}).encode()

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/v1/keys" else 404)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body if self.path == "/v1/keys" else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        receipt = _write(tmp_path / "r.json", _chain(signer, 1)[0])
        assert _run([receipt, "--keys-url", base + "/v1/keys"])[0] == 0
        code, _, err = _run([receipt, "--keys-url", base + "/nope"])
        assert code == 2 and "cannot fetch keys" in err
    finally:
        server.shutdown()
        server.server_close()


async def test_verify_cmd_ledger(tmp_path: Path) -> None:
    key_file = tmp_path / "signing.json"
    own = load_or_create_signer(key_file)
    url = sqlite_url(tmp_path / "ledger.db")
    store = open_store(url)
    ledger = Ledger(store, own)
    for size in (1, 2, 3, 1):
        await ledger.append([make_receipt() for _ in range(size)])
    await store.close()

    done = _run_process(["--ledger", url, "--keys", str(key_file)])
    assert (done.returncode, done.stdout, done.stderr) == (0, "OK: 7 ledger receipts verified\n", "")
    done = _run_process(["--ledger", url, "--from", "2", "--to", "4", "--keys", str(key_file)])
    assert (done.returncode, done.stdout) == (0, "OK: 3 ledger receipts verified\n")

    # Corrupt one stored receipt behind the store's back.
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        body = json.loads(db.execute("SELECT body FROM receipts WHERE height = 3").fetchone()[0])
        body["actor"] = "mallory"
        db.execute("UPDATE receipts SET body = ? WHERE height = 3", (json.dumps(body),))
    done = _run_process(["--ledger", url, "--keys", str(key_file)])
    assert done.returncode == 1, done
    lines = done.stdout.splitlines()
    assert lines[0] == f"height 3 ({body['receipt_id']}): signature: Ed25519 signature does not verify with {own.key_id}"
    assert lines[1].startswith("height 4 (") and ": prev_hash: expected " in lines[1]
    # The Merkle tree audit of the whole ledger sees the forged leaf too (the stored nodes on its path).
    tree_lines = [line for line in lines[2:-1] if ": tree: stored node " in line]
    assert tree_lines and all(line.startswith("height 3 (") for line in tree_lines)
    assert lines[-1] == f"FAILED: {2 + len(tree_lines)} failure(s) in 7 ledger receipts checked"

    done = _run_process(["--ledger", "redis://127.0.0.1:1/0", "--keys", str(key_file)])
    assert done.returncode == 2 and done.stderr.startswith("sonate verify: error: ") and "Traceback" not in done.stderr
