"""``sonate models``: list, verify and fetch the pinned model files (proxy/guardrails/models.py).

Usage::

    sonate models list   [--manifest FILE] [--models-dir DIR]
    sonate models verify [ID ...] [--manifest FILE] [--models-dir DIR]
    sonate models fetch  ID [--manifest FILE] [--models-dir DIR] [--timeout S]

``fetch`` is the only command that downloads a model: each file is streamed to a temp file,
checked against its sha256 in the manifest and only then renamed into place; a file without
a pin is refused before anything is downloaded. The proxy itself never downloads.
Exit status: 0 ok, 1 ``verify`` found a missing, mismatched, unpinned or unexpected file,
2 usage error (unknown id, unreadable manifest, unpinned model for ``fetch``, a download that
does not match its pin).
"""

from __future__ import annotations

import argparse
import urllib.error
from pathlib import Path

from proxy.cli.common import EXIT_CHECK_FAILED, EXIT_OK, Subcommand, UsageError

__all__ = ["HELP", "SUBCOMMANDS"]

HELP = "list | verify | fetch the sha256-pinned model files"


def _where(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", type=Path, help="model manifest JSON (default: proxy/guardrails/models.json)")
    parser.add_argument("--models-dir", type=Path, help="where models live (default: $SONATE_MODELS_DIR or "
                        "~/.cache/sonate/models)")


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    _where(parser)
    parser.add_argument("ids", nargs="*", metavar="ID", help="model ids (default: every model in the manifest)")


def _fetch_arguments(parser: argparse.ArgumentParser) -> None:
    _where(parser)
    parser.add_argument("id", metavar="ID", help="a model id of the manifest")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per network read (default 60)")


def _specs(args: argparse.Namespace, ids: list[str]) -> list:
    """The manifest entries named by ``ids`` (all when empty). Raises UsageError for a bad manifest or id."""
    from proxy.guardrails.models import ModelError, load_manifest

    try:
        specs = load_manifest(args.manifest)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    unknown = [i for i in ids if i not in specs]
    if unknown:
        raise UsageError(f"unknown model {', '.join(unknown)} (in {args.manifest or 'the shipped manifest'}: "
                         f"{', '.join(sorted(specs)) or 'none'})")
    return [specs[i] for i in ids] if ids else list(specs.values())


def run_list(args: argparse.Namespace) -> int:
    """``sonate models list``: one line per file: model, path, state, pinned sha256."""
    from proxy.guardrails.models import model_status, models_dir

    root = models_dir(args.models_dir)
    print(f"models dir: {root}")
    for spec in _specs(args, []):
        print(f"{spec.id} ({spec.loader}): {spec.description}")
        pins = {f.path: f.sha256 for f in spec.files}
        for path, state in model_status(spec, root).items():
            print(f"  {state:<10} {path}  sha256:{pins.get(path) or '-'}")
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    """``sonate models verify``: 0 when every file of the named models matches its pin, else 1."""
    from proxy.guardrails.models import ModelError, models_dir, verify_model

    root, failed = models_dir(args.models_dir), 0
    for spec in _specs(args, args.ids):
        try:
            print(f"OK: {spec.id} ({len(spec.files)} file(s) in {verify_model(spec, root)})")
        except ModelError as exc:
            failed += 1
            print(f"FAIL: {exc}")
    return EXIT_CHECK_FAILED if failed else EXIT_OK


def run_fetch(args: argparse.Namespace) -> int:
    """``sonate models fetch ID``: download what is missing or mismatched, each file checked; then verify."""
    from proxy.guardrails.models import ModelError, fetch_model, models_dir, verify_model

    [spec] = _specs(args, [args.id])
    root = models_dir(args.models_dir)
    try:
        fetched = fetch_model(spec, root, timeout=args.timeout)
        directory = verify_model(spec, root)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"fetching {spec.id}: {exc}") from None
    print(f"{spec.id}: {len(fetched)} file(s) fetched, {len(spec.files)} verified in {directory}")
    return EXIT_OK


SUBCOMMANDS: dict[str, Subcommand] = {
    "list": ("list the manifest's models and the state of their files", _where, run_list),
    "verify": ("check model files against their pinned sha256 (exit 1 on any problem)", _verify_arguments,
               run_verify),
    "fetch": ("download a model's files, each checked against its pinned sha256", _fetch_arguments, run_fetch),
}
