"""The signing keyring: the active Ed25519 key plus the published history of retired keys.

Two files (docs/receipts.md "Keys and rotation"):

- the **key file** (``signing.key_file``, mode 0600, format of
  :mod:`proxy.receipts.signing`): the one private key that signs new receipts
  and checkpoints;
- the **keyring file** (``signing.keyring_file``, default: beside the key
  file, ``<key file stem>.keyring.json``; public, mode 0644)::

      {"keys": [{"key_id", "alg", "public_key", "created",
                 "not_before", "not_after", "not_before_height", "status"}, ...]}   # oldest first

  the same document ``GET /v1/keys`` serves, so it can be given to
  ``sonate verify --keys``. ``status`` is ``active`` (exactly one: the key
  file's key, ``not_after`` null) or ``retired``.

Validity window: a key verifies receipts whose ``ts < not_after``
(``not_after`` null: open) and whose ``ledger_height >= not_before_height``
(null or absent: unknown, no bound). ``not_before_height`` is the ledger's
size read just *before* the key was created (``sonate keys rotate`` reads the
configured ledger's head): every height below it was sealed before the key
existed, so a receipt there signed by this key is a rewrite. ``not_before``
records when the key began signing and is informational: a receipt may
legitimately be sealed after its ``ts`` (a spooled receipt replayed later),
so verifiers check the height, not the time (docs/security.md).

Rotation writes the new key file first (atomic rename), then the keyring;
every load reconciles the two (:func:`reconcile`), so a crash between the
two writes heals on the next start. Retired private keys are not kept: a
retired key can no longer sign anything. Mutations hold an exclusive
``flock`` on ``<keyring>.lock``, so concurrent proxies and CLI runs on one
host never interleave. A running proxy re-reads the key file when it
changes (checked at most once per ``reload_interval_s``), so rotation needs
no restart; ``sonate keys rotate --overlap-seconds`` keeps the old key valid
a while for processes that have not reloaded yet.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import logging
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

from proxy.files import atomic_write
from proxy.receipts.receipt import utc_timestamp
from proxy.receipts.signing import (
    KeyFileError,
    PublicKeys,
    Signer,
    _read_key_file,
    load_or_create_signer,
    load_public_keys,
    public_key_entry,
    replace_key_file,
)

__all__ = [
    "Keyring",
    "default_keyring_path",
    "generate_key",
    "read_keyring",
    "reconcile",
    "rotate_key",
]

log = logging.getLogger("sonate.keys")


def default_keyring_path(key_file: str | os.PathLike[str]) -> Path:
    """Return the default keyring path beside ``key_file``: ``<dir>/<stem>.keyring.json``."""
    key_file = Path(key_file)
    return key_file.with_name(key_file.stem + ".keyring.json")


def _active_entry(signer: Signer, *, not_before: str, not_before_height: int | None = None) -> dict[str, Any]:
    """The keyring entry of a newly active key (open validity window: ``not_after`` null)."""
    return {**public_key_entry(signer), "not_before": not_before, "not_after": None,
            "not_before_height": not_before_height, "status": "active"}


def read_keyring(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the keyring's entries (oldest first); ``[]`` when the file does not exist.

    Every entry is validated (key_id matches the key, windows are RFC 3339
    UTC with milliseconds). Raises :class:`KeyFileError` naming the file for
    unreadable or malformed content.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read keyring ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise KeyFileError(f"{path}: not a keyring (expected {{\"keys\": [...]}})")
    load_public_keys(doc)  # validates ids, keys and windows
    for entry in doc["keys"]:
        if "private_key" in entry:
            raise KeyFileError(f"{path}: a keyring is public and must not hold private keys")
        if entry.get("status") not in ("active", "retired"):
            raise KeyFileError(f"{path}: key {entry.get('key_id')}: status must be active or retired")
    keys: list[dict[str, Any]] = doc["keys"]
    return keys


def _write_keyring(path: Path, entries: list[dict[str, Any]]) -> None:
    """Atomically replace the keyring file (:func:`proxy.files.atomic_write`), mode 0644."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"keys": entries}, indent=2).encode() + b"\n", 0o644)


@contextlib.contextmanager
def _locked(keyring_path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<keyring>.lock`` (created 0600) for the block."""
    keyring_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(keyring_path.with_name(keyring_path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def reconcile(entries: list[dict[str, Any]], signer: Signer) -> tuple[list[dict[str, Any]], bool]:
    """Make a keyring agree with the active ``signer``; return ``(entries, changed)``. Pure.

    - the signer's key listed as active: nothing to do;
    - the signer's key missing (first start, or a crash between the two
      writes of a rotation): every other active key is retired with
      ``not_after`` = the signer's ``created``, and the signer is added as
      active with ``not_before`` = its ``created``;
    - the signer's key listed as retired: :class:`KeyFileError` (an old key
      file was restored; it must not sign again).
    """
    entries = copy.deepcopy(entries)
    mine = [e for e in entries if e.get("key_id") == signer.key_id]
    if mine:
        if mine[-1].get("status") == "retired":
            raise KeyFileError(
                f"the key file holds {signer.key_id}, which was retired at {mine[-1].get('not_after')}; "
                "a retired key must not sign again: run `sonate keys rotate` to make a new key")
        return entries, False
    for entry in entries:
        if entry.get("status") == "active":
            entry["status"], entry["not_after"] = "retired", signer.created
    entries.append(_active_entry(signer, not_before=signer.created))
    return entries, True


def _load_reconciled(key_file: Path, keyring_file: Path) -> tuple[Signer, list[dict[str, Any]]]:
    """Read the key file (0600 enforced) and the keyring under the lock, healing the keyring."""
    with _locked(keyring_file):
        signer = _read_key_file(key_file)
        entries, changed = reconcile(read_keyring(keyring_file), signer)
        if changed:
            _write_keyring(keyring_file, entries)
    return signer, entries


def generate_key(key_file: str | os.PathLike[str], keyring_file: str | os.PathLike[str] | None = None) -> Signer:
    """Create the first signing key at ``key_file`` (0600) and list it, active, in the keyring.

    Raises :class:`KeyFileError` if ``key_file`` already exists (use
    :func:`rotate_key` to replace a key) or cannot be written.
    """
    key_file = Path(key_file)
    keyring = Path(keyring_file) if keyring_file else default_keyring_path(key_file)
    if key_file.exists():
        raise KeyFileError(f"{key_file}: a signing key already exists; use `sonate keys rotate` to replace it")
    load_or_create_signer(key_file)
    return _load_reconciled(key_file, keyring)[0]


def rotate_key(
    key_file: str | os.PathLike[str],
    keyring_file: str | os.PathLike[str] | None = None,
    *,
    overlap_seconds: float = 0.0,
    now: datetime | None = None,
    ledger_size: int | None = None,
) -> tuple[Signer, Signer]:
    """Replace the active key with a fresh one; return ``(old, new)`` signers.

    At rotation time T (``now``, default the current time): the new key gets
    ``not_before`` = T and becomes active; the old key is retired with
    ``not_after`` = T + ``overlap_seconds`` (receipts dated before that keep
    verifying with it, forever). Order: the new key file is written first
    (atomic rename), then the keyring; see :func:`reconcile` for crash
    healing. ``ledger_size`` (head height + 1, read by the caller *before*
    this call) becomes the new key's ``not_before_height``: no receipt below
    it can carry the new key's signature (None: unknown, not recorded).
    Raises :class:`KeyFileError` if the current key file is missing,
    group/world readable or malformed, ``ValueError`` for a negative overlap
    or ledger size.
    """
    if overlap_seconds < 0:
        raise ValueError("overlap_seconds must be >= 0")
    if ledger_size is not None and (not isinstance(ledger_size, int) or ledger_size < 0):
        raise ValueError("ledger_size must be an integer >= 0")
    key_file = Path(key_file)
    keyring = Path(keyring_file) if keyring_file else default_keyring_path(key_file)
    if not key_file.exists():
        raise KeyFileError(f"{key_file}: no signing key to rotate; run `sonate keys generate` first")
    moment = now or datetime.now(timezone.utc)
    with _locked(keyring):
        old = _read_key_file(key_file)
        entries = read_keyring(keyring)
        if not any(e.get("key_id") == old.key_id for e in entries):
            entries, _ = reconcile(entries, old)  # (a restored, already retired key stays as it is)
        new = Signer.generate()
        new.created = utc_timestamp(moment)
        try:
            replace_key_file(key_file, new)
        except OSError as exc:
            raise KeyFileError(f"{key_file}: cannot write the new key ({exc})") from None
        not_after = utc_timestamp(moment + timedelta(seconds=overlap_seconds))
        for entry in entries:
            if entry.get("status") == "active":
                entry["status"], entry["not_after"] = "retired", not_after
        entries.append(_active_entry(new, not_before=new.created, not_before_height=ledger_size))
        _write_keyring(keyring, entries)
    return old, new


class Keyring:
    """The running proxy's view of its keys: the current signer and the published history.

    ``key_file`` / ``keyring_file`` as in the module docstring. :meth:`load`
    must be called once (at start-up; it enforces mode 0600 and refuses a
    retired key). :meth:`current` re-reads the key file when its inode,
    size or mtime changed, checked at most every ``reload_interval_s``
    seconds, so ``sonate keys rotate`` takes effect without a restart.
    """

    def __init__(self, key_file: str | os.PathLike[str], keyring_file: str | os.PathLike[str] | None = None,
                 *, reload_interval_s: float = 1.0) -> None:
        """Remember the paths; no I/O until :meth:`load`."""
        self.key_file = Path(key_file)
        self.keyring_file = Path(keyring_file) if keyring_file else default_keyring_path(self.key_file)
        self.reload_interval_s = reload_interval_s
        self._signer: Signer | None = None
        self._entries: list[dict[str, Any]] = []
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0

    def _file_stamp(self) -> tuple[int, int, int]:
        st = os.stat(self.key_file)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def load(self) -> "Keyring":
        """Create the key on first start (as :func:`load_or_create_signer` does), then load and reconcile.

        Raises :class:`KeyFileError` (bad mode, malformed file, retired key).
        Returns ``self``.
        """
        if not self.key_file.exists():
            load_or_create_signer(self.key_file)
        stamp = self._file_stamp()
        self._signer, self._entries = _load_reconciled(self.key_file, self.keyring_file)
        self._stamp, self._checked = stamp, time.monotonic()
        return self

    def current(self) -> Signer:
        """Return the signer to seal with now, reloading it if the key file was replaced.

        A reload that fails (e.g. the new file has a loose mode) is logged and
        the previous signer is kept. Raises ``RuntimeError`` before :meth:`load`.
        """
        if self._signer is None:
            raise RuntimeError("Keyring.load() was not called")
        now = time.monotonic()
        if now - self._checked >= self.reload_interval_s:
            self._checked = now
            try:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    signer, entries = _load_reconciled(self.key_file, self.keyring_file)
                    if signer.key_id != self._signer.key_id:
                        log.info("signing key rotated: %s -> %s", self._signer.key_id, signer.key_id)
                    self._signer, self._entries, self._stamp = signer, entries, stamp
            except (OSError, KeyFileError) as exc:
                log.error("cannot reload the signing key %s (still signing with %s): %s",
                          self.key_file, self._signer.key_id, exc)
        return self._signer

    @property
    def signer(self) -> Signer:
        """The current signer (see :meth:`current`)."""
        return self.current()

    def entries(self) -> list[dict[str, Any]]:
        """Public key entries, oldest first (the ``keys`` of ``GET /v1/keys``), re-read from the keyring.

        Falls back to the last good copy (with the current signer merged in)
        when the keyring file cannot be read.
        """
        signer = self.current()
        try:
            entries = read_keyring(self.keyring_file)
        except KeyFileError as exc:
            log.error("%s", exc)
            entries = self._entries
        try:
            entries, _ = reconcile(entries, signer)
        except KeyFileError:
            pass
        self._entries = entries
        return copy.deepcopy(entries)

    def public_keys(self) -> PublicKeys:
        """``{key_id: public key}`` of every published key, with their validity windows."""
        return load_public_keys({"keys": self.entries()})
