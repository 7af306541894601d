"""``sonate report``: the KPI report of an evaluation window, as JSON and self-contained HTML.

Usage::

    sonate report --from 2026-11-01 --to 2026-11-22T00:00:00Z \\
        [--config config.yaml | --ledger URL --policies DIR --keys KEYS.json] \\
        [--farh-results farh.json] [--pfi-results pfi.json] \\
        --out report.json [--html report.html] [--lvp-sample 1000] [--seed 0] [--resamples 1000]

``--from``/``--to`` are ISO 8601 (a date means midnight UTC; an offset is converted to UTC); the
window is ``[from, to)``. With ``--config`` the ledger URL, the policies directory and the
public signing key come from config.yaml; ``--ledger``, ``--policies`` and ``--keys`` override
them. The whole ledger is scanned (a progress bar on stderr). Both outputs are written
atomically (:func:`proxy.files.atomic_write`). Exit codes: 0 written, 2 usage, input or ledger
error (a :class:`~proxy.cli.common.UsageError`, printed without a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.cli.common import UsageError

__all__ = ["HELP", "add_arguments", "parse_instant", "run"]

HELP = "KPI report (FAR-A, TIS, FAR-H, PFI) of a window: JSON + HTML"
#: Receipts read from the store per range request.
_CHUNK = 2000
#: Permission of the report files: shareable documents, not secrets.
_REPORT_MODE = 0o644


def parse_instant(text: str, name: str) -> str:
    """An ISO 8601 date or date-time as RFC 3339 UTC with milliseconds (receipt ``ts`` form).

    A date alone is midnight UTC; a naive date-time is taken as UTC. Raises UsageError.
    """
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not an ISO 8601 date or date-time "
                         "(e.g. 2026-11-01 or 2026-11-01T00:00:00Z)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sonate report`` arguments to ``parser``."""
    parser.add_argument("--from", dest="start", required=True, metavar="ISO", help="window start (ISO 8601, UTC)")
    parser.add_argument("--to", dest="end", required=True, metavar="ISO", help="window end, exclusive (ISO 8601, UTC)")
    parser.add_argument("--config", metavar="PATH", help="config.yaml: ledger URL, policies, signing key")
    parser.add_argument("--ledger", metavar="URL", help="ledger URL (sqlite:///path or redis://...), overrides --config")
    parser.add_argument("--name", dest="ledger_names", action="append", metavar="NAME",
                        help="report on ledger NAME of a deployment with several ledgers (ledger.partition; "
                             "repeatable; default: the default ledger)")
    parser.add_argument("--all", dest="all_ledgers", action="store_true",
                        help="report on every ledger stored beside the ledger URL (ledger.partition)")
    parser.add_argument("--policies", metavar="DIR", help="policies directory (evidence_required, for AD)")
    parser.add_argument("--keys", metavar="PATH", help="public keys (GET /v1/keys JSON or a signing key file), for LVP")
    parser.add_argument("--farh-results", metavar="PATH", help="FAR-H result of `sonate eval hallucination`")
    parser.add_argument("--pfi-results", metavar="PATH", help="PFI result of `sonate eval fairness`")
    parser.add_argument("--out", required=True, metavar="PATH", help="report JSON to write")
    parser.add_argument("--html", metavar="PATH", help="self-contained HTML report to write")
    parser.add_argument("--lvp-sample", type=int, default=1000, help="receipts re-verified for LVP (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the LVP sample and the bootstrap (default 0)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples, >= 1000 (default 1000)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"{what} {path}: not valid JSON ({exc})") from None


def _sources(args: argparse.Namespace) -> tuple[str, Path, Any]:
    """(ledger URL, policies dir, public keys) from the arguments and config.yaml."""
    from proxy.config import ConfigError, load_config
    from proxy.receipts.signing import KeyFileError, load_public_keys

    config = None
    if args.config or not args.ledger:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            raise UsageError(f"configuration error (pass --config, or --ledger with --policies and --keys):\n{exc}") from None
    ledger: str = (args.ledger or config.ledger_url) if config else args.ledger  # no config: --ledger given
    policies = Path(args.policies) if args.policies else (config.path(config.policies) if config else None)
    if policies is None:
        raise UsageError("--policies DIR is needed with --ledger and no --config (for Audit Depth)")
    keys_source: Any = args.keys or (config.path(config.signing.key_file) if config else None)
    if keys_source is None:
        raise UsageError("--keys PATH is needed with --ledger and no --config (for LVP)")
    try:
        keys = load_public_keys(str(keys_source))
    except KeyFileError as exc:
        raise UsageError(f"public keys: {exc}") from None
    return ledger, policies, keys


async def _ledger_names(args: argparse.Namespace, url: str) -> list[str]:
    """The ledgers to report on: ``--all`` (every one stored), the ``--name`` ones, else the default."""
    from proxy.receipts.ledgers import DEFAULT_LEDGER, discover_ledgers
    from proxy.storage.base import LedgerError

    if args.all_ledgers:
        try:
            return await discover_ledgers(url)
        except (ValueError, LedgerError) as exc:
            raise UsageError(f"ledger {url.split('@')[-1]}: {exc}") from None
    return list(dict.fromkeys(args.ledger_names or [DEFAULT_LEDGER]))


async def _read_receipts(url: str, name: str, progress: bool) -> list[dict]:
    """Every receipt of ledger ``name`` of the deployment whose ledger URL is ``url``."""
    from tqdm import tqdm

    from proxy.receipts.ledgers import ledger_store_url
    from proxy.storage import open_store
    from proxy.storage.base import LedgerError

    try:
        store = open_store(ledger_store_url(url, name), create=False)  # a reader: never a new, empty ledger
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        head = await store.head()
        total = 0 if head is None else head.height + 1
        receipts: list[dict] = []
        with tqdm(total=total, unit="receipt", desc=f"scanning ledger {name}", disable=not progress,
                  file=sys.stderr) as bar:
            for lo in range(0, total, _CHUNK):
                chunk = await store.range(lo, min(lo + _CHUNK, total))
                receipts += chunk
                bar.update(len(chunk))
    except LedgerError as exc:
        raise UsageError(f"ledger {name} of {url.split('@')[-1]}: {exc}") from None
    finally:
        await store.close()
    return receipts


async def _read_store(url: str, names: list[str], progress: bool
                      ) -> tuple[list[dict], list[dict], list[dict], list[dict]]:
    """The receipts of the ledgers ``names``, then the review queue, the escalation cases and the
    conversation evaluations, which the deployment keeps beside its default ledger."""
    from proxy.evaluation.conversation.results import SERIES
    from proxy.storage import open_store
    from proxy.storage.base import LedgerError

    receipts = [r for name in names for r in await _read_receipts(url, name, progress)]
    try:
        store = open_store(url, create=False)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        items = await store.list_items("adjudications")
        cases = await store.list_items("escalations")
        evaluations = await store.list_results(SERIES)  # sonate eval conversation --ledger
    except LedgerError as exc:
        raise UsageError(f"ledger {url.split('@')[-1]}: {exc}") from None
    finally:
        await store.close()
    return receipts, items, cases, evaluations


def _build(args: argparse.Namespace) -> dict[str, Any]:
    from proxy.config import ConfigError
    from proxy.evaluation.kpi_inputs import InputError, check_farh, check_pfi
    from proxy.evaluation.kpi_report import ReportInputs, build_report
    from proxy.guardrails.schema import load_policies
    from proxy.receipts.receipt import utc_timestamp

    start, end = parse_instant(args.start, "--from"), parse_instant(args.end, "--to")
    if not start < end:
        raise UsageError(f"--from ({start}) must be before --to ({end})")
    if args.resamples < 1000:
        raise UsageError("--resamples must be at least 1000 (methodology: bootstrap of >= 1,000 resamples)")
    if args.lvp_sample < 1:
        raise UsageError("--lvp-sample must be at least 1")
    try:
        farh = check_farh(_read_json(args.farh_results, "--farh-results")) if args.farh_results else None
        pfi = check_pfi(_read_json(args.pfi_results, "--pfi-results")) if args.pfi_results else None
    except InputError as exc:
        raise UsageError(f"input file: {exc}") from None
    ledger, policies_dir, keys = _sources(args)
    try:
        policies = load_policies(policies_dir)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    progress = not args.no_progress and sys.stderr.isatty()
    names = asyncio.run(_ledger_names(args, ledger))
    receipts, items, cases, evaluations = asyncio.run(_read_store(ledger, names, progress))
    inputs = ReportInputs(
        receipts=receipts, review_items=items, cases=cases,
        evidence_required={p.id: list(p.evidence_required) for p in policies},
        public_keys=keys, start=start, end=end, generated_at=utc_timestamp(), farh=farh, pfi=pfi,
        lvp_sample=args.lvp_sample, seed=args.seed, resamples=args.resamples, evaluations=evaluations,
        sources={"ledger": ledger.split("@")[-1], "ledgers": names, "policies": str(policies_dir),
                 "receipts_scanned": len(receipts),
                 "farh_results": args.farh_results, "pfi_results": args.pfi_results})
    return build_report(inputs)


def _write(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, creating its directory; raises UsageError."""
    from proxy.files import atomic_write

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, text.encode("utf-8"), mode=_REPORT_MODE)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """Compute and write the report, print a one-line summary; returns 0. Raises UsageError."""
    from proxy.kpi.report_html import render_html

    report = _build(args)
    _write(args.out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if args.html:
        _write(args.html, render_html(report))
    far_a, tis = report["kpis"]["far_a"], report["kpis"]["tis"]
    print(f"N={report['disclosure']['n_interactions']} window {report['window']['start']} .. {report['window']['end']}: "
          f"FAR-A {far_a['overall']['display']} (normalized {far_a['normalized']['display']}), "
          f"TIS {tis['overall']['display']} (normalized {tis['normalized']['display']}) -> {args.out}"
          + (f", {args.html}" if args.html else ""))
    return 0
