"""What every ``sonate`` command module shares: the usage error and the exit codes.

A command module exposes ``add_arguments(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int``; it raises :class:`UsageError` for anything the user
can fix (a missing file, bad configuration, a wrong flag combination) and :func:`proxy.cli.main`
prints it as ``sonate: <message>`` without a traceback and exits with :data:`EXIT_USAGE`.
"""

from __future__ import annotations

#: Exit codes of every ``sonate`` command.
EXIT_OK = 0
#: A check failed (``sonate verify`` found a bad receipt, an evaluation target was missed with --strict).
EXIT_CHECK_FAILED = 1
#: Usage or configuration error: the message names the file, the key and what was expected.
EXIT_USAGE = 2


class UsageError(Exception):
    """A user-fixable error of a ``sonate`` command; the message is printed as is (no traceback)."""
