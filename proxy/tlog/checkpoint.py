"""Signed checkpoints: C2SP tlog-checkpoint bodies in C2SP signed-note envelopes, Ed25519.

Pure: no I/O. Formats (https://c2sp.org/tlog-checkpoint, https://c2sp.org/signed-note)::

    <origin>\\n
    <tree size, decimal>\\n
    <base64 root hash>\\n
    \\n
    — <key name> <base64(4-byte key hash ‖ 64-byte Ed25519 signature)>\\n

The signature is Ed25519 (RFC 8032) over the note text (the three body lines,
each ``\\n``-terminated). The key name is the log origin; the key hash is the
first 4 bytes of ``SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key)``
(signed-note, signature type 0x01 = Ed25519). Base64 is standard and padded
(RFC 4648 §4). A verifier accepts a note when a signature whose name and key
hash match a trusted key verifies; signatures by unknown keys are ignored,
a failing signature by a trusted key is an error (signed-note §"Verifying").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping

import nacl.exceptions
import nacl.signing

from proxy.primitives.base64url import b64url_decode
from proxy.primitives.failure import Failure
from proxy.primitives.merkle import HASH_SIZE, MerkleError, b64_decode_hash, b64_encode_hash

__all__ = [
    "ED25519_SIGNATURE_TYPE",
    "Checkpoint",
    "CheckpointError",
    "NoteSignature",
    "checkpoint_signers",
    "format_checkpoint",
    "key_hash",
    "parse_checkpoint",
    "parse_note",
    "sign_checkpoint",
    "verifier_key",
    "verify_checkpoint",
    # cosignatures (C2SP tlog-cosignature)
    "COSIGNATURE_TYPE",
    "Cosignature",
    "append_signatures",
    "cosign_checkpoint",
    "cosignature_message",
    "cosigner_key_hash",
    "cosigner_verifier_key",
    "parse_verifier_key",
    "verified_cosignatures",
    "verify_cosignatures",
]

ED25519_SIGNATURE_TYPE = 0x01
"""Signed-note signature type byte of Ed25519."""

_SIG_PREFIX = "\u2014 "  # EM DASH, SPACE
_MAX_SIGNATURES = 100  # signed-note: verifiers may reject notes with more
_DECIMAL = re.compile(r"^(0|[1-9][0-9]{0,18})$")


class CheckpointError(ValueError):
    """A checkpoint or signed note is malformed; the message says which line and why."""


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint body: ``origin`` (str), ``tree_size`` (int >= 0), ``root_hash`` (32 bytes).

    ``extensions``: any further body lines (opaque, C2SP tlog-checkpoint).
    """

    origin: str
    tree_size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        """The note text: origin, size, base64 root and extension lines, each ``\\n``-terminated."""
        return format_checkpoint(self.origin, self.tree_size, self.root_hash, self.extensions)


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key ``name``, 4-byte ``key_hash``, raw ``signature`` bytes."""

    name: str
    key_hash: bytes
    signature: bytes


def _check_origin(origin: Any) -> str:
    if not isinstance(origin, str) or not origin or any(c.isspace() or c == "+" for c in origin):
        raise CheckpointError(f"origin must be a non-empty string without spaces or '+', got {origin!r}")
    if any(ord(c) < 0x20 for c in origin):
        raise CheckpointError("origin must not contain control characters")
    return origin


def format_checkpoint(origin: str, tree_size: int, root_hash: bytes, extensions: tuple[str, ...] = ()) -> str:
    """Return the checkpoint body (note text) for a tree (C2SP tlog-checkpoint).

    ``origin`` is also the key name, so it must be a valid signed-note key
    name (non-empty, no whitespace, no ``+``). Raises :class:`CheckpointError`
    for a bad origin, a negative size, a root that is not 32 bytes or an
    empty/multi-line extension.
    """
    _check_origin(origin)
    if not isinstance(tree_size, int) or isinstance(tree_size, bool) or tree_size < 0:
        raise CheckpointError(f"tree size must be an integer >= 0, got {tree_size!r}")
    if not isinstance(root_hash, (bytes, bytearray)) or len(root_hash) != HASH_SIZE:
        raise CheckpointError("root hash must be 32 bytes")
    for line in extensions:
        if not isinstance(line, str) or not line or "\n" in line:
            raise CheckpointError(f"bad checkpoint extension line {line!r}")
    lines = [origin, str(tree_size), b64_encode_hash(bytes(root_hash)), *extensions]
    return "".join(line + "\n" for line in lines)


def key_hash(name: str, public_key: bytes) -> bytes:
    """First 4 bytes of ``SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public_key)`` (signed-note key ID for Ed25519)."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([ED25519_SIGNATURE_TYPE]) + bytes(public_key)).digest()[:4]


def verifier_key(name: str, public_key: bytes) -> str:
    """The signed-note verifier key string ``name+<hex key hash>+<base64(0x01 ‖ key)>``.

    This is the form Go's ``golang.org/x/mod/sumdb/note`` and witnesses accept.
    """
    encoded = base64.b64encode(bytes([ED25519_SIGNATURE_TYPE]) + bytes(public_key)).decode("ascii")
    return f"{name}+{key_hash(name, public_key).hex()}+{encoded}"


def sign_checkpoint(body: str, signer: Any, name: str | None = None) -> str:
    """Return the signed note: ``body``, a blank line, one Ed25519 signature line.

    ``body``: note text from :func:`format_checkpoint`; ``signer``: a
    :class:`proxy.receipts.signing.Signer` (``sign`` returns unpadded
    base64url, ``public_key`` 32 bytes); ``name``: the key name, default the
    body's origin line. Ed25519 is deterministic, so every process holding
    the key produces the same note for the same tree. Raises
    :class:`CheckpointError` for a malformed body.
    """
    checkpoint = parse_checkpoint(body)
    text = checkpoint.body()
    if text != body:
        raise CheckpointError("checkpoint body is not in canonical form")
    name = _check_origin(name if name is not None else checkpoint.origin)
    signature = b64url_decode(signer.sign(text.encode("utf-8")))
    blob = base64.b64encode(key_hash(name, signer.public_key) + signature).decode("ascii")
    return f"{text}\n{_SIG_PREFIX}{name} {blob}\n"


def parse_note(text: str) -> tuple[str, list[NoteSignature]]:
    """Split a signed note into its text and signature lines (C2SP signed-note).

    The text is everything up to and including the newline before the last
    blank line. Raises :class:`CheckpointError` for control characters
    (other than newline), a missing separator, or a malformed signature line.
    """
    if not isinstance(text, str):
        raise CheckpointError("a signed note must be text")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise CheckpointError("a signed note must not contain control characters other than newline")
    split = text.rfind("\n\n")
    if split < 0:
        raise CheckpointError("not a signed note: no blank line before the signatures")
    body, rest = text[:split + 1], text[split + 2:]
    if not rest.endswith("\n"):
        raise CheckpointError("signature lines must end with a newline")
    signatures = []
    for number, line in enumerate(rest[:-1].split("\n"), start=1):
        if not line.startswith(_SIG_PREFIX):
            raise CheckpointError(f"signature line {number} does not start with '\u2014 '")
        parts = line[len(_SIG_PREFIX):].split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise CheckpointError(f"signature line {number} is not '\u2014 <name> <base64 signature>'")
        try:
            blob = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raise CheckpointError(f"signature line {number}: signature is not base64") from None
        if len(blob) < 5:
            raise CheckpointError(f"signature line {number}: signature too short")
        signatures.append(NoteSignature(parts[0], blob[:4], blob[4:]))
    if not signatures:
        raise CheckpointError("signed note has no signature")
    if len(signatures) > _MAX_SIGNATURES:
        raise CheckpointError(f"signed note has more than {_MAX_SIGNATURES} signatures")
    return body, signatures


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse a checkpoint body, or the body of a signed checkpoint note (signatures not checked).

    Raises :class:`CheckpointError` naming the bad line: missing origin, a
    size that is not canonical decimal, a root that is not canonical base64
    of 32 bytes, an empty extension line, a missing final newline.
    """
    if not isinstance(text, str):
        raise CheckpointError("a checkpoint must be text")
    body = parse_note(text)[0] if "\n\n" in text else text
    if not body.endswith("\n"):
        raise CheckpointError("checkpoint body must end with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError(f"checkpoint body needs 3 lines (origin, tree size, root hash), got {len(lines)}")
    origin, size_text, root_text, *extensions = lines
    try:
        _check_origin(origin)
    except CheckpointError as exc:
        raise CheckpointError(f"line 1 (origin): {exc}") from None
    if not _DECIMAL.match(size_text):
        raise CheckpointError(f"line 2 (tree size): not a decimal integer: {size_text!r}")
    try:
        root = b64_decode_hash(root_text)
    except MerkleError as exc:
        raise CheckpointError(f"line 3 (root hash): {exc}") from None
    if any(not line for line in extensions):
        raise CheckpointError("empty extension line in checkpoint body")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def _verify_ed25519(public_key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        nacl.signing.VerifyKey(bytes(public_key)).verify(message, signature)
        return True
    except (ValueError, TypeError, nacl.exceptions.CryptoError):
        return False


def checkpoint_signers(text: str, public_keys: Mapping[str, bytes]) -> list[str]:
    """Return the key_ids (of ``public_keys``, ``{key_id: 32-byte key}``) whose signature on the note verifies.

    Only signatures named with the checkpoint's origin count (the key name
    is the origin). Raises :class:`CheckpointError` for a malformed note.
    """
    body, signatures = parse_note(text)
    origin = parse_checkpoint(body).origin
    good = []
    for key_id, public_key in public_keys.items():
        wanted = key_hash(origin, public_key)
        for sig in signatures:
            if sig.name == origin and sig.key_hash == wanted and len(sig.signature) == 64 \
                    and _verify_ed25519(public_key, body.encode("utf-8"), sig.signature):
                good.append(key_id)
                break
    return good


def verify_checkpoint(text: Any, public_keys: Mapping[str, bytes], origin: str | None = None) -> list[Failure]:
    """Verify a signed checkpoint note; return failures (empty = valid).

    ``public_keys``: ``{key_id: 32-byte Ed25519 key}`` trusted to sign
    checkpoints; ``origin``: the log expected (None: any). Checks, with
    check names: ``checkpoint`` (note/body format), ``origin`` (origin
    differs from ``origin``), ``checkpoint_signature`` (a signature by a
    trusted key does not verify, or no trusted key signed). Never raises.
    """
    try:
        checkpoint = parse_checkpoint(text)
        body, signatures = parse_note(text)
    except CheckpointError as exc:
        return [Failure(None, None, "checkpoint", str(exc), where="checkpoint")]
    where = f"checkpoint (tree size {checkpoint.tree_size})"
    fails = []
    if origin is not None and checkpoint.origin != origin:
        fails.append(Failure(None, None, "origin", f"expected origin {origin!r}, got {checkpoint.origin!r}",
                             where=where))
    verified = False
    for key_id, public_key in public_keys.items():
        if len(public_key) != 32:
            continue
        wanted = key_hash(checkpoint.origin, public_key)
        for sig in signatures:
            if sig.name != checkpoint.origin or sig.key_hash != wanted:
                continue
            if len(sig.signature) == 64 and _verify_ed25519(public_key, body.encode("utf-8"), sig.signature):
                verified = True
            else:
                fails.append(Failure(None, None, "checkpoint_signature",
                                     f"the signature by {key_id} does not verify", where=where))
    if not verified and not any(f.check == "checkpoint_signature" for f in fails):
        names = ", ".join(sorted({f"{s.name}/{s.key_hash.hex()}" for s in signatures}))
        trusted = ", ".join(sorted(public_keys)) or "none"
        fails.append(Failure(None, None, "checkpoint_signature",
                             f"no signature by a trusted key (signed by {names}; trusted: {trusted})", where=where))
    return fails


# -- cosignatures (https://c2sp.org/tlog-cosignature, Ed25519 cosignature/v1) --------------------

COSIGNATURE_TYPE = 0x04
"""Signed-note signature type byte of an Ed25519 ``cosignature/v1`` (C2SP tlog-cosignature, "Format")."""

_COSIGNATURE_SIZE = 4 + 8 + 64  # key ID ‖ u64 big-endian timestamp ‖ Ed25519 signature
_MAX_TIMESTAMP = 2**63 - 1


@dataclass(frozen=True)
class Cosignature:
    """A verified cosignature: cosigner ``name`` and its ``timestamp`` (POSIX seconds)."""

    name: str
    timestamp: int


def cosigner_key_hash(name: str, public_key: bytes) -> bytes:
    """Key ID of an Ed25519 cosigner: ``SHA-256(name ‖ "\\n" ‖ 0x04 ‖ public key)[:4]`` (tlog-cosignature "Format")."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_TYPE]) + bytes(public_key)).digest()[:4]


def cosigner_verifier_key(name: str, public_key: bytes) -> str:
    """The vkey of a cosigner: ``name+<hex key ID>+<base64(0x04 ‖ key)>`` (signed-note "Verifier keys")."""
    _check_origin(name)
    encoded = base64.b64encode(bytes([COSIGNATURE_TYPE]) + bytes(public_key)).decode("ascii")
    return f"{name}+{cosigner_key_hash(name, public_key).hex()}+{encoded}"


def parse_verifier_key(vkey: Any) -> tuple[str, int, bytes]:
    """Split a signed-note verifier key ``<name>+<hex key ID>+<base64(type ‖ key)>``; return ``(name, type, key)``.

    Accepts Ed25519 log keys (type 0x01) and Ed25519 cosigner keys (type
    0x04), both 32-byte keys. Raises :class:`CheckpointError` for a bad
    name, a key ID that is not the first 4 bytes of
    ``SHA-256(name ‖ "\\n" ‖ type ‖ key)`` (signed-note "Verifier keys"), or
    another type or length.
    """
    if not isinstance(vkey, str) or vkey.count("+") < 2:
        raise CheckpointError("a verifier key is '<name>+<hex key ID>+<base64 key>'")
    name, hex_id, encoded = vkey.split("+", 2)  # base64 may contain '+'; names may not
    _check_origin(name)
    try:
        raw = base64.b64decode(encoded, validate=True)
        wanted = bytes.fromhex(hex_id)
    except (binascii.Error, ValueError):
        raise CheckpointError(f"verifier key {name!r}: key ID is not hex or key is not base64") from None
    if len(raw) != 33 or raw[0] not in (ED25519_SIGNATURE_TYPE, COSIGNATURE_TYPE):
        raise CheckpointError(f"verifier key {name!r}: expected type 0x01 or 0x04 and a 32-byte Ed25519 key")
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + raw).digest()[:4]
    if len(wanted) != 4 or wanted != digest:
        raise CheckpointError(f"verifier key {name!r}: key ID {hex_id} does not match the key (expected {digest.hex()})")
    return name, raw[0], raw[1:]


def cosignature_message(body: str, timestamp: int) -> bytes:
    """The signed message of an Ed25519 cosignature (tlog-cosignature "Ed25519 signed message").

    ``cosignature/v1\\n`` ‖ ``time <timestamp>\\n`` ‖ the checkpoint note
    text (with its final newline, without signature lines). Raises
    :class:`CheckpointError` for a timestamp outside ``0 .. 2**63-1``.
    """
    if not isinstance(timestamp, int) or isinstance(timestamp, bool) or not 0 <= timestamp <= _MAX_TIMESTAMP:
        raise CheckpointError(f"cosignature timestamp must be an integer in 0..2**63-1, got {timestamp!r}")
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def cosign_checkpoint(note: str, signer: Any, name: str, timestamp: int) -> str:
    """Return one cosignature line ``— <name> base64(key ID ‖ u64 BE timestamp ‖ signature)\\n`` on ``note``.

    ``note``: a checkpoint body or signed note (only its text is signed);
    ``signer``: a :class:`proxy.receipts.signing.Signer`; ``name``: the
    cosigner name; ``timestamp``: POSIX seconds. Raises
    :class:`CheckpointError` for a malformed note or name.
    """
    parse_checkpoint(note)
    body = parse_note(note)[0] if "\n\n" in note else note
    _check_origin(name)
    signature = b64url_decode(signer.sign(cosignature_message(body, timestamp)))
    blob = cosigner_key_hash(name, signer.public_key) + timestamp.to_bytes(8, "big") + signature
    return f"{_SIG_PREFIX}{name} {base64.b64encode(blob).decode('ascii')}\n"


def append_signatures(note: str, lines: str) -> str:
    """``note`` with the signature ``lines`` (each ``— ...\\n``) appended, each line once: lines the
    note already has, and repeats within ``lines``, are skipped.

    The client's way to merge a witness's response into its checkpoint
    (tlog-witness "add-checkpoint": "the client MAY concatenate it to the
    checkpoint"). Raises :class:`CheckpointError` when the result is not a
    signed note.
    """
    present = set(note.splitlines())
    extra = "".join(line + "\n" for line in dict.fromkeys(lines.splitlines()) if line and line not in present)
    merged = note + extra
    parse_note(merged)
    return merged


def _check_cosignature(body: str, sig: NoteSignature, public_key: bytes) -> int | None:
    """The timestamp of ``sig`` when it is a valid cosignature of ``body`` by ``public_key``, else None."""
    if len(sig.signature) != _COSIGNATURE_SIZE - 4:
        return None
    timestamp = int.from_bytes(sig.signature[:8], "big")
    if timestamp > _MAX_TIMESTAMP:
        return None
    if not _verify_ed25519(public_key, cosignature_message(body, timestamp), sig.signature[8:]):
        return None
    return timestamp


def verified_cosignatures(note: str, cosigners: Mapping[str, bytes]) -> tuple[list[Cosignature], list[str]]:
    """Check the cosignature lines of ``note`` by the trusted ``cosigners`` (``{name: 32-byte key}``).

    Returns ``(valid, bad)``: one :class:`Cosignature` per trusted cosigner
    with a verifying line, and the names of trusted cosigners whose line
    (name and key ID match) does not verify. Lines of unknown names or key
    IDs are ignored (tlog-witness: "The client MUST ignore any cosignatures
    from unknown keys"). Raises :class:`CheckpointError` for a malformed note.
    """
    body, signatures = parse_note(note)
    parse_checkpoint(body)
    valid, bad = [], []
    for name, public_key in cosigners.items():
        wanted = cosigner_key_hash(name, public_key)
        lines = [s for s in signatures if s.name == name and s.key_hash == wanted]
        times = [t for t in (_check_cosignature(body, s, public_key) for s in lines) if t is not None]
        if times:
            valid.append(Cosignature(name, max(times)))
        elif lines:
            bad.append(name)
    return valid, bad


def verify_cosignatures(note: Any, cosigners: Mapping[str, bytes], quorum: int) -> list[Failure]:
    """Failures (empty = valid) unless at least ``quorum`` trusted ``cosigners`` cosigned ``note``.

    ``cosigners``: ``{cosigner name: 32-byte Ed25519 key}`` (from vkeys,
    :func:`parse_verifier_key`). Check names: ``checkpoint`` (malformed
    note), ``cosignature`` (a trusted cosigner's line does not verify, or
    fewer than ``quorum`` valid cosignatures). Never raises.
    """
    try:
        checkpoint = parse_checkpoint(note)
        valid, bad = verified_cosignatures(note, cosigners)
    except CheckpointError as exc:
        return [Failure(None, None, "checkpoint", str(exc), where="checkpoint")]
    where = f"checkpoint (tree size {checkpoint.tree_size})"
    fails = [Failure(None, None, "cosignature", f"the cosignature by witness {name} does not verify", where=where)
             for name in bad]
    if len(valid) < quorum:
        got = ", ".join(c.name for c in valid) or "none"
        fails.append(Failure(None, None, "cosignature", f"{len(valid)} of the {quorum} witness cosignature(s) "
                             f"required (valid: {got}; trusted: {', '.join(sorted(cosigners))})", where=where))
    return fails
