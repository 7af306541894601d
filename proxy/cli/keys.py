"""``sonate keys``: generate, rotate and list the Ed25519 receipt signing keys.

Usage::

    sonate keys generate [--config PATH | --key-file PATH [--keyring PATH]]
    sonate keys rotate   [--overlap-seconds S] [--config PATH | --key-file PATH [--keyring PATH]]
    sonate keys list     [--json] [--config PATH | --key-file PATH [--keyring PATH]]

Paths come from ``signing.key_file`` / ``signing.keyring_file`` of config.yaml
(``--config``, ``$SONATE_CONFIG`` or ./config.yaml) unless ``--key-file`` is
given. The files and the rotation rules are described in
:mod:`proxy.receipts.keyring` and README "Keys and rotation".
Exit status: 0 done, 2 usage, configuration or key file error (message, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]

DEFAULT_OVERLAP_SECONDS = 60.0


def _paths(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """(key file, keyring file or None for the default) from the flags or config.yaml."""
    from proxy.config import load_config

    if args.key_file:
        return Path(args.key_file), Path(args.keyring) if args.keyring else None
    if args.keyring:
        raise ValueError("--keyring needs --key-file (or set signing.keyring_file in config.yaml)")
    config = load_config(args.config)
    keyring = config.signing.keyring_file
    return config.path(config.signing.key_file), config.path(keyring) if keyring else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``generate | rotate | list`` subcommands of ``sonate keys`` to ``parser``."""
    sub = parser.add_subparsers(dest="keys_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="config.yaml whose signing section names the files "
                       "(default: $SONATE_CONFIG or ./config.yaml)")
        p.add_argument("--key-file", help="the private signing key file (overrides the config)")
        p.add_argument("--keyring", help="the public keyring file (default: <key file stem>.keyring.json)")

    generate = sub.add_parser("generate", help="create the first signing key (0600) and its keyring entry")
    common(generate)
    rotate = sub.add_parser("rotate", help="replace the active key; the old one stays published, retired")
    common(rotate)
    rotate.add_argument("--overlap-seconds", type=float, default=DEFAULT_OVERLAP_SECONDS,
                        help="the old key stays valid for receipts dated up to this long after the "
                        f"rotation (default {DEFAULT_OVERLAP_SECONDS:g}; use 0 when the old key is compromised)")
    listing = sub.add_parser("list", help="show every published key with its validity window")
    common(listing)
    listing.add_argument("--json", action="store_true", help="print the GET /v1/keys document instead of a table")


def _table(entries: list[dict]) -> str:
    rows = [("KEY ID", "STATUS", "NOT BEFORE", "NOT AFTER")]
    rows += [(e["key_id"], e["status"], e.get("not_before") or "-", e.get("not_after") or "-") for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def run(args: argparse.Namespace) -> int:
    """Run ``sonate keys <command>``; return the exit status (0 done, 2 error)."""
    from proxy.config import ConfigError
    from proxy.receipts.keyring import Keyring, generate_key, rotate_key
    from proxy.receipts.signing import KeyFileError

    try:
        key_file, keyring_file = _paths(args)
        if args.keys_command == "generate":
            signer = generate_key(key_file, keyring_file)
            print(f"generated {signer.key_id} in {key_file} (mode 0600)")
        elif args.keys_command == "rotate":
            if args.overlap_seconds < 0:
                raise ValueError("--overlap-seconds must be >= 0")
            old, new = rotate_key(key_file, keyring_file, overlap_seconds=args.overlap_seconds)
            entries = Keyring(key_file, keyring_file).load().entries()
            retired = next(e for e in entries if e["key_id"] == old.key_id)
            print(f"rotated: {new.key_id} now signs (key file {key_file});\n"
                  f"{old.key_id} retired: it verifies receipts dated before {retired['not_after']}.\n"
                  "Running proxies pick up the new key within a second; GET /v1/keys lists both.")
        else:
            if not key_file.exists():
                raise KeyFileError(f"{key_file}: no signing key yet; run `sonate keys generate`")
            entries = Keyring(key_file, keyring_file).load().entries()
            print(json.dumps({"keys": entries}, indent=2) if args.json else _table(entries))
    except (ConfigError, KeyFileError, ValueError) as exc:
        print(f"sonate keys: {exc}", file=sys.stderr)
        return 2
    return 0
