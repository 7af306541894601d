"""The ``sonate`` command: one parser built from the table :data:`COMMANDS`.

Each top-level command lives in its own module (the contract is in :mod:`proxy.cli.common`):
a leaf module exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; a group
module (``sonate ledger reindex``) exposes ``HELP`` and ``SUBCOMMANDS``. Modules import their
heavy dependencies inside ``run``, so building the parser loads none of them.

Exit codes: 0 success, 1 a check failed, 2 usage or configuration error: a
:class:`~proxy.cli.common.UsageError`, ``ConfigError`` or ``KeyFileError`` is printed as
``sonate: <message>`` (the message names the file, the key and what was expected; no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import logging
from types import ModuleType
from typing import Any

from proxy import __version__, offline  # noqa: F401  (offline settings before any model import)
from proxy.cli.common import UsageError, report_usage_error

__all__ = ["COMMANDS", "build_parser", "command_module", "main"]

#: Top-level command → the module that implements it, in the order ``sonate --help`` lists them.
COMMANDS: dict[str, str] = {
    "serve": "proxy.cli.serve",
    "verify": "proxy.cli.verify",
    "keys": "proxy.cli.keys",
    "ledger": "proxy.cli.ledger",
    "report": "proxy.cli.report",
    "eval": "proxy.cli.evaluate",
    "train": "proxy.cli.train",
}

#: Loggers quieted to WARNING (or ERROR) whatever ``--log-level`` says.
_NOISY_LOGGERS = {"LiteLLM": logging.WARNING, "LiteLLM Router": logging.WARNING, "LiteLLM Proxy": logging.WARNING,
                  "httpx": logging.WARNING, "presidio-analyzer": logging.ERROR}  # per-language registry notices


def command_module(name: str) -> ModuleType:
    """The module of top-level command ``name`` (a key of :data:`COMMANDS`), imported on first use."""
    return importlib.import_module(COMMANDS[name])


def _add_command(commands: Any, name: str, module: ModuleType) -> None:
    """Register ``sonate <name>`` from a leaf module (``run``) or a group module (``SUBCOMMANDS``)."""
    parser = commands.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
    if not hasattr(module, "SUBCOMMANDS"):
        module.add_arguments(parser)
        parser.set_defaults(func=module.run)
        return
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    for sub_name, (sub_help, add_arguments, run) in module.SUBCOMMANDS.items():
        sub_parser = subcommands.add_parser(sub_name, help=sub_help, description=sub_help)
        add_arguments(sub_parser)
        sub_parser.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    """The ``sonate`` argument parser: global flags, then every command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="sonate", description="Sonate Trust Proxy: guardrail gateway "
                                     "with signed, hash-chained trust receipts.")
    parser.add_argument("--version", action="version", version=f"sonate {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        _add_command(commands, name, command_module(name))
    return parser


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, floor in _NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(floor)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sonate`` console script; returns the process exit code (0, 1 or 2).

    ``argv`` defaults to ``sys.argv[1:]``. Usage, configuration and key file errors are
    printed as ``sonate: <message>`` on stderr and give 2; argparse errors exit 2 itself.
    """
    from proxy.config import ConfigError
    from proxy.receipts.signing import KeyFileError

    args = build_parser().parse_args(argv)
    _configure_logging(args.log_level)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        return report_usage_error(f"configuration error:\n{exc}")
    except (UsageError, KeyFileError) as exc:
        return report_usage_error(exc)


if __name__ == "__main__":
    raise SystemExit(main())
