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
import re
import sys
from types import ModuleType
from typing import Any

from proxy import __version__, offline  # noqa: F401  (offline settings before any model import)
from proxy.cli.common import UsageError, report_usage_error

__all__ = ["COMMANDS", "REDACTED_LOGGERS", "build_parser", "command_module", "main", "named_command", "redact_record"]

#: Top-level command → the module that implements it, in the order ``sonate --help`` lists them.
COMMANDS: dict[str, str] = {
    "serve": "proxy.cli.serve",
    "verify": "proxy.cli.verify",
    "keys": "proxy.cli.keys",
    "ledger": "proxy.cli.ledger",
    "report": "proxy.cli.report",
    "eval": "proxy.cli.evaluate",
    "train": "proxy.cli.train",
    "witness": "proxy.cli.witness",
    "models": "proxy.cli.models",
    "policy": "proxy.cli.policy",
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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``sonate`` argument parser: global flags, then every command of :data:`COMMANDS`, or
    command ``only`` alone (the others' modules, such as the evaluation and training code that
    ``sonate eval`` and ``sonate train`` import, are then not imported)."""
    parser = argparse.ArgumentParser(prog="sonate", description="Sonate Trust Proxy: guardrail gateway "
                                     "with signed, hash-chained trust receipts.")
    parser.add_argument("--version", action="version", version=f"sonate {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in [only] if only is not None else COMMANDS:
        _add_command(commands, name, command_module(name))
    return parser


def named_command(argv: list[str]) -> str | None:
    """The command of :data:`COMMANDS` that ``argv`` (``sonate``'s arguments) runs, when its first
    argument is one or follows ``--log-level LEVEL`` alone; None otherwise (help, ``--version``,
    an abbreviated flag or an unknown command: the whole parser answers those)."""
    rest = list(argv)
    if rest[:1] == ["--log-level"]:
        rest = rest[2:]
    elif rest[:1] and rest[0].startswith("--log-level="):
        rest = rest[1:]
    return rest[0] if rest and rest[0] in COMMANDS else None


#: Libraries whose DEBUG records can carry request or response bodies (prompts, answers, keys):
#: openai's "Request options: {...json_data...}", litellm's pre-formatted request dumps, httpx and
#: httpcore traces, aiohttp's client and server, presidio's analysed text. A logger and its
#: children (``openai._base_client``) match its prefix.
REDACTED_LOGGERS = ("openai", "litellm", "LiteLLM", "httpx", "httpcore", "aiohttp", "urllib3", "presidio")
_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa]")


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Strip the values from a DEBUG (below INFO) record of a :data:`REDACTED_LOGGERS` library, in place.

    A ``%``-style message keeps its template with every placeholder shown as ``[redacted]``
    (``Request options: [redacted]``); a pre-formatted message (no arguments, e.g. an f-string)
    becomes ``[redacted: N characters]``. Records of other loggers, or at INFO and above, are
    returned unchanged, and so is the empty record ``logging.makeLogRecord`` has the factory make
    (level and name None) before it fills the record in. Returns ``record``.
    """
    if not isinstance(record.levelno, int) or not isinstance(record.name, str):
        return record
    if record.levelno >= logging.INFO or not record.name.startswith(REDACTED_LOGGERS):
        return record
    message = str(record.msg)
    if record.args:
        record.msg = _PLACEHOLDER.sub("[redacted]", message).replace("%%", "%")
    else:
        record.msg = f"[redacted: {len(message)} characters]"
    record.args = None
    record.exc_info, record.exc_text, record.stack_info = None, None, None
    return record


def _install_redaction() -> None:
    """Redact library DEBUG records (:func:`redact_record`) as they are created.

    A record factory rather than a handler or logger filter: a filter on a handler covers only
    that handler (litellm adds its own), and a filter on a logger does not apply to records of
    its children (Python's logging docs, "Filter Objects"). Idempotent.
    """
    factory = logging.getLogRecordFactory()
    if getattr(factory, "sonate_redacts", False):
        return

    def make_record(*args, **kwargs) -> logging.LogRecord:
        return redact_record(factory(*args, **kwargs))

    make_record.sonate_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_record)


def _configure_logging(level: str) -> None:
    """Root logging at ``level``, noisy libraries floored, library DEBUG bodies redacted."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, floor in _NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(floor)
    _install_redaction()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sonate`` console script; returns the process exit code (0, 1 or 2).

    ``argv`` defaults to ``sys.argv[1:]``. Usage, configuration and key file errors are
    printed as ``sonate: <message>`` on stderr and give 2; argparse errors exit 2 itself.
    """
    from proxy.config import ConfigError
    from proxy.receipts.signing import KeyFileError

    args = build_parser(named_command(sys.argv[1:] if argv is None else argv)).parse_args(argv)
    _configure_logging(args.log_level)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        return report_usage_error(f"configuration error:\n{exc}")
    except (UsageError, KeyFileError) as exc:
        return report_usage_error(exc)


if __name__ == "__main__":
    raise SystemExit(main())
