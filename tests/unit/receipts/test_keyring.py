"""The keyring (proxy/receipts/keyring.py): real key files in tmp_path, a fake monotonic clock for the
reload interval.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxy.receipts.keyring import Keyring, generate_key, read_keyring, reconcile, rotate_key
from proxy.receipts.receipt import (
    utc_timestamp,
)
from proxy.receipts.signing import KeyFileError, Signer, replace_key_file
from tests.unit.receipts.test_sealing import _unsealed


def test_generate_and_rotate_use_the_keyring_file_they_are_given(tmp_path: Path) -> None:
    key_file, keyring_file = tmp_path / "k.json", tmp_path / "published" / "keys.json"
    first = generate_key(key_file, keyring_file)
    assert [e["key_id"] for e in read_keyring(keyring_file)] == [first.key_id]
    old, new = rotate_key(key_file, keyring_file)
    assert old.key_id == first.key_id
    assert [(e["key_id"], e["status"]) for e in read_keyring(keyring_file)] == [
        (first.key_id, "retired"), (new.key_id, "active")]
    assert not (tmp_path / "k.keyring.json").exists()
    assert Keyring(key_file, keyring_file).load().entries() == read_keyring(keyring_file)


def test_the_keyring_file_is_public_pretty_printed_json(tmp_path: Path) -> None:
    """Mode 0644 (it is the published key list), two-space indented and newline-terminated for review."""
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    keyring_file = tmp_path / "k.keyring.json"
    assert stat.S_IMODE(os.stat(keyring_file).st_mode) == 0o644
    text = keyring_file.read_text()
    assert text == json.dumps({"keys": read_keyring(keyring_file)}, indent=2) + "\n"


def test_read_keyring_refuses_documents_that_are_not_keyrings(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    for doc in ([], {"keys": {}}, "keys"):
        path.write_text(json.dumps(doc))
        with pytest.raises(KeyFileError, match="not a keyring"):
            read_keyring(path)


def test_read_keyring_refuses_private_keys(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    ring = tmp_path / "k.keyring.json"
    doc = json.loads(ring.read_text())
    doc["keys"][0]["private_key"] = json.loads(key_file.read_text())["private_key"]
    ring.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="private"):
        read_keyring(ring)


def test_reconcile_is_pure_and_reports_no_change_for_the_listed_active_key() -> None:
    signer, successor = Signer.generate(), Signer.generate()
    entries, changed = reconcile([], signer)
    assert changed and [e["status"] for e in entries] == ["active"]
    snapshot = json.loads(json.dumps(entries))
    assert reconcile(entries, signer) == (snapshot, False)
    rotated, changed = reconcile(entries, successor)
    assert changed and [e["status"] for e in rotated] == ["retired", "active"]
    assert entries == snapshot  # the input is not modified


def test_rotation_defaults_to_no_overlap_and_accepts_an_empty_ledger(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    moment = datetime(2026, 5, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
    old, new = rotate_key(key_file, now=moment, ledger_size=0)
    entries = read_keyring(tmp_path / "k.keyring.json")
    assert entries[0]["not_after"] == utc_timestamp(moment) == "2026-05-01T12:00:00.250Z"
    assert entries[1]["not_before"] == new.created == utc_timestamp(moment)
    assert entries[1]["not_before_height"] == 0


def test_timestamps_are_utc_whatever_the_host_time_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    monkeypatch.setenv("TZ", "Asia/Kathmandu")  # UTC+05:45
    time.tzset()
    try:
        _, new = rotate_key(key_file)
        stamps = [new.created, utc_timestamp(), _unsealed()["ts"]]
    finally:
        monkeypatch.undo()
        time.tzset()
    for stamp in stamps:
        parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        assert abs(parsed - datetime.now(timezone.utc)) < timedelta(minutes=5), stamp


def test_rotation_lists_a_key_file_the_keyring_never_saw(tmp_path: Path) -> None:
    """A crash left key B in the key file but only A in the keyring: rotating keeps B published (retired)."""
    key_file = tmp_path / "k.json"
    a = generate_key(key_file)
    b = Signer.generate()
    replace_key_file(key_file, b)
    old, new = rotate_key(key_file)
    assert old.key_id == b.key_id
    assert [(e["key_id"], e["status"]) for e in read_keyring(tmp_path / "k.keyring.json")] == [
        (a.key_id, "retired"), (b.key_id, "retired"), (new.key_id, "active")]


def test_rotation_replaces_a_restored_retired_key(tmp_path: Path) -> None:
    """The way out of a restored, retired key file is a rotation; its retired entry stays as it was."""
    key_file = tmp_path / "k.json"
    a = generate_key(key_file)
    saved = key_file.read_bytes()
    rotate_key(key_file)
    retired = read_keyring(tmp_path / "k.keyring.json")[0]
    key_file.write_bytes(saved)
    old, new = rotate_key(key_file)
    entries = read_keyring(tmp_path / "k.keyring.json")
    assert old.key_id == a.key_id and entries[0] == retired
    assert [e["status"] for e in entries] == ["retired", "retired", "active"] and entries[2]["key_id"] == new.key_id


def test_keyring_must_be_loaded_before_use(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        Keyring(tmp_path / "k.json").current()


def test_a_running_keyring_picks_up_a_rotation_once_per_reload_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Default interval 1 s: the new key is used from the first check at or after 1 s, and the switch is logged."""
    clock = [100.0]
    monkeypatch.setattr("proxy.receipts.keyring.time", SimpleNamespace(monotonic=lambda: clock[0]))
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    first = keyring.current()
    _, new = rotate_key(key_file)
    clock[0] = 100.5
    assert keyring.current().key_id == first.key_id
    clock[0] = 101.0
    with caplog.at_level(logging.INFO, logger="sonate.keys"):
        assert keyring.current().key_id == new.key_id
    # the keyring's own records only: caplog also holds whatever the garbage collector makes other
    # loggers say meanwhile (asyncio's "Task was destroyed but it is pending!" for an earlier test's tasks)
    assert keys_log(caplog) == [f"signing key rotated: {first.key_id} -> {new.key_id}"]
    caplog.clear()
    clock[0] = 102.0  # key file unchanged since: no reload, no log
    with caplog.at_level(logging.INFO, logger="sonate.keys"):
        assert keyring.current().key_id == new.key_id
    assert keys_log(caplog) == []


def keys_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages the ``sonate.keys`` logger emitted into ``caplog``."""
    return [r.getMessage() for r in caplog.records if r.name == "sonate.keys"]


def test_an_unchanged_key_file_is_not_reloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """current() re-reads (and heals the keyring) only when the key file changed, not on every interval."""
    clock = [100.0]
    monkeypatch.setattr("proxy.receipts.keyring.time", SimpleNamespace(monotonic=lambda: clock[0]))
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    (tmp_path / "k.keyring.json").unlink()
    clock[0] = 200.0
    keyring.current()
    assert not (tmp_path / "k.keyring.json").exists()


def test_entries_fall_back_to_the_last_good_copy_which_callers_cannot_change(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    good = keyring.entries()
    good[0]["status"] = "tampered by the caller"
    (tmp_path / "k.keyring.json").write_text("{not json")
    for _ in range(2):  # the fallback copy survives repeated failures
        fallback = keyring.entries()
        assert [(e["key_id"], e["status"]) for e in fallback] == [(keyring.current().key_id, "active")]
