"""``sonate verify``: check trust receipts or a whole ledger against published keys.

Usage::

    sonate verify RECEIPT.json [--prev PREV.json] (--keys PATH | --keys-url URL)
    sonate verify --ledger URL [--from H] [--to H] (--keys PATH | --keys-url URL)

RECEIPT.json holds one receipt (or a JSON array: an ordered run); ``-``
reads stdin. Prints one line per failure (height, receipt, check, detail),
then a summary. Exit status: 0 all valid, 1 any failure, 2 usage or I/O error.
The rules are DESIGN.md, "Trust receipts" (see :mod:`proxy.receipts.verify`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from typing import Any, Sequence, TextIO

from .receipts.canonical import json_hash
from .receipts.signing import KeyFileError, load_public_keys
from .receipts.store import LedgerError, open_store
from .receipts.verify import Failure, verify_chain, verify_receipt, verify_store

__all__ = ["DESCRIPTION", "add_arguments", "main", "run"]

DESCRIPTION = "Check trust receipts, or a whole ledger, against published Ed25519 keys."


class UsageError(Exception):
    """A problem with the command line, a file or a URL (exit status 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sonate verify`` arguments to ``parser`` (the lead wires it into ``proxy.cli``)."""
    parser.add_argument("receipt", nargs="?", metavar="RECEIPT.json",
                        help="file with one receipt (or a JSON array of consecutive receipts); '-' = stdin")
    parser.add_argument("--prev", metavar="PREV.json", help="the receipt just before RECEIPT (checks the chain link)")
    parser.add_argument("--request", metavar="REQUEST.json",
                        help="the request body as sent (checks the receipt's inputs_hash)")
    parser.add_argument("--response", metavar="RESPONSE.json",
                        help="the response body as received (checks the receipt's outputs_hash)")
    parser.add_argument("--ledger", metavar="URL", help="verify a ledger: sqlite:///path.db or redis://host:port/db")
    parser.add_argument("--from", dest="from_height", type=int, default=0, metavar="H",
                        help="first ledger height to verify (default 0)")
    parser.add_argument("--to", dest="to_height", type=int, default=None, metavar="H",
                        help="last ledger height to verify, inclusive (default: the head)")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--keys", metavar="PATH", help="public keys: a GET /v1/keys JSON document or a signing key file")
    keys.add_argument("--keys-url", metavar="URL", help="fetch public keys from a proxy's GET /v1/keys")


def _load_keys(args: argparse.Namespace) -> dict[str, bytes]:
    if args.keys:
        document: Any = args.keys
    elif args.keys_url:
        try:
            with urllib.request.urlopen(args.keys_url, timeout=10) as response:
                document = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise UsageError(f"cannot fetch keys from {args.keys_url}: {exc}") from None
    else:
        raise UsageError("no public keys: pass --keys PATH or --keys-url URL")
    try:
        keys = load_public_keys(document)
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    if not keys:
        raise UsageError("the key document lists no keys")
    return keys


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _read_json(path: str, stdin: TextIO) -> Any:
    try:
        text = stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


async def _verify_ledger(url: str, keys: dict[str, bytes], start: int, end: int | None) -> tuple[int, list[Failure]]:
    store = open_store(url)
    try:
        return await verify_store(store, keys, start=start, end=end)
    finally:
        await store.close()


def _check(args: argparse.Namespace, stdin: TextIO) -> tuple[int, list[Failure], str]:
    if (args.receipt is None) == (args.ledger is None):
        raise UsageError("give either RECEIPT.json or --ledger URL")
    if args.ledger is not None and args.prev is not None:
        raise UsageError("--prev applies to RECEIPT.json, not to --ledger")
    if args.from_height < 0 or (args.to_height is not None and args.to_height < args.from_height):
        raise UsageError("--from must be >= 0 and --to >= --from")
    keys = _load_keys(args)
    if args.ledger is not None:
        end = None if args.to_height is None else args.to_height + 1
        try:
            count, failures = asyncio.run(_verify_ledger(args.ledger, keys, args.from_height, end))
        except (ValueError, LedgerError) as exc:
            raise UsageError(str(exc)) from None
        return count, failures, "ledger receipts"
    document = _read_json(args.receipt, stdin)
    previous = _read_json(args.prev, stdin) if args.prev else None
    if isinstance(document, list):
        if args.request or args.response:
            raise UsageError("--request/--response apply to a single receipt")
        return len(document), verify_chain(document, keys, previous=previous), "receipts"
    failures = verify_receipt(document, keys, previous=previous)
    for option, field in ((args.request, "inputs_hash"), (args.response, "outputs_hash")):
        if option:
            failures += _content_hash_failures(document, field, _read_json(option, stdin))
    return 1, failures, "receipt"


def _content_hash_failures(receipt: Any, field: str, content: Any) -> list[Failure]:
    """A Failure when ``receipt[field]`` is not the RFC 8785 SHA-256 of ``content`` (DESIGN.md)."""
    expected = json_hash(content)
    got = receipt.get(field) if isinstance(receipt, dict) else None
    if got == expected:
        return []
    height = receipt.get("ledger_height") if isinstance(receipt, dict) else None
    receipt_id = receipt.get("receipt_id") if isinstance(receipt, dict) else None
    return [Failure(height if isinstance(height, int) else None, receipt_id if isinstance(receipt_id, str) else None,
                    field, f"expected {expected} (hash of the given document) got {got}")]


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None,
        stdin: TextIO | None = None) -> int:
    """Execute ``sonate verify`` for parsed ``args``; return the exit status (0, 1 or 2).

    Failures go to stdout, one line each (``height N (rcpt_…): check: detail``),
    followed by a summary line; usage and I/O errors go to stderr as one
    line, without a traceback.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        count, failures, noun = _check(args, stdin or sys.stdin)
    except UsageError as exc:
        print(f"sonate verify: error: {exc}", file=err)
        return 2
    for failure in failures:
        print(failure, file=out)
    if failures:
        print(f"FAILED: {len(failures)} failure(s) in {count} {noun} checked", file=out)
        return 1
    print(f"OK: {count} {noun} verified", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m proxy.verify_cmd ...``."""
    parser = argparse.ArgumentParser(prog="sonate verify", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
