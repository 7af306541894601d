"""What every ``sonate`` command module shares: the command contract, the usage error and the exit codes.

The contract (:data:`proxy.cli.COMMANDS` maps each top-level command to its module):

- a *leaf* command module exposes ``HELP: str``, ``add_arguments(parser) -> None`` and
  ``run(args) -> int``;
- a *group* command module (``sonate ledger X``) exposes ``HELP: str`` and
  ``SUBCOMMANDS: dict[str, Subcommand]``, each ``(help, add_arguments, run)``.

A command raises :class:`UsageError` for anything the user can fix (a missing file, bad
configuration, a wrong flag combination); :func:`proxy.cli.main` prints it as
``sonate: <message>`` without a traceback and exits with :data:`EXIT_USAGE`. Heavy
dependencies (models, aiohttp, storage backends) are imported inside ``run`` so that
building the parser stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any, Callable, TextIO

__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_USAGE", "Subcommand", "UsageError", "fetch_key_document",
           "report_usage_error"]

#: Exit codes of every ``sonate`` command.
EXIT_OK = 0
#: A check failed (``sonate verify`` found a bad receipt, an evaluation target was missed with --strict).
EXIT_CHECK_FAILED = 1
#: Usage or configuration error: the message names the file, the key and what was expected.
EXIT_USAGE = 2

#: One subcommand of a group command module: ``(help, add_arguments, run)``.
Subcommand = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


class UsageError(Exception):
    """A user-fixable error of a ``sonate`` command; the message is printed as is (no traceback)."""


def report_usage_error(error: BaseException | str, *, prefix: str = "sonate", stream: TextIO | None = None) -> int:
    """Print ``<prefix>: <message>`` on ``stream`` (default: the current stderr); return :data:`EXIT_USAGE`."""
    print(f"{prefix}: {error}", file=stream or sys.stderr)
    return EXIT_USAGE


def fetch_key_document(url: str, *, timeout: float = 10.0) -> Any:
    """The JSON document at ``url`` (a proxy's ``GET /v1/keys``), parsed.

    Raises :class:`UsageError` naming the URL when it cannot be fetched within ``timeout``
    seconds or is not JSON.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UsageError(f"cannot fetch keys from {url}: {exc}") from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: the argument as an integer >= ``minimum`` (ArgumentTypeError otherwise)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return parse
