"""Signing keys: `sonate keys generate | rotate | list`, 0600 enforcement, validity windows.

docs/receipts.md "Keys and rotation": after a rotation the old public key stays published with its window,
receipts it signed before ``not_after`` keep verifying, later ones do not; the proxy picks up the
new key without a restart and refuses to start on a group/world-readable key file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from proxy.receipts import Ledger, load_public_keys, open_store, verify_chain, verify_store
from proxy.receipts.keyring import Keyring, generate_key, read_keyring, rotate_key
from proxy.receipts.receipt import seal, utc_timestamp
from proxy.receipts.signing import KeyFileError
from tests.support.ledger import make_receipt
from tests.support.proxy import ROOT, write_config


@pytest.fixture()
def sonate(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run the `sonate` CLI entry point (in process: the same parser and code as the console script)."""
    from proxy.cli import main

    monkeypatch.setenv("STUB_PROVIDER_KEY", "x")
    monkeypatch.setenv("SONATE_TEST_ADMIN_KEY", "sk-test-admin-0003-padded-to-32-chars")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["sonate", *args], code, out, err)

    return run


def test_cli_generate_rotate_list(tmp_path: Path, sonate) -> None:
    key_file = tmp_path / "keys" / "signing.json"
    missing = sonate("keys", "list", "--key-file", str(key_file))
    assert missing.returncode == 2 and "sonate keys generate" in missing.stderr and "Traceback" not in missing.stderr
    made = sonate("keys", "generate", "--key-file", str(key_file))
    assert made.returncode == 0, made.stderr
    assert key_file.stat().st_mode & 0o777 == 0o600
    again = sonate("keys", "generate", "--key-file", str(key_file))
    assert again.returncode == 2 and "rotate" in again.stderr
    first = json.loads(key_file.read_text())["key_id"]
    rotated = sonate("keys", "rotate", "--overlap-seconds", "0", "--key-file", str(key_file))
    assert rotated.returncode == 0, rotated.stderr
    second = json.loads(key_file.read_text())["key_id"]
    assert second != first and key_file.stat().st_mode & 0o777 == 0o600
    listed = sonate("keys", "list", "--json", "--key-file", str(key_file))
    entries = json.loads(listed.stdout)["keys"]
    assert [(e["key_id"], e["status"]) for e in entries] == [(first, "retired"), (second, "active")]
    assert entries[0]["not_after"] == entries[1]["not_before"] and entries[1]["not_after"] is None
    assert "private_key" not in listed.stdout
    table = sonate("keys", "list", "--key-file", str(key_file)).stdout
    assert first in table and "retired" in table and "active" in table


def test_loose_key_file_is_refused_by_cli_and_proxy(tmp_path: Path, stub, sonate) -> None:
    config_path = write_config(tmp_path, stub.url, "sqlite:///" + str(tmp_path / "l.db"), 0, ROOT / "policies")
    key_file = tmp_path / "keys" / "signing-key.json"
    assert sonate("keys", "generate", "--config", str(config_path)).returncode == 0
    key_file.chmod(0o640)
    rotate = sonate("keys", "rotate", "--config", str(config_path))
    assert rotate.returncode == 2 and "chmod 600" in rotate.stderr
    env = {**os.environ, "STUB_PROVIDER_KEY": "x", "SONATE_TEST_ADMIN_KEY": "sk-test-admin-0003-padded-to-32-chars"}
    serve = subprocess.run([sys.executable, "-m", "proxy", "serve", "--config", str(config_path)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    assert serve.returncode == 2
    assert "mode 0640" in serve.stderr and "chmod 600" in serve.stderr and "Traceback" not in serve.stderr


def test_retired_key_verifies_only_inside_its_window(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    old = generate_key(key_file)
    rotation = datetime.now(timezone.utc)
    _, new = rotate_key(key_file, overlap_seconds=60, now=rotation)
    keys = load_public_keys(read_keyring(tmp_path / "k.keyring.json"))
    assert set(keys) == {old.key_id, new.key_id}
    not_after = utc_timestamp(rotation + timedelta(seconds=60))
    assert keys.windows[old.key_id] == (old.created, not_after)
    genesis = "sha256:" + "0" * 64
    inside = seal(make_receipt(ts=utc_timestamp(rotation + timedelta(seconds=59))), ledger_height=0,
                  prev_hash=genesis, signer=old)
    after = seal(make_receipt(ts=not_after), ledger_height=0, prev_hash=genesis, signer=old)
    assert verify_chain([inside], keys) == []
    assert [f.check for f in verify_chain([after], keys)] == ["key_window"]
    assert verify_chain([after], dict(keys)) == []  # a bare key map has no windows


def test_restored_retired_key_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    saved = key_file.read_bytes()
    rotate_key(key_file)
    key_file.write_bytes(saved)  # someone restores the old key file from a backup
    with pytest.raises(KeyFileError, match="retired"):
        Keyring(key_file).load()


async def test_ledger_signs_with_the_rotated_key_without_restart(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file, reload_interval_s=0).load()
    store = open_store("sqlite:///" + str(tmp_path / "ledger.db"))
    try:
        ledger = Ledger(store, keyring.current(), signer_source=keyring.current)
        before = await ledger.append([make_receipt(), make_receipt()])
        _, new = rotate_key(key_file, overlap_seconds=5)
        after = await ledger.append([make_receipt()])
        assert {r["key_id"] for r in before} != {new.key_id} and after[0]["key_id"] == new.key_id
        count, failures = await verify_store(store, keyring.public_keys())
        assert (count, failures) == (3, [])  # old receipts still verify with the retired key
    finally:
        await store.close()


def test_keyring_heals_after_a_crash_between_key_file_and_keyring(tmp_path: Path) -> None:
    from proxy.receipts.signing import Signer, replace_key_file

    key_file = tmp_path / "k.json"
    old = generate_key(key_file)
    new = Signer.generate()
    replace_key_file(key_file, new)  # rotation died before writing the keyring
    entries = Keyring(key_file).load().entries()
    assert [(e["key_id"], e["status"]) for e in entries] == [(old.key_id, "retired"), (new.key_id, "active")]
    assert entries[0]["not_after"] == new.created


def test_rotation_records_the_ledger_size_as_the_new_keys_first_height(tmp_path: Path) -> None:
    """docs/receipts.md "Keys and rotation": heights below the size read at rotation cannot carry the new key."""
    key_file = tmp_path / "k.json"
    old = generate_key(key_file)
    rotation = datetime.now(timezone.utc)
    _, new = rotate_key(key_file, overlap_seconds=0, now=rotation, ledger_size=5)
    entries = read_keyring(tmp_path / "k.keyring.json")
    assert [e.get("not_before_height") for e in entries] == [None, 5]
    keys = load_public_keys({"keys": entries})
    assert keys.heights == {new.key_id: 5}
    before = utc_timestamp(rotation - timedelta(seconds=1))  # a request answered before the rotation...
    spooled = seal(make_receipt(ts=before), ledger_height=5, prev_hash="sha256:" + "1" * 64, signer=new)
    assert verify_chain([spooled], keys) == []  # ...and sealed after it (the spool): fine
    rewritten = seal(make_receipt(ts=before), ledger_height=4, prev_hash="sha256:" + "1" * 64, signer=new)
    failures = verify_chain([rewritten], keys)
    assert [f.check for f in failures] == ["key_window"] and "not_before_height 5" in failures[0].detail
    with pytest.raises(ValueError):
        rotate_key(key_file, ledger_size=-1)
    assert old.key_id in keys


def test_cli_rotate_reads_the_configured_ledger(tmp_path: Path, stub, sonate) -> None:
    import asyncio

    db = tmp_path / "l.db"
    config_path = write_config(tmp_path, stub.url, "sqlite:///" + str(db), 0, ROOT / "policies")
    assert sonate("keys", "generate", "--config", str(config_path)).returncode == 0
    key_file = tmp_path / "keys" / "signing-key.json"

    async def append(n: int) -> None:
        keyring = Keyring(key_file).load()
        store = open_store("sqlite:///" + str(db))
        try:
            await Ledger(store, keyring.current()).append([make_receipt() for _ in range(n)])
        finally:
            await store.close()

    asyncio.run(append(7))
    rotated = sonate("keys", "rotate", "--config", str(config_path))
    assert rotated.returncode == 0, rotated.stderr
    assert "from 7 on" in rotated.stderr
    listed = json.loads(sonate("keys", "list", "--json", "--config", str(config_path)).stdout)["keys"]
    assert listed[-1]["not_before_height"] == 7 and listed[-1]["status"] == "active"
    no_ledger = sonate("keys", "rotate", "--key-file", str(key_file))
    assert no_ledger.returncode == 0 and "no not_before_height" in no_ledger.stderr
