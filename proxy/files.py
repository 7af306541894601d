"""Durable file writes: the one implementation of "write a whole file atomically".

Readers of a file written here see the old content or the new one, never a
mix, and a write that returned survives a crash (data and directory entry are
fsync-ed). Used for signing key files and keyrings (:mod:`proxy.receipts`),
the receipt spool's header file (:mod:`proxy.server.admission.spool`) and report
outputs (:mod:`proxy.cli.report`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["atomic_write", "create_exclusive", "fsync_dir"]


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync ``directory`` so a rename or link inside it survives a crash. Raises ``OSError``."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fd(fd: int, data: bytes) -> None:
    """Write ``data`` to the open descriptor ``fd``, fsync it and close it."""
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_temp(path: Path, data: bytes, mode: int) -> Path:
    """Write ``data`` to a new private temp file beside ``path`` (fsync-ed); return the temp path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    try:
        _write_fd(fd, data)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Atomically replace (or create) the file at ``path`` with ``data`` and permission ``mode``.

    Writes a private temp file in the same directory, fsyncs it, renames it
    over ``path`` (POSIX ``rename`` is atomic) and fsyncs the directory.
    Raises ``OSError`` on I/O failure (the temp file is removed).
    """
    path = Path(path)
    tmp = _write_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> bool:
    """Publish a complete file at ``path`` unless one exists; return True if this call created it.

    The content goes to a private temp file first, then is hard-linked into
    place, so concurrent creators never read a half-written file: whoever
    links first wins. On a file system without hard links it falls back to an
    exclusive create (``O_EXCL``). Raises ``OSError`` on I/O failure.
    """
    path = Path(path)
    tmp = _write_temp(path, data, mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:  # no hard links: exclusive create instead
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
        except FileExistsError:
            return False
        _write_fd(fd, data)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return True
