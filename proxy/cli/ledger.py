"""``sonate ledger``: the transparency log's offline tools.

Usage::

    sonate ledger reindex    [--config PATH | --ledger URL] [--page N]
    sonate ledger checkpoint [--config PATH | --ledger URL] [--tree-size N] [--publish]
    sonate ledger bundle RECEIPT_ID [--config PATH | --ledger URL (--keys PATH | --keys-url URL)] [-o FILE]

``reindex`` backfills the Merkle tree of a ledger written without one (safe
while proxies run); ``checkpoint`` prints the latest (or a stored) signed
checkpoint, and with ``--publish`` (needs the signing key: ``--config``)
signs one for the current tree first; ``bundle`` writes the offline bundle
of a receipt (docs/receipts.md "Trust receipts and verification"). Without
``--config``/``--ledger``, ``$SONATE_CONFIG`` or ``./config.yaml`` is used.
Exit status: 0 done, 2 usage, configuration or ledger error (a
:class:`~proxy.cli.common.UsageError` printed by :func:`proxy.cli.main`, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, TextIO

from proxy.cli.common import EXIT_OK, Subcommand, UsageError, fetch_key_document

__all__ = ["HELP", "SUBCOMMANDS", "run_bundle", "run_checkpoint", "run_reindex"]

HELP = "transparency log: reindex | checkpoint | bundle"


@dataclass
class _Target:
    """The ledger a command works on: store URL, log origin and the config it came from (if any)."""

    url: str
    origin: str
    config: Any = None  # proxy.config.Config when --config (or the default config) was used

    def keyring(self) -> Any:
        """The keyring of the config (signing key + published keys); UsageError without a config."""
        from proxy.receipts.keyring import Keyring
        from proxy.receipts.signing import KeyFileError

        if self.config is None:
            raise UsageError("this needs the signing key: pass --config PATH (config.yaml) instead of --ledger")
        keyring_file = self.config.signing.keyring_file
        try:
            return Keyring(self.config.path(self.config.signing.key_file),
                           self.config.path(keyring_file) if keyring_file else None).load()
        except (KeyFileError, OSError) as exc:
            raise UsageError(str(exc)) from None


def _where_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config | --ledger`` and ``--origin``: which ledger (every ``sonate ledger`` subcommand)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", metavar="PATH", help="config.yaml (ledger.url, ledger.origin, signing key)")
    where.add_argument("--ledger", metavar="URL", help="ledger store URL: sqlite:///path.db or redis://host:port/db")
    parser.add_argument("--origin", help="log origin when using --ledger (default: sonate-trust-proxy/ledger)")
    parser.add_argument("--name", dest="ledger_name", metavar="NAME",
                        help="ledger NAME of a deployment with several ledgers (ledger.partition; default: the "
                             "default ledger); its origin is the base origin + /NAME")


def _reindex_arguments(parser: argparse.ArgumentParser) -> None:
    _where_arguments(parser)
    parser.add_argument("--page", type=int, default=1000, help="receipts per batch (default 1000)")


def _checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    _where_arguments(parser)
    parser.add_argument("--tree-size", type=int, metavar="N", help="print the checkpoint stored for size N")
    parser.add_argument("--publish", action="store_true",
                        help="first sign and store a checkpoint of the current tree (needs --config)")


def _bundle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("receipt_id", metavar="RECEIPT_ID")
    _where_arguments(parser)
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--keys", metavar="PATH", help="public keys to include (GET /v1/keys document or keyring file)")
    keys.add_argument("--keys-url", metavar="URL", help="fetch the public keys from a proxy's GET /v1/keys")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the bundle here (default: stdout)")


def _target(args: argparse.Namespace) -> _Target:
    """The ledger named by ``--ledger``, else by config.yaml (``--config``, $SONATE_CONFIG, ./config.yaml);
    with ``--name``, that deployment's ledger of the name (its store and origin,
    :func:`proxy.receipts.ledgers.ledger_store_url` / :func:`~proxy.receipts.ledgers.ledger_origin`).

    Raises ``ConfigError`` (shown by :func:`proxy.cli.main`) for an unusable config.yaml and
    UsageError for a bad ledger name.
    """
    from proxy.config import load_config
    from proxy.receipts.ledgers import DEFAULT_LEDGER, ledger_origin, ledger_store_url
    from proxy.receipts.tree import DEFAULT_ORIGIN

    if args.ledger:
        config, url, origin = None, args.ledger, args.origin or DEFAULT_ORIGIN
    else:
        config = load_config(args.config)
        url, origin = config.ledger_url, args.origin or config.ledger.origin
    name = getattr(args, "ledger_name", None) or DEFAULT_LEDGER
    try:
        return _Target(ledger_store_url(url, name), ledger_origin(origin, name), config)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _with_store(args: argparse.Namespace, work: Callable[[Any, _Target], Awaitable[int]]) -> int:
    """Open the target's store, run ``work(store, target)`` and close it; ledger errors become UsageError."""
    from proxy.primitives.merkle import MerkleError
    from proxy.storage import open_store
    from proxy.storage.base import LedgerError
    from proxy.tlog.checkpoint import CheckpointError

    target = _target(args)
    try:
        store = open_store(target.url, create=False)  # a reader: never a new, empty ledger
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    async def go() -> int:
        try:
            return await work(store, target)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except (LedgerError, MerkleError, CheckpointError) as exc:
        raise UsageError(str(exc)) from None


def run_reindex(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """``sonate ledger reindex``: backfill Merkle nodes with a tqdm progress bar (on stderr); exit 0."""
    from tqdm import tqdm

    from proxy.receipts.tree import reindex

    out = stdout or sys.stdout
    if args.page < 1:
        raise UsageError("--page must be >= 1")

    async def work(store: Any, target: _Target) -> int:
        start, head = await store.tree_size(), await store.head()
        top = 0 if head is None else head.height + 1
        with tqdm(total=max(top - start, 0), unit="receipt", desc="reindex", file=sys.stderr,
                  disable=top <= start) as bar:
            size = await reindex(store, page=args.page, progress=bar.update)
        print(f"Merkle tree: {size} leaves ({size - start} added)", file=out)
        return EXIT_OK

    return _with_store(args, work)


def run_checkpoint(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """``sonate ledger checkpoint``: print a signed checkpoint note (optionally publishing one); exit 0."""
    from proxy.receipts.tree import publish_checkpoint

    out = stdout or sys.stdout

    async def work(store: Any, target: _Target) -> int:
        if args.publish:
            signer = target.keyring().current()
            if await publish_checkpoint(store, signer, target.origin) is None:
                raise UsageError("the Merkle tree is empty: nothing to sign")
        if args.tree_size is not None:
            note = await store.get_checkpoint(args.tree_size)
            if note is None:
                raise UsageError(f"no checkpoint is stored for tree size {args.tree_size}")
        else:
            note = await store.latest_checkpoint()
            if note is None:
                raise UsageError("no checkpoint has been published yet (the proxy publishes them; or use --publish)")
        out.write(note)
        return EXIT_OK

    return _with_store(args, work)


def _key_entries(args: argparse.Namespace, target: _Target) -> tuple[list[dict[str, Any]], Any]:
    """(public key entries to include, signer or None) for a bundle: ``--keys``/``--keys-url`` or the config's."""
    from proxy.receipts.signing import KeyFileError, load_public_keys

    if not (args.keys or args.keys_url):
        keyring = target.keyring()
        return keyring.entries(), keyring.current()
    try:
        document = json.loads(Path(args.keys).read_text(encoding="utf-8")) if args.keys \
            else fetch_key_document(args.keys_url)
        load_public_keys(document)  # validates every entry
    except (OSError, ValueError, KeyFileError) as exc:
        raise UsageError(f"cannot load public keys: {exc}") from None
    entries = document.get("keys") if isinstance(document, dict) and "keys" in document else document
    entries = entries if isinstance(entries, list) else [entries]
    clean = [{k: v for k, v in e.items() if k != "private_key"} for e in entries]
    signer = target.keyring().current() if target.config is not None else None
    return clean, signer


def _write_bundle(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_bundle(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """``sonate ledger bundle RECEIPT_ID``: write the offline bundle JSON (stdout or ``-o FILE``); exit 0."""
    from proxy.receipts.tree import TreeError, bundle_for

    out = stdout or sys.stdout

    async def work(store: Any, target: _Target) -> int:
        receipt = await store.get_by_id(args.receipt_id)
        if receipt is None:
            raise UsageError(f"no receipt with id {args.receipt_id!r} in {target.url.split('?')[0]}")
        entries, signer = _key_entries(args, target)
        try:
            bundle = await bundle_for(store, receipt, entries, signer=signer, origin=target.origin)
        except TreeError as exc:
            raise UsageError(str(exc)) from None
        text = json.dumps(bundle, indent=2, ensure_ascii=False) + "\n"
        if not args.output:
            out.write(text)
            return EXIT_OK
        _write_bundle(args.output, text)
        print(f"bundle of {args.receipt_id} (leaf {receipt['ledger_height']}, tree size "
              f"{bundle['inclusion_proof']['tree_size']}) written to {args.output}", file=sys.stderr)
        return EXIT_OK

    return _with_store(args, work)


SUBCOMMANDS: dict[str, Subcommand] = {
    "reindex": ("backfill the Merkle tree of receipts stored without one", _reindex_arguments, run_reindex),
    "checkpoint": ("print the latest signed checkpoint (or publish one)", _checkpoint_arguments, run_checkpoint),
    "bundle": ("write the offline bundle (receipt + inclusion proof + checkpoint + keys)", _bundle_arguments,
               run_bundle),
}
