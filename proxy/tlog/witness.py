"""The witness: a C2SP tlog-witness ``add-checkpoint`` state machine and its persisted state. Pure: no I/O.

A witness keeps, per log origin, the latest checkpoint it cosigned, and cosigns a new one only
when it is consistent with it (https://c2sp.org/tlog-witness, "add-checkpoint"). Request body::

    old <size>\\n                      the size the client believes the witness holds
    <base64 hash>\\n ...               RFC 6962 §2.1.2 (= RFC 9162 §2.1.4) consistency proof, at most 63 lines
    \\n
    <signed checkpoint note>           C2SP tlog-checkpoint in a C2SP signed note

Answers, in the order the spec checks them: 400 malformed body or ``old`` above the checkpoint
size; 404 unknown origin; 403 no signature by a trusted log key; 409 ``old`` is not the size
held (body ``<size>\\n``, ``Content-Type: text/x.tlog.size``) or same size with another root
(a fork); 422 the consistency proof does not verify; 200 one ``cosignature/v1`` line
(:func:`proxy.tlog.checkpoint.cosign_checkpoint`). So a rewind (a smaller tree) is refused with
409 then 400, a fork with 409 (same size) or 422 (larger size). The caller persists
:attr:`Outcome.state` *before* answering, atomically with the check (the spec's race: one lock
around check and write; :mod:`proxy.cli.witness`).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Mapping

from proxy.primitives import merkle
from proxy.tlog.checkpoint import (
    CheckpointError,
    checkpoint_signers,
    cosign_checkpoint,
    parse_checkpoint,
)

__all__ = ["MAX_PROOF_LINES", "SIZE_CONTENT_TYPE", "AddCheckpoint", "LogState", "Outcome", "Witness",
           "WitnessError", "format_add_checkpoint", "parse_add_checkpoint", "state_from_json", "state_to_json"]

MAX_PROOF_LINES = 63
"""tlog-witness: "The client MUST NOT send more than 63 consistency proof lines"."""
SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""Content type of a 409 answer carrying the witness's size (tlog-witness "add-checkpoint")."""
MAX_BODY_BYTES = 64 * 1024
"""Largest request body a witness reads (63 proof lines and a note with a few signatures fit easily)."""

_OLD = re.compile(r"old (0|[1-9][0-9]{0,18})")


class WitnessError(ValueError):
    """A request the witness refuses: ``status`` (HTTP) and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed request: ``old_size`` (int), ``proof`` (32-byte hashes), ``note`` (the signed checkpoint text)."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str


@dataclass(frozen=True)
class LogState:
    """What the witness holds for one log: the latest cosigned ``size``, its ``root`` (32 bytes), the log-signed ``note``."""

    size: int
    root: bytes
    note: str


@dataclass(frozen=True)
class Outcome:
    """The answer to one request: HTTP ``status``, ``body`` text, ``content_type``.

    ``origin`` and ``state`` are set on 200 only: the new :class:`LogState` to persist before answering.
    """

    status: int
    body: str
    content_type: str = "text/plain"
    origin: str | None = None
    state: LogState | None = None


def format_add_checkpoint(old_size: int, proof: list[bytes] | tuple[bytes, ...], note: str) -> str:
    """The ``add-checkpoint`` request body: ``old N``, one base64 line per proof hash, a blank line, ``note``."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode("ascii") for h in proof)]
    return "".join(line + "\n" for line in lines) + "\n" + note


def parse_add_checkpoint(body: bytes | str) -> AddCheckpoint:
    """Parse an ``add-checkpoint`` body (tlog-witness "add-checkpoint").

    Raises :class:`WitnessError` (400) for a body that is not UTF-8, an
    ``old`` line that is not canonical decimal, a proof line that is not
    base64 of 32 bytes, more than 63 proof lines, a missing blank line or a
    checkpoint that does not parse.
    """
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError:
        raise WitnessError(400, "the body is not UTF-8") from None
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise WitnessError(400, "no blank line between the proof and the checkpoint")
    first, *proof_lines = head.split("\n")
    match = _OLD.fullmatch(first)
    if match is None:
        raise WitnessError(400, "the first line must be 'old <size>' (decimal, no leading zeroes)")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise WitnessError(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for number, line in enumerate(proof_lines, start=1):
        try:
            digest = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            digest = b""
        if len(digest) != merkle.HASH_SIZE:
            raise WitnessError(400, f"proof line {number} is not the base64 of a 32-byte hash")
        proof.append(digest)
    try:
        parse_checkpoint(note)
    except CheckpointError as exc:
        raise WitnessError(400, f"bad checkpoint: {exc}") from None
    return AddCheckpoint(int(match.group(1)), tuple(proof), note)


class Witness:
    """A cosigner: its ``name`` and ``signer``, and the logs it witnesses (``{origin: {key_id: 32-byte key}}``).

    ``signer``: a :class:`proxy.receipts.signing.Signer` (its own key, never a log's: tlog-cosignature
    "MUST use distinct public keys for each cosigner").
    """

    def __init__(self, name: str, signer: Any, logs: Mapping[str, Mapping[str, bytes]]) -> None:
        """Configure the witness; nothing is checked against a state yet."""
        self.name = name
        self.signer = signer
        self.logs = {origin: dict(keys) for origin, keys in logs.items()}

    def add_checkpoint(self, body: bytes | str, states: Mapping[str, LogState], now: int) -> Outcome:
        """Answer one ``add-checkpoint`` request against ``states`` (origin → latest cosigned); ``now``: POSIX s.

        Pure: returns the :class:`Outcome` (on 200 with the state to persist); never raises.
        """
        try:
            request = parse_add_checkpoint(body)
            return self._check(request, states, now)
        except WitnessError as exc:
            return Outcome(exc.status, f"{exc}\n")

    def _check(self, request: AddCheckpoint, states: Mapping[str, LogState], now: int) -> Outcome:
        checkpoint = parse_checkpoint(request.note)
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            raise WitnessError(404, f"unknown log origin {checkpoint.origin!r}")
        if not checkpoint_signers(request.note, keys):
            raise WitnessError(403, "no signature by a trusted key of the log")
        if request.old_size > checkpoint.tree_size:
            raise WitnessError(400, f"old size {request.old_size} exceeds the checkpoint size {checkpoint.tree_size}")
        held = states.get(checkpoint.origin)
        held_size = 0 if held is None else held.size
        if request.old_size != held_size:
            return Outcome(409, f"{held_size}\n", SIZE_CONTENT_TYPE)
        if held is None or held_size == 0:
            if request.proof:
                raise WitnessError(422, "the consistency proof must be empty when the old size is 0")
        elif held_size == checkpoint.tree_size:
            if held.root != checkpoint.root_hash:
                return Outcome(409, f"{held_size}\n", SIZE_CONTENT_TYPE)  # same size, another root: a fork
            if request.proof:
                raise WitnessError(422, "the consistency proof must be empty between equal sizes")
        elif not merkle.verify_consistency_path(held_size, checkpoint.tree_size, held.root, checkpoint.root_hash,
                                                list(request.proof)):
            raise WitnessError(422, f"the consistency proof from {held_size} to {checkpoint.tree_size} does not "
                               "verify (RFC 9162 §2.1.4.2)")
        line = cosign_checkpoint(request.note, self.signer, self.name, now)
        state = LogState(checkpoint.tree_size, checkpoint.root_hash, request.note)
        return Outcome(200, line, "text/plain", checkpoint.origin, state)


def state_to_json(states: Mapping[str, LogState]) -> dict[str, Any]:
    """The state file document: ``{"version": 1, "logs": {origin: {"size", "root" (base64), "checkpoint"}}}``."""
    return {"version": 1, "logs": {origin: {"size": s.size, "root": base64.b64encode(s.root).decode("ascii"),
                                            "checkpoint": s.note} for origin, s in sorted(states.items())}}


def state_from_json(document: Any) -> dict[str, LogState]:
    """Parse a state file document (:func:`state_to_json`). Raises ``ValueError`` naming what is wrong."""
    if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("logs"), dict):
        raise ValueError("expected {\"version\": 1, \"logs\": {...}}")
    states = {}
    for origin, entry in document["logs"].items():
        try:
            checkpoint = parse_checkpoint(entry["checkpoint"])
            root = base64.b64decode(entry["root"], validate=True)
        except (KeyError, TypeError, binascii.Error, CheckpointError) as exc:
            raise ValueError(f"log {origin!r}: {exc}") from None
        if checkpoint.origin != origin or checkpoint.tree_size != entry.get("size") or checkpoint.root_hash != root:
            raise ValueError(f"log {origin!r}: size and root do not match the stored checkpoint")
        states[origin] = LogState(checkpoint.tree_size, root, entry["checkpoint"])
    return states
