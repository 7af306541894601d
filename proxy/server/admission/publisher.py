"""Background publication of signed checkpoints (every N new entries or every T seconds) and their cosigning.

The server starts one :class:`CheckpointPublisher` per process (``proxy.server.http.routes.ledger``);
several processes may publish for one ledger: a checkpoint for a given size is stored once
(:meth:`LedgerStore.put_checkpoint` is idempotent) and Ed25519 signatures are deterministic,
so concurrent publishers of the same size agree byte for byte.

Each published checkpoint is submitted to the configured witnesses (``ledger.witnesses``) with
the C2SP tlog-witness ``add-checkpoint`` call (https://c2sp.org/tlog-witness): ``old <size the
witness holds>``, the RFC 9162 §2.1.4 consistency proof from that size, the note. A 409 with
``text/x.tlog.size`` teaches the publisher the witness's size and it retries once; every other
refusal (403/404/409 fork/422/400 rewind) is logged and the checkpoint stays without that
cosignature. A returned ``cosignature/v1`` line is verified against the witness's configured key
(:func:`proxy.tlog.checkpoint.verified_cosignatures`) before it is stored beside the checkpoint
(:meth:`LedgerStore.put_cosignature`); ``GET /v1/ledger/checkpoint`` serves the note with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from proxy.receipts.chain import Ledger
from proxy.receipts.tree import consistency_proof, publish_checkpoint
from proxy.storage.base import LedgerError
from proxy.tlog.checkpoint import (
    COSIGNATURE_TYPE,
    CheckpointError,
    parse_checkpoint,
    parse_verifier_key,
    verified_cosignatures,
)
from proxy.tlog.witness import SIZE_CONTENT_TYPE, format_add_checkpoint

__all__ = ["CheckpointPublisher", "WitnessClient", "witness_clients"]

log = logging.getLogger("sonate.checkpoints")


@dataclass
class WitnessClient:
    """One configured witness: cosigner ``name`` and 32-byte ``public_key``, submission prefix ``url``,
    ``timeout`` (seconds) and ``size``, the tree size it is believed to hold (learnt from 200 and 409 answers)."""

    name: str
    public_key: bytes
    url: str
    timeout: float
    size: int = 0


def witness_clients(configs: Sequence[Any]) -> list[WitnessClient]:
    """Witness clients from ``ledger.witnesses`` entries (``url``, ``key``, ``timeout_seconds``).

    Raises ``ValueError`` for a key that is not an Ed25519 cosigner vkey (type 0x04,
    C2SP tlog-cosignature) or a name configured twice.
    """
    clients: list[WitnessClient] = []
    for number, config in enumerate(configs):
        try:
            name, kind, key = parse_verifier_key(config.key)
        except CheckpointError as exc:
            raise ValueError(f"ledger.witnesses.{number}.key: {exc}") from None
        if kind != COSIGNATURE_TYPE:
            raise ValueError(f"ledger.witnesses.{number}.key: not a cosigner key (type 0x04); "
                             "use `sonate witness --print-key`")
        if any(c.name == name for c in clients):
            raise ValueError(f"ledger.witnesses.{number}.key: witness {name!r} is configured twice")
        clients.append(WitnessClient(name, key, config.url.rstrip("/"), float(config.timeout_seconds)))
    return clients


class CheckpointPublisher:
    """Publishes a checkpoint of ``ledger``'s stored tree when it grew by ``every_entries`` or ``interval_s`` passed.

    ``ledger``: the process's :class:`Ledger` (its current signer at publish
    time — ``signer_source()`` when set, else ``signer`` — signs, so a key
    rotation takes effect on the next checkpoint);
    ``origin``: the log origin / key name; ``on_publish(tree_size)`` is
    called after each checkpoint this process stored or found stored.
    Appends by this process wake it early (a ledger listener); appends by
    other processes are seen at the next interval. Store outages are logged
    and retried at the next wake-up; they never stop the task.
    """

    def __init__(self, ledger: Ledger, origin: str, every_entries: int, interval_s: float,
                 on_publish: Callable[[int], None] | None = None, witnesses: Sequence[Any] = ()) -> None:
        """Configure; nothing runs until :meth:`start`.

        ``witnesses``: ``ledger.witnesses`` entries (see :func:`witness_clients`). Raises
        ``ValueError`` for non-positive limits or a bad witness key.
        """
        if every_entries < 1 or interval_s <= 0:
            raise ValueError("every_entries must be >= 1 and interval_s > 0")
        self.ledger = ledger
        self.origin = origin
        self.every_entries = every_entries
        self.interval_s = interval_s
        self.on_publish = on_publish
        self.published_size = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_error = 0.0
        self.witnesses = witness_clients(witnesses)
        self._session: Any = None

    def _on_append(self, size: int) -> None:
        if size - self.published_size >= self.every_entries:
            self._wake.set()

    async def publish_now(self) -> str | None:
        """Publish a checkpoint of the current stored tree if it grew; return the note (None: nothing new).

        Raises ``LedgerError`` if the store is unavailable.
        """
        size = await self.ledger.store.tree_size()
        if size <= self.published_size:
            return None
        source = getattr(self.ledger, "signer_source", None)
        signer = source() if source is not None else self.ledger.signer
        note = await publish_checkpoint(self.ledger.store, signer, self.origin, size)
        self.published_size = size
        if self.on_publish is not None:
            self.on_publish(size)
        if note is not None:
            await self.cosign(note)
        return note

    async def cosign(self, note: str) -> list[str]:
        """Submit ``note`` to every witness; store and return the verified cosignature lines obtained.

        A witness that is down, slow or refuses is logged and skipped. Raises ``LedgerError``
        when the store is unavailable (for the proof or to store a line).
        """
        import aiohttp

        size = parse_checkpoint(note).tree_size
        lines = []
        for witness in self.witnesses:
            try:
                line = await self._submit(witness, note, size)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.warning("witness %s (%s) unreachable: %s", witness.name, witness.url, exc)
                continue
            if line is not None:
                await self.ledger.store.put_cosignature(size, witness.name, line)
                lines.append(line)
        return lines

    async def _submit(self, witness: WitnessClient, note: str, size: int) -> str | None:
        """One add-checkpoint exchange (a second after a 409 naming another size); the verified line or None."""
        for _ in range(2):
            if witness.size > size:
                log.error("witness %s holds a checkpoint of tree size %d, larger than this one (%d): the ledger "
                          "was rewound or truncated; not cosigned", witness.name, witness.size, size)
                return None
            proof = await consistency_proof(self.ledger.store, witness.size, size) if 0 < witness.size < size else []
            status, content_type, text = await self._post(witness, format_add_checkpoint(witness.size, proof, note))
            if status == 200:
                line = _verified_line(note, text, witness)
                if line is None:
                    log.error("witness %s answered 200 without a valid cosignature by its configured key", witness.name)
                else:
                    witness.size = size
                return line
            held = text.strip()
            if status == 409 and content_type == SIZE_CONTENT_TYPE and held.isascii() and held.isdigit() \
                    and int(held) != witness.size:
                witness.size = int(held)
                continue
            log.error("witness %s refused checkpoint %d (old %d): HTTP %d %s", witness.name, size, witness.size,
                      status, text.strip()[:200])
            return None
        return None

    async def _post(self, witness: WitnessClient, body: str) -> tuple[int, str, str]:
        """POST ``body`` to ``<url>/add-checkpoint``; return (status, content type, text)."""
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=witness.timeout)
        async with self._session.post(witness.url + "/add-checkpoint", data=body.encode("utf-8"), timeout=timeout,
                                      headers={"Content-Type": "text/plain; charset=utf-8"}) as response:
            text = await response.text(errors="replace")
            return response.status, response.content_type, text

    async def _run(self) -> None:
        try:
            latest = await self.ledger.store.latest_checkpoint()
            if latest is not None:
                self.published_size = parse_checkpoint(latest).tree_size
        except (LedgerError, CheckpointError) as exc:
            log.warning("cannot read the latest checkpoint: %s", exc)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            self._wake.clear()
            try:
                await self.publish_now()
            except LedgerError as exc:
                if time.monotonic() - self._last_error > 60:  # one warning a minute while the store is down
                    log.warning("checkpoint not published: %s", exc)
                    self._last_error = time.monotonic()
            except Exception:  # keep publishing after an unexpected error; it is logged
                log.exception("checkpoint publication failed")

    def start(self) -> None:
        """Start the background task in the running loop and listen to the ledger's appends."""
        if self._task is None:
            self.ledger.listeners.append(self._on_append)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sonate-checkpoints")

    async def stop(self) -> None:
        """Stop the task and close the witness HTTP session (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(ValueError):
                self.ledger.listeners.remove(self._on_append)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None


def _verified_line(note: str, text: str, witness: WitnessClient) -> str | None:
    """The line of a witness's 200 answer that is a valid cosignature of ``note`` by ``witness``, or None."""
    for line in text.splitlines():
        if not line.startswith(f"\u2014 {witness.name} "):
            continue
        try:
            valid, _ = verified_cosignatures(note + line + "\n", {witness.name: witness.public_key})
        except CheckpointError:
            continue
        if valid:
            return line + "\n"
    return None
