"""``sonate witness``: a C2SP tlog-witness that cosigns the checkpoints of the logs it is given.

Usage::

    sonate witness --name witness.example/w1 (--log ORIGIN+KEYID+KEY ... | --log-keys PATH|URL [--origin NAME])
                   [--key-file var/witness-key.json] [--state var/witness-state.json]
                   [--host 127.0.0.1] [--port 8090]
    sonate witness --name witness.example/w1 --print-key     # the vkey to put in ledger.witnesses[].key

Serves ``POST /add-checkpoint`` (https://c2sp.org/tlog-witness, "add-checkpoint"; the rules are
:mod:`proxy.tlog.witness`). ``--log`` takes a log's signed-note verifier key (type 0x01, the key
name is the log origin; :func:`proxy.tlog.checkpoint.verifier_key`); several ``--log`` with one
origin trust several keys (a rotation). ``--log-keys`` takes a proxy's public keys instead (a
``GET /v1/keys`` document, a file or URL, read once at start) for the log ``--origin``. The witness's own Ed25519 key lives in ``--key-file`` (created 0600 on first start,
the format of the proxy's signing key). The latest cosigned checkpoint of each log is kept in
``--state``, rewritten atomically (:func:`proxy.files.atomic_write`) under one lock with the check
*before* the answer (the race the spec warns about). Losing the state file turns the witness into
a new one that trusts the next checkpoint it sees: retire its key instead.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from proxy.cli.common import EXIT_OK, UsageError

__all__ = ["HELP", "add_arguments", "build_app", "load_state", "run"]

HELP = "run a C2SP tlog-witness that cosigns consistent checkpoints (refuses forks and rewinds)"

log = logging.getLogger("sonate.witness")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sonate witness`` arguments to ``parser``."""
    parser.add_argument("--name", required=True, help="the cosigner name, e.g. witness.example/w1 (no spaces or '+')")
    parser.add_argument("--log", action="append", default=[], metavar="VKEY",
                        help="a log's verifier key <origin>+<hex key ID>+<base64(0x01 ‖ key)>; repeatable")
    parser.add_argument("--log-keys", metavar="PATH|URL",
                        help="a proxy's public keys (GET /v1/keys document or URL) trusted for the log --origin")
    parser.add_argument("--origin", default="sonate-trust-proxy/ledger",
                        help="the log origin the --log-keys sign (config ledger.origin; default %(default)s)")
    parser.add_argument("--key-file", default="var/witness-key.json",
                        help="the witness's Ed25519 key file (created 0600 if missing)")
    parser.add_argument("--state", default="var/witness-state.json",
                        help="where the latest cosigned checkpoint of each log is kept")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8090, help="listen port (default 8090)")
    parser.add_argument("--print-key", action="store_true",
                        help="print the witness's verifier key (for ledger.witnesses[].key) and exit")


def _log_keys(vkeys: list[str]) -> dict[str, dict[str, bytes]]:
    """``{origin: {vkey: 32-byte key}}`` from ``--log`` values; UsageError for a bad or non-log key."""
    from proxy.tlog.checkpoint import ED25519_SIGNATURE_TYPE, CheckpointError, parse_verifier_key

    logs: dict[str, dict[str, bytes]] = {}
    for vkey in vkeys:
        try:
            origin, kind, key = parse_verifier_key(vkey)
        except CheckpointError as exc:
            raise UsageError(f"--log {vkey!r}: {exc}") from None
        if kind != ED25519_SIGNATURE_TYPE:
            raise UsageError(f"--log {vkey!r}: not a log key (type 0x01)")
        logs.setdefault(origin, {})[vkey] = key
    return logs


def _proxy_keys(source: str) -> dict[str, bytes]:
    """``{key_id: 32-byte key}`` from a ``GET /v1/keys`` document at a path or URL; UsageError otherwise."""
    from proxy.cli.common import fetch_key_document
    from proxy.receipts.signing import KeyFileError, load_public_keys

    document: Any = fetch_key_document(source) if source.startswith(("http://", "https://")) else source
    try:
        keys = dict(load_public_keys(document))
    except KeyFileError as exc:
        raise UsageError(f"--log-keys: {exc}") from None
    if not keys:
        raise UsageError(f"--log-keys {source}: the document lists no keys")
    return keys


def load_state(path: Path) -> dict[str, Any]:
    """The witness state at ``path`` (``{origin: LogState}``; empty when the file does not exist).

    Raises :class:`UsageError` naming the file when it is unreadable or malformed: a witness
    must not start afresh over a damaged state (it would cosign a rewind).
    """
    from proxy.tlog.witness import state_from_json

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the witness state: {exc}") from None
    try:
        return state_from_json(json.loads(text))
    except ValueError as exc:
        raise UsageError(f"{path}: not a witness state file: {exc}") from None


def build_app(witness: Any, state_path: Path, states: dict[str, Any]) -> Any:
    """The aiohttp application serving ``POST /add-checkpoint`` for ``witness`` (a :class:`proxy.tlog.witness.Witness`).

    ``states`` is the loaded state; each 200 writes the whole state file atomically before answering.
    """
    import asyncio
    import time

    from aiohttp import web

    from proxy.files import atomic_write
    from proxy.tlog.witness import MAX_BODY_BYTES, state_to_json

    lock = asyncio.Lock()
    current = dict(states)

    async def add_checkpoint(request: web.Request) -> web.Response:
        body = await request.content.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            return web.Response(status=413, text=f"the body exceeds {MAX_BODY_BYTES} bytes\n")
        async with lock:  # check and persist atomically (tlog-witness "add-checkpoint")
            outcome = witness.add_checkpoint(body, current, int(time.time()))
            if outcome.state is not None:
                updated = {**current, outcome.origin: outcome.state}
                data = json.dumps(state_to_json(updated), indent=1).encode("utf-8")
                await asyncio.to_thread(atomic_write, state_path, data, 0o600)
                current.clear()
                current.update(updated)
        log.info("add-checkpoint from %s: %d %s", request.remote, outcome.status, outcome.body.strip()[:120])
        return web.Response(status=outcome.status, body=outcome.body.encode("utf-8"),
                            headers={"Content-Type": outcome.content_type})

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/add-checkpoint", add_checkpoint)
    return app


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (or print the key with ``--print-key``); return :data:`EXIT_OK`.

    Raises :class:`UsageError` for a bad name, ``--log`` key, key file or state file.
    """
    from proxy.receipts.signing import KeyFileError, load_or_create_signer
    from proxy.tlog.checkpoint import CheckpointError, cosigner_verifier_key
    from proxy.tlog.witness import Witness

    try:
        signer = load_or_create_signer(args.key_file)
        vkey = cosigner_verifier_key(args.name, signer.public_key)
    except (KeyFileError, CheckpointError) as exc:
        raise UsageError(str(exc)) from None
    if args.print_key:
        print(vkey)
        return EXIT_OK
    logs = _log_keys(args.log)
    if args.log_keys:
        logs.setdefault(args.origin, {}).update(_proxy_keys(args.log_keys))
    if not logs:
        raise UsageError("no log to witness: pass --log <origin>+<key ID>+<key> or --log-keys PATH|URL")
    state_path = Path(args.state)
    state_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    states = load_state(state_path)

    from aiohttp import web

    app = build_app(Witness(args.name, signer, logs), state_path, states)

    def announce(_: str) -> None:
        log.info("witness %s listening on http://%s:%s/add-checkpoint for %s", vkey, args.host, args.port,
                 ", ".join(sorted(logs)))

    web.run_app(app, host=args.host, port=args.port, print=announce, access_log=None)
    return EXIT_OK
