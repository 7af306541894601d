"""``sonate keys``: generate, rotate and list the Ed25519 receipt signing keys.

Usage::

    sonate keys generate [--config PATH | --key-file PATH [--keyring PATH]]
    sonate keys rotate   [--overlap-seconds S] [--ledger URL] [--config PATH | --key-file PATH [--keyring PATH]]
    sonate keys list     [--json] [--config PATH | --key-file PATH [--keyring PATH]]

Paths come from ``signing.key_file`` / ``signing.keyring_file`` of config.yaml
(``--config``, ``$SONATE_CONFIG`` or ./config.yaml) unless ``--key-file`` is
given. The files and the rotation rules are described in
:mod:`proxy.receipts.keyring` and docs/receipts.md "Keys and rotation".
Exit status: 0 done, 2 usage, configuration or key file error (``ConfigError`` and
``KeyFileError`` reach :func:`proxy.cli.main`, which prints them without a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from proxy.cli.common import EXIT_OK, Subcommand, UsageError

__all__ = ["HELP", "SUBCOMMANDS"]

HELP = "generate | rotate | list the receipt signing keys"
DEFAULT_OVERLAP_SECONDS = 60.0


def _where_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every ``sonate keys`` subcommand takes: where the key and keyring files are."""
    parser.add_argument("--config", help="config.yaml whose signing section names the files "
                        "(default: $SONATE_CONFIG or ./config.yaml)")
    parser.add_argument("--key-file", help="the private signing key file (overrides the config)")
    parser.add_argument("--keyring", help="the public keyring file (default: <key file stem>.keyring.json)")


def _rotate_arguments(parser: argparse.ArgumentParser) -> None:
    _where_arguments(parser)
    parser.add_argument("--overlap-seconds", type=float, default=DEFAULT_OVERLAP_SECONDS,
                        help="the old key stays valid for receipts dated up to this long after the "
                        f"rotation (default {DEFAULT_OVERLAP_SECONDS:g}; use 0 when the old key is compromised)")
    parser.add_argument("--ledger", metavar="URL", help="the ledger whose size becomes the new key's "
                        "not_before_height (default: ledger.url of the config; none with --key-file)")


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    _where_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the GET /v1/keys document instead of a table")


def _paths(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """(key file, keyring file or None for the default) from the flags or config.yaml.

    Raises UsageError for ``--keyring`` without ``--key-file``, ConfigError for a bad config.
    """
    from proxy.config import load_config

    if args.key_file:
        return Path(args.key_file), Path(args.keyring) if args.keyring else None
    if args.keyring:
        raise UsageError("--keyring needs --key-file (or set signing.keyring_file in config.yaml)")
    return load_config(args.config).signing_paths


def run_generate(args: argparse.Namespace) -> int:
    """``sonate keys generate``: create the first signing key (mode 0600) and its keyring entry."""
    from proxy.receipts.keyring import generate_key

    key_file, keyring_file = _paths(args)
    signer = generate_key(key_file, keyring_file)
    print(f"generated {signer.key_id} in {key_file} (mode 0600)")
    return EXIT_OK


def run_rotate(args: argparse.Namespace) -> int:
    """``sonate keys rotate``: a new active key; the old one is retired after ``--overlap-seconds``."""
    from proxy.receipts.keyring import Keyring, rotate_key

    if args.overlap_seconds < 0:
        raise UsageError("--overlap-seconds must be >= 0")
    key_file, keyring_file = _paths(args)
    size = _ledger_size(args)  # read before the new key exists: no height below it can carry its signature
    old, new = rotate_key(key_file, keyring_file, overlap_seconds=args.overlap_seconds, ledger_size=size)
    entries = Keyring(key_file, keyring_file).load().entries()
    retired = next(e for e in entries if e["key_id"] == old.key_id)
    print(f"rotated: {new.key_id} now signs (key file {key_file});\n"
          f"{old.key_id} retired: it verifies receipts dated before {retired['not_after']}.\n"
          "Running proxies pick up the new key within a second; GET /v1/keys lists both.")
    print(f"{new.key_id} signs ledger heights from {size} on (not_before_height)" if size is not None else
          f"warning: no ledger read, so {new.key_id} has no not_before_height: receipts rewritten below the "
          "rotation will not be caught by the key window (pass --ledger URL or --config)", file=sys.stderr)
    return EXIT_OK


def _ledger_size(args: argparse.Namespace) -> int | None:
    """Head height + 1 of ``--ledger`` (else the config's ledger; None with ``--key-file``). UsageError if unreadable."""
    import asyncio

    from proxy.storage import open_store
    from proxy.storage.base import LedgerError

    url = args.ledger
    if url is None and not args.key_file:
        from proxy.config import load_config

        url = load_config(args.config).ledger_url
    if url is None:
        return None

    async def read() -> int:
        store = open_store(url)
        try:
            head = await store.head()
            return 0 if head is None else head.height + 1
        finally:
            await store.close()

    try:
        return asyncio.run(read())
    except (ValueError, LedgerError) as exc:
        raise UsageError(f"cannot read the ledger size for the new key's not_before_height: {exc}") from None


def run_list(args: argparse.Namespace) -> int:
    """``sonate keys list``: every published key with its validity window (a table, or JSON with --json)."""
    from proxy.receipts.keyring import Keyring
    from proxy.receipts.signing import KeyFileError

    key_file, keyring_file = _paths(args)
    if not key_file.exists():
        raise KeyFileError(f"{key_file}: no signing key yet; run `sonate keys generate`")
    entries = Keyring(key_file, keyring_file).load().entries()
    print(json.dumps({"keys": entries}, indent=2) if args.json else _table(entries))
    return EXIT_OK


def _table(entries: list[dict]) -> str:
    rows = [("KEY ID", "STATUS", "NOT BEFORE", "NOT AFTER")]
    rows += [(e["key_id"], e["status"], e.get("not_before") or "-", e.get("not_after") or "-") for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


SUBCOMMANDS: dict[str, Subcommand] = {
    "generate": ("create the first signing key (0600) and its keyring entry", _where_arguments, run_generate),
    "rotate": ("replace the active key; the old one stays published, retired", _rotate_arguments, run_rotate),
    "list": ("show every published key with its validity window", _list_arguments, run_list),
}
