"""Ed25519 receipt signing keys (RFC 8032 via PyNaCl/libsodium).

Key file format (JSON, mode 0600)::

    {"alg": "Ed25519", "key_id": "ed25519:<16 hex>",
     "private_key": "<b64url 32-byte seed>", "public_key": "<b64url 32 bytes>",
     "created": "<RFC 3339 UTC>"}

``key_id`` = ``"ed25519:" + sha256(public_key).hex()[:16]``. Public key
entries (``GET /v1/keys`` lists them as ``{"keys": [...]}``) carry the same
fields minus ``private_key``. base64url is RFC 4648 §5 without padding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Iterable

import nacl.exceptions
import nacl.signing

from proxy.files import atomic_write, create_exclusive
from proxy.primitives.base64url import b64url_decode, b64url_encode
from proxy.receipts.receipt import utc_timestamp

__all__ = [
    "ALG",
    "KeyFileError",
    "PublicKeys",
    "Signer",
    "key_id_for",
    "load_or_create_signer",
    "load_public_keys",
    "public_key_entry",
    "replace_key_file",
    "verify_signature",
]

ALG = "Ed25519"


class KeyFileError(Exception):
    """A signing key file or public key document is unusable.

    The message names the path (when there is one), what is wrong and the fix.
    """


def key_id_for(public_key: bytes) -> str:
    """Return ``"ed25519:" + sha256(public_key).hex()[:16]`` for a 32-byte key."""
    return "ed25519:" + hashlib.sha256(public_key).hexdigest()[:16]


class Signer:
    """An Ed25519 private key that signs receipts.

    Attributes: ``key_id`` (str, see :func:`key_id_for`), ``public_key``
    (32 bytes), ``created`` (RFC 3339 UTC timestamp string).
    """

    def __init__(self, seed: bytes, created: str | None = None) -> None:
        """Build a signer from a 32-byte RFC 8032 private key seed.

        Raises ``ValueError`` if the seed is not 32 bytes.
        """
        if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
            raise ValueError("Ed25519 seed must be 32 bytes")
        self._key = nacl.signing.SigningKey(bytes(seed))
        self.public_key: bytes = bytes(self._key.verify_key)
        self.key_id: str = key_id_for(self.public_key)
        self.created: str = created or utc_timestamp()

    @classmethod
    def generate(cls) -> "Signer":
        """Create a signer with a fresh random key (OS CSPRNG)."""
        return cls(secrets.token_bytes(32))

    @property
    def seed(self) -> bytes:
        """The 32-byte private seed (what the key file stores)."""
        return bytes(self._key)

    def sign(self, message: bytes) -> str:
        """Sign ``message``; return the 64-byte signature as unpadded base64url."""
        return b64url_encode(self._key.sign(message).signature)

    def __repr__(self) -> str:
        return f"Signer(key_id={self.key_id!r}, created={self.created!r})"


def verify_signature(public_key: bytes, message: bytes, signature_b64url: str) -> bool:
    """Return True iff ``signature_b64url`` is a valid Ed25519 signature.

    ``public_key`` is 32 raw bytes; the signature is unpadded base64url of 64
    bytes. Never raises: malformed keys or signatures simply return False.
    """
    try:
        signature = b64url_decode(signature_b64url)
        if len(signature) != 64 or len(public_key) != 32:
            return False
        nacl.signing.VerifyKey(bytes(public_key)).verify(message, signature)
        return True
    except (ValueError, TypeError, nacl.exceptions.CryptoError):
        return False


def public_key_entry(signer: Signer) -> dict[str, str]:
    """Return the public entry ``{"key_id", "alg", "public_key", "created"}`` of a signer."""
    return {
        "key_id": signer.key_id,
        "alg": ALG,
        "public_key": b64url_encode(signer.public_key),
        "created": signer.created,
    }


def _key_file_document(signer: Signer) -> dict[str, str]:
    entry = public_key_entry(signer)
    return {
        "alg": ALG,
        "key_id": entry["key_id"],
        "private_key": b64url_encode(signer.seed),
        "public_key": entry["public_key"],
        "created": entry["created"],
    }


def _signer_from_document(doc: Any, where: str) -> Signer:
    if not isinstance(doc, dict) or doc.get("alg") != ALG:
        raise KeyFileError(f"{where}: not an Ed25519 signing key file (expected \"alg\": \"Ed25519\")")
    try:
        seed = b64url_decode(doc["private_key"])
        signer = Signer(seed, created=doc.get("created"))
    except (KeyError, ValueError, TypeError) as exc:
        raise KeyFileError(f"{where}: bad private_key ({exc})") from None
    if doc.get("public_key") not in (None, b64url_encode(signer.public_key)):
        raise KeyFileError(f"{where}: public_key does not match private_key")
    if doc.get("key_id") not in (None, signer.key_id):
        raise KeyFileError(f"{where}: key_id {doc.get('key_id')!r} does not match the key ({signer.key_id})")
    return signer


def _read_key_file(path: Path) -> Signer:
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise KeyFileError(f"{path}: not a regular file")
        if mode & 0o077:
            raise KeyFileError(
                f"{path}: signing key file has mode {stat.S_IMODE(mode):04o}, readable by others; "
                f"run `chmod 600 {path}`"
            )
        with open(path, "rb") as handle:
            doc = json.loads(handle.read())
    except KeyFileError:
        raise
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read signing key file ({exc})") from None
    return _signer_from_document(doc, str(path))


def _key_file_bytes(signer: Signer) -> bytes:
    """The key file's content: indented JSON of :func:`_key_file_document`, newline-terminated."""
    return json.dumps(_key_file_document(signer), indent=2).encode() + b"\n"


def _write_new_key_file(path: Path, signer: Signer) -> None:
    """Publish a complete key file at ``path`` (0600) unless one already exists.

    :func:`proxy.files.create_exclusive`: concurrent starters never read a
    half-written file; whoever links first wins and the others load the
    winner's key.
    """
    create_exclusive(path, _key_file_bytes(signer), 0o600)


def replace_key_file(path: str | os.PathLike[str], signer: Signer) -> None:
    """Atomically replace (or create) the key file at ``path`` with ``signer`` (mode 0600).

    Used by key rotation (:mod:`proxy.receipts.keyring`). Raises ``OSError`` on I/O failure.
    """
    atomic_write(path, _key_file_bytes(signer), 0o600)


def load_or_create_signer(path: str | os.PathLike[str]) -> Signer:
    """Load the signing key at ``path``, creating it (mode 0600) if missing.

    Parent directories are created (0700). Raises :class:`KeyFileError` when
    the file is group/world accessible (``mode & 0o077``; the message gives
    the mode and the fix ``chmod 600``), malformed, or unreadable.
    Safe when several processes start at once: all end up with one key.
    """
    path = Path(path)
    if not path.exists():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_new_key_file(path, Signer.generate())
        except FileExistsError:
            pass
        except OSError as exc:
            raise KeyFileError(f"{path}: cannot create signing key file ({exc})") from None
    return _read_key_file(path)


def _entry_key(entry: Any, where: str) -> tuple[str, bytes]:
    if not isinstance(entry, dict):
        raise KeyFileError(f"{where}: key entry is not an object")
    if "private_key" in entry:
        signer = _signer_from_document(entry, where)
        return signer.key_id, signer.public_key
    if entry.get("alg") != ALG:
        raise KeyFileError(f"{where}: unsupported alg {entry.get('alg')!r}")
    try:
        public_key = b64url_decode(entry["public_key"])
    except (KeyError, ValueError) as exc:
        raise KeyFileError(f"{where}: bad public_key ({exc})") from None
    if len(public_key) != 32:
        raise KeyFileError(f"{where}: public_key must be 32 bytes")
    key_id = key_id_for(public_key)
    if entry.get("key_id", key_id) != key_id:
        raise KeyFileError(f"{where}: key_id {entry.get('key_id')!r} does not match public_key ({key_id})")
    return key_id, public_key


class PublicKeys(dict[str, Any]):
    """``{key_id: 32-byte Ed25519 public key}`` plus each key's validity window.

    ``windows`` maps key_id to ``(not_before, not_after)``, RFC 3339 UTC
    timestamps with milliseconds or None (open); ``heights`` maps key_id to
    ``not_before_height``, the first ledger height the key may sign (an
    integer recorded at rotation: the ledger's size just before the key
    existed), absent when unknown. A plain ``dict`` works wherever a
    ``PublicKeys`` is accepted; it simply has no windows.
    The verifier (:mod:`proxy.receipts.verify`, check ``key_window``) rejects
    a receipt whose ``ts`` is at or after its key's ``not_after`` or whose
    ``ledger_height`` is below its key's ``not_before_height``; see
    docs/receipts.md "Keys and rotation" and docs/security.md.
    """

    def __init__(self, *args: Any, windows: dict[str, tuple[str | None, str | None]] | None = None,
                 heights: dict[str, int] | None = None, **kwargs: Any) -> None:
        """Build like ``dict``; ``windows`` and ``heights`` as described in the class docstring."""
        super().__init__(*args, **kwargs)
        self.windows: dict[str, tuple[str | None, str | None]] = dict(windows or {})
        self.heights: dict[str, int] = dict(heights or {})


_WINDOW_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_MAX_HEIGHT = 2**53 - 1


def _entry_window(entry: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    bounds = []
    for name in ("not_before", "not_after"):
        value = entry.get(name)
        if value is not None and (not isinstance(value, str) or not _WINDOW_TS.fullmatch(value)):
            raise KeyFileError(f"{where}: {name} must be an RFC 3339 UTC timestamp with milliseconds "
                               f"(e.g. 2026-01-02T03:04:05.678Z) or null, got {value!r:.60}")
        bounds.append(value)
    return bounds[0], bounds[1]


def _entry_height(entry: dict[str, Any], where: str) -> int | None:
    """``not_before_height`` of an entry: an integer 0..2**53-1, or None when absent or null."""
    value = entry.get("not_before_height")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_HEIGHT:
        raise KeyFileError(f"{where}: not_before_height must be an integer >= 0 or null, got {value!r:.60}")
    return value


def load_public_keys(doc_or_path: Any) -> PublicKeys:
    """Return ``{key_id: 32-byte public key}`` from any published key form.

    Accepts a ``GET /v1/keys`` document ``{"keys": [entry, ...]}``, a signing
    key file document (its public half is used), a single entry, a list of
    entries, or a ``str``/``PathLike`` path to a JSON file holding any of
    these. Every ``key_id`` is checked against its key. Entries may carry a
    validity window (``not_before``/``not_after``, see
    :class:`PublicKeys`), returned in ``.windows``, and a
    ``not_before_height``, returned in ``.heights``. Raises
    :class:`KeyFileError` for unreadable or malformed input.
    """
    where = "public keys"
    doc = doc_or_path
    if isinstance(doc_or_path, (str, os.PathLike)):
        where = str(doc_or_path)
        try:
            with open(doc_or_path, "rb") as handle:
                doc = json.loads(handle.read())
        except (OSError, ValueError) as exc:
            raise KeyFileError(f"{where}: cannot read key document ({exc})") from None
    entries: Iterable[Any]
    if isinstance(doc, dict) and "keys" in doc:
        entries = doc["keys"]
        if not isinstance(entries, list):
            raise KeyFileError(f"{where}: \"keys\" must be a list")
    elif isinstance(doc, dict):
        entries = [doc]
    elif isinstance(doc, list):
        entries = doc
    else:
        raise KeyFileError(f"{where}: expected a key document, a key entry or a list of entries")
    keys = PublicKeys()
    for entry in entries:
        key_id, public_key = _entry_key(entry, where)
        keys[key_id] = public_key
        window = _entry_window(entry, where)
        if window != (None, None):
            keys.windows[key_id] = window
        height = _entry_height(entry, where)
        if height is not None:
            keys.heights[key_id] = height
    return keys
