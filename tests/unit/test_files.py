"""proxy.files: the one atomic whole-file write, and the write-once publish used for key files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from proxy.files import atomic_write, create_exclusive


def test_atomic_write_creates_and_replaces_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    atomic_write(path, b"first\n")
    assert path.read_bytes() == b"first\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # the default: private
    atomic_write(path, b"second\n", 0o644)
    assert path.read_bytes() == b"second\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keyring.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    atomic_write(path, b"old")
    try:
        atomic_write(path, "not bytes")  # type: ignore[arg-type]
    except TypeError:
        pass
    else:
        raise AssertionError("writing str must fail")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_create_exclusive_publishes_once(tmp_path: Path) -> None:
    path = tmp_path / "signing-key.json"
    assert create_exclusive(path, b"winner") is True
    assert create_exclusive(path, b"loser") is False
    assert path.read_bytes() == b"winner"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["signing-key.json"]
