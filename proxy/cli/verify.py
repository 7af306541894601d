"""``sonate verify``: check trust receipts, bundles, proofs, checkpoints or a whole ledger.

Usage::

    sonate verify RECEIPT.json [--prev PREV.json] (--keys PATH | --keys-url URL)
    sonate verify BUNDLE.json [--keys PATH | --keys-url URL] [--origin NAME]
    sonate verify CHECKPOINT.txt (--keys PATH | --keys-url URL) [--origin NAME]
    sonate verify RECEIPT.json --inclusion PROOF.json --checkpoint CP.txt (--keys ... )
    sonate verify --consistency PROOF.json --checkpoint OLD.txt --checkpoint NEW.txt (--keys ...)
    sonate verify --ledger URL [--from H] [--to H] [--trusted-checkpoint CP.txt ...] (--keys PATH | --keys-url URL)
    sonate verify --ledger URL --case ESC_ID [--case ...] (--keys PATH | --keys-url URL)
    ... [--witness-key NAME+ID+KEY ...] [--witness-quorum N]   (any of the checkpoint forms above)

The positional file's kind is detected: a JSON object with ``bundle_version``
is an offline bundle (verified with its own keys unless ``--keys`` names the
trusted ones), a JSON array an ordered run of receipts, another object one
receipt, and text a signed checkpoint note. ``-`` reads stdin. ``--ledger``
over the whole ledger also audits the Merkle tree and every stored
checkpoint; ``--trusted-checkpoint`` proves the ledger still extends a
checkpoint saved earlier outside its database (catches a deleted tail or
rewritten history: :func:`proxy.receipts.tree.verify_against_trusted_checkpoint`).
``--case`` (repeatable) also follows an escalation case's receipts: its escalation receipt and
every reviewer step chained to it (:func:`proxy.server.flow.review.case_chain.verify_case`).
``--witness-key`` (a cosigner vkey, ``sonate witness --print-key``; repeatable) additionally
requires every checkpoint given (FILE, ``--checkpoint``, ``--trusted-checkpoint``) to carry
valid C2SP ``cosignature/v1`` lines of at least ``--witness-quorum`` of those witnesses (default:
all of them): :func:`proxy.tlog.checkpoint.verify_cosignatures`.
Prints one line per failure (where, check, detail), then a
summary. Exit status: 0 all valid, 1 any failure, 2 usage or I/O error. The
rules are docs/architecture.md, "Trust receipts" (see :mod:`proxy.receipts.verify`,
:mod:`proxy.receipts.bundle`, :mod:`proxy.receipts.proofs`,
:mod:`proxy.tlog.checkpoint`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Protocol, Sequence, TextIO

from proxy.cli.common import EXIT_CHECK_FAILED, EXIT_OK, UsageError, fetch_key_document, report_usage_error
from proxy.primitives.canonical import json_hash
from proxy.primitives.failure import Failure
from proxy.receipts.bundle import verify_bundle
from proxy.receipts.proofs import verify_consistency_proof, verify_inclusion_proof
from proxy.receipts.signing import KeyFileError, load_public_keys
from proxy.receipts.verify import verify_chain, verify_receipt, verify_store
from proxy.storage import open_store
from proxy.storage.base import LedgerError
from proxy.tlog.checkpoint import (
    COSIGNATURE_TYPE,
    CheckpointError,
    parse_verifier_key,
    verify_checkpoint,
    verify_cosignatures,
)

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "main", "run"]

HELP = "verify a receipt or a ledger range (hashes, signature, chain)"
DESCRIPTION = ("Check trust receipts, offline bundles, inclusion/consistency proofs, signed checkpoints "
               "or a whole ledger against published Ed25519 keys.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sonate verify`` arguments to ``parser``."""
    parser.add_argument("receipt", nargs="?", metavar="FILE",
                        help="a receipt, a JSON array of consecutive receipts, an offline bundle or a signed "
                             "checkpoint (kind detected); '-' = stdin")
    parser.add_argument("--prev", metavar="PREV.json", help="the receipt just before RECEIPT (checks the chain link)")
    parser.add_argument("--request", metavar="REQUEST.json",
                        help="the request body as sent (checks the receipt's inputs_hash)")
    parser.add_argument("--response", metavar="RESPONSE.json",
                        help="the response body as received (checks the receipt's outputs_hash)")
    parser.add_argument("--ledger", metavar="URL", help="verify a ledger: sqlite:///path.db or redis://host:port/db")
    parser.add_argument("--name", dest="ledger_names", action="append", metavar="NAME",
                        help="with --ledger: verify ledger NAME of a deployment with several ledgers "
                             "(ledger.partition; repeatable)")
    parser.add_argument("--all", dest="all_ledgers", action="store_true",
                        help="with --ledger: verify every ledger stored beside it (ledger.partition)")
    parser.add_argument("--case", action="append", metavar="ESC_ID",
                        help="with --ledger: also check that escalation case's receipts chain (repeatable)")
    parser.add_argument("--from", dest="from_height", type=int, default=0, metavar="H",
                        help="first ledger height to verify (default 0)")
    parser.add_argument("--to", dest="to_height", type=int, default=None, metavar="H",
                        help="last ledger height to verify, inclusive (default: the head)")
    parser.add_argument("--inclusion", metavar="PROOF.json",
                        help="inclusion proof (GET /v1/ledger/proof/inclusion) of the receipt FILE; "
                             "needs --checkpoint")
    parser.add_argument("--consistency", metavar="PROOF.json",
                        help="consistency proof (GET /v1/ledger/proof/consistency); needs two --checkpoint")
    parser.add_argument("--checkpoint", action="append", metavar="CP.txt",
                        help="signed checkpoint the proof is checked against (twice for --consistency: old, new)")
    parser.add_argument("--origin", metavar="NAME", help="expected log origin of checkpoints (default: any)")
    parser.add_argument("--trusted-checkpoint", action="append", metavar="CP.txt",
                        help="with --ledger: a signed checkpoint you saved earlier (GET /v1/ledger/checkpoint); "
                             "the ledger must still contain it (RFC 9162 consistency proof); repeatable")
    parser.add_argument("--witness-key", action="append", metavar="VKEY",
                        help="a witness's cosigner key <name>+<hex key ID>+<base64(0x04 ‖ key)> (sonate witness "
                             "--print-key); checkpoints must carry its C2SP cosignature; repeatable")
    parser.add_argument("--witness-quorum", type=int, metavar="N",
                        help="with --witness-key: how many of the witnesses must have cosigned (default: all)")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--keys", metavar="PATH", help="public keys: a GET /v1/keys JSON document or a signing key file")
    keys.add_argument("--keys-url", metavar="URL", help="fetch public keys from a proxy's GET /v1/keys")


def _load_keys(args: argparse.Namespace) -> dict[str, bytes]:
    if args.keys:
        document: Any = args.keys
    elif args.keys_url:
        document = fetch_key_document(args.keys_url)
    else:
        raise UsageError("no public keys: pass --keys PATH or --keys-url URL")
    try:
        keys = load_public_keys(document)
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    if not keys:
        raise UsageError("the key document lists no keys")
    return keys


def _witnesses(args: argparse.Namespace) -> tuple[dict[str, bytes], int]:
    """``({witness name: 32-byte key}, quorum)`` from ``--witness-key`` / ``--witness-quorum``; UsageError when bad."""
    witnesses: dict[str, bytes] = {}
    for vkey in args.witness_key or []:
        try:
            name, kind, key = parse_verifier_key(vkey)
        except CheckpointError as exc:
            raise UsageError(f"--witness-key: {exc}") from None
        if kind != COSIGNATURE_TYPE:
            raise UsageError(f"--witness-key {name}: not a cosigner key (type 0x04); use `sonate witness --print-key`")
        witnesses[name] = key
    quorum = len(witnesses) if args.witness_quorum is None else args.witness_quorum
    if args.witness_quorum is not None and not 1 <= quorum <= len(witnesses):
        raise UsageError(f"--witness-quorum must be between 1 and the number of --witness-key ({len(witnesses)})")
    return witnesses, quorum


def _cosignature_failures(notes: Sequence[str], args: argparse.Namespace) -> list[Failure]:
    """With ``--witness-key``: the failures of each checkpoint note's witness cosignatures (none without)."""
    witnesses, quorum = _witnesses(args)
    if not witnesses:
        return []
    return [failure for note in notes for failure in verify_cosignatures(note, witnesses, quorum)]


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _read_source(path: str, stdin: _Readable) -> str:
    """The text of ``path`` (``-`` = stdin); UsageError when unreadable or not UTF-8."""
    try:
        if path == "-":
            return stdin.read()
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None


def _read_json(path: str, stdin: _Readable) -> Any:
    """Parsed JSON of ``path`` (duplicate members rejected); UsageError otherwise."""
    try:
        return json.loads(_read_source(path, stdin), object_pairs_hook=_reject_duplicate_keys)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None


class _Readable(Protocol):
    """A text source read whole: stdin, or :class:`_RereadableStdin`."""

    def read(self) -> str:
        """The whole text."""
        ...


class _RereadableStdin:
    """stdin read once; every ``read()`` returns the whole text (several arguments may be ``-``)."""

    def __init__(self, stream: _Readable) -> None:
        self._stream = stream
        self._text: str | None = None

    def read(self) -> str:
        if self._text is None:
            self._text = self._stream.read()
        return self._text


def _read_any(path: str, stdin: _Readable) -> Any:
    """Parsed JSON, or the text itself when it is a signed note (a checkpoint); UsageError otherwise."""
    text = _read_source(path, stdin)
    if "\n\n\u2014 " in text and not text.lstrip().startswith(("{", "[")):
        return text
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except ValueError as exc:
        raise UsageError(f"{path} is neither JSON nor a signed checkpoint note: {exc}") from None


def _read_text(path: str, stdin: _Readable) -> str:
    document = _read_any(path, stdin)
    if not isinstance(document, str):
        raise UsageError(f"{path} is not a signed checkpoint note")
    return document


#: What one check returns: (items checked, failures found, the noun of the summary line).
_Result = tuple[int, list[Failure], str]
_ONE_TARGET = "give either RECEIPT.json or --ledger URL (the FILE may also be a bundle or a checkpoint)"


def _check(args: argparse.Namespace, stdin: _Readable) -> _Result:
    """Pick the check the arguments ask for (the FILE's kind is detected) and run it."""
    stdin = _RereadableStdin(stdin)  # the kind detection and the receipt checks may both read '-'
    if args.trusted_checkpoint and args.ledger is None:
        raise UsageError("--trusted-checkpoint goes with --ledger URL")
    if args.case and args.ledger is None:
        raise UsageError("--case goes with --ledger URL")
    if (getattr(args, "ledger_names", None) or getattr(args, "all_ledgers", False)) and args.ledger is None:
        raise UsageError("--name and --all go with --ledger URL")
    if args.consistency is not None:
        return _check_consistency(args, stdin)
    if args.receipt is None:
        if args.ledger is None and args.checkpoint and args.inclusion is None:
            return _check_checkpoint_files(args, stdin)
        if args.ledger is None:
            raise UsageError(_ONE_TARGET)
        return _check_ledger(args)
    if args.ledger is not None:
        raise UsageError(_ONE_TARGET)
    document = _read_any(args.receipt, stdin)
    if isinstance(document, str):
        return _check_checkpoint_note(document, args)
    if isinstance(document, dict) and "bundle_version" in document:
        return _check_bundle(document, args)
    if args.inclusion is not None:
        return _check_inclusion(document, args, stdin)
    if args.checkpoint:
        raise UsageError("--checkpoint goes with --inclusion or --consistency (or alone, to verify checkpoints)")
    return _check_receipts(document, args, stdin)


def _check_consistency(args: argparse.Namespace, stdin: _Readable) -> _Result:
    """``--consistency PROOF --checkpoint OLD --checkpoint NEW``: the log only grew between them."""
    if args.receipt is not None or args.ledger is not None or args.inclusion is not None:
        raise UsageError("--consistency takes no FILE, --ledger or --inclusion")
    if len(args.checkpoint or []) != 2:
        raise UsageError("--consistency needs two --checkpoint files: the older, then the newer")
    keys = _load_keys(args)
    proof = _read_json(args.consistency, stdin)
    old, new = (_read_text(path, stdin) for path in args.checkpoint)
    failures = verify_consistency_proof(proof, old, new, keys, args.origin) + _cosignature_failures([old, new], args)
    return 1, failures, "consistency proof"


def _check_checkpoint_files(args: argparse.Namespace, stdin: _Readable) -> _Result:
    """``--checkpoint CP.txt ...`` alone: each signed checkpoint note."""
    keys = _load_keys(args)
    notes = [_read_text(path, stdin) for path in args.checkpoint]
    failures = [failure for note in notes for failure in verify_checkpoint(note, keys, args.origin)]
    return len(args.checkpoint), failures + _cosignature_failures(notes, args), "checkpoint(s)"


def _check_checkpoint_note(note: str, args: argparse.Namespace) -> _Result:
    """FILE is a signed checkpoint note."""
    if args.inclusion or args.checkpoint or args.prev:
        raise UsageError("a checkpoint FILE takes none of --inclusion, --checkpoint, --prev")
    failures = verify_checkpoint(note, _load_keys(args), args.origin) + _cosignature_failures([note], args)
    return 1, failures, "checkpoint"


def _check_bundle(bundle: dict[str, Any], args: argparse.Namespace) -> _Result:
    """FILE is an offline bundle: verified with ``--keys`` when given, else with the keys it carries."""
    if args.inclusion or args.checkpoint or args.prev or args.request or args.response or args.witness_key:
        raise UsageError("a bundle is self-contained: it takes only --keys/--keys-url and --origin")
    trusted = _load_keys(args) if (args.keys or args.keys_url) else None
    noun = "bundle"
    if trusted is None:
        entries = bundle.get("public_keys")
        ids = sorted({e["key_id"] for e in entries if isinstance(e, dict) and isinstance(e.get("key_id"), str)}) \
            if isinstance(entries, list) else []
        noun = f"bundle (with the bundle's own keys {', '.join(ids) or 'none'}; pin them with --keys)"
    return 1, verify_bundle(bundle, trusted, args.origin), noun


def _check_inclusion(receipt: Any, args: argparse.Namespace, stdin: _Readable) -> _Result:
    """FILE is a receipt with ``--inclusion PROOF --checkpoint CP``: the receipt and its place in the log."""
    if len(args.checkpoint or []) != 1 or not isinstance(receipt, dict):
        raise UsageError("--inclusion needs one receipt FILE and one --checkpoint")
    keys = _load_keys(args)
    proof = _read_json(args.inclusion, stdin)
    checkpoint = _read_text(args.checkpoint[0], stdin)
    failures = verify_receipt(receipt, keys) + verify_inclusion_proof(proof, receipt, checkpoint, keys, args.origin)
    failures += _cosignature_failures([checkpoint], args)
    return 1, failures, "receipt with inclusion proof"


def _check_range(args: argparse.Namespace) -> None:
    if args.from_height < 0 or (args.to_height is not None and args.to_height < args.from_height):
        raise UsageError("--from must be >= 0 and --to >= --from")


def _check_ledger(args: argparse.Namespace) -> _Result:
    """``--ledger URL [--from H] [--to H]``: every stored receipt in the range (and the tree when whole)."""
    if args.prev is not None:
        raise UsageError("--prev applies to RECEIPT.json, not to --ledger")
    _check_range(args)
    keys = _load_keys(args)
    trusted = [_read_text(path, sys.stdin) for path in args.trusted_checkpoint or []]
    if args.witness_key and not trusted:
        raise UsageError("--witness-key with --ledger checks the --trusted-checkpoint files: pass one")
    end = None if args.to_height is None else args.to_height + 1
    if getattr(args, "ledger_names", None) or getattr(args, "all_ledgers", False):
        try:
            count, failures = asyncio.run(_verify_ledgers(args, keys, end, trusted))
        except (ValueError, LedgerError) as exc:
            raise UsageError(str(exc)) from None
        return count, failures + _cosignature_failures(trusted, args), "ledger receipts"
    try:
        count, failures = asyncio.run(_verify_ledger(args.ledger, keys, args.from_height, end, args.origin, trusted,
                                                     args.case or ()))
    except (ValueError, LedgerError) as exc:
        raise UsageError(str(exc)) from None
    return count, failures + _cosignature_failures(trusted, args), "ledger receipts"


def _trusted_for(name: str, trusted: Sequence[str], origin: str | None) -> list[str]:
    """The ``--trusted-checkpoint`` notes of ledger ``name``: those whose origin is its origin
    (:func:`~proxy.receipts.ledgers.ledger_origin` of ``--origin``), or without ``--origin`` those
    whose origin ends in ``/<name>`` (any other: the default ledger's)."""
    from proxy.receipts.ledgers import DEFAULT_LEDGER, ledger_origin

    mine = []
    for note in trusted:
        first = note.split("\n", 1)[0]
        if origin is not None:
            owner = first == ledger_origin(origin, name)
        else:
            suffix = first.rsplit("/", 1)[-1] if "/" in first else None
            owner = suffix == name or (name == DEFAULT_LEDGER and suffix is None)
        if owner:
            mine.append(note)
    return mine


async def _verify_ledgers(args: argparse.Namespace, keys: dict[str, bytes], end: int | None,
                          trusted: Sequence[str]) -> tuple[int, list[Failure]]:
    """``--ledger URL --name NAME ... | --all``: each ledger as :func:`_verify_ledger` (its own origin,
    its trusted checkpoints) plus the check that its receipts name it; failures say which ledger."""
    from proxy.receipts.ledgers import discover_ledgers, ledger_origin, ledger_store_url

    names = await discover_ledgers(args.ledger) if args.all_ledgers else list(dict.fromkeys(args.ledger_names))
    total, failures = 0, []
    for name in names:
        origin = None if args.origin is None else ledger_origin(args.origin, name)
        count, found = await _verify_ledger(ledger_store_url(args.ledger, name), keys, args.from_height, end, origin,
                                            _trusted_for(name, trusted, args.origin), args.case or (), name=name)
        total += count
        failures += [_in_ledger(name, f) for f in found]
    return total, failures


def _in_ledger(name: str, failure: Failure) -> Failure:
    """``failure`` with its place prefixed by ``ledger NAME``."""
    place = failure.where
    if place is None:
        place = "height ?" if failure.height is None else f"height {failure.height}"
        if failure.receipt_id:
            place += f" ({failure.receipt_id})"
    return Failure(failure.height, failure.receipt_id, failure.check, failure.detail, where=f"ledger {name} {place}")


def _check_receipts(document: Any, args: argparse.Namespace, stdin: _Readable) -> _Result:
    """FILE is one receipt (optionally with ``--prev``, ``--request``, ``--response``) or a JSON array of them."""
    _check_range(args)
    if args.witness_key:
        raise UsageError("--witness-key applies to checkpoints (FILE, --checkpoint, --trusted-checkpoint), "
                         "not to receipts")
    keys = _load_keys(args)
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


async def _verify_ledger(url: str, keys: dict[str, bytes], start: int, end: int | None,
                         origin: str | None = None, trusted: Sequence[str] = (),
                         cases: Sequence[str] = (), name: str | None = None) -> tuple[int, list[Failure]]:
    from proxy.receipts.tree import verify_against_trusted_checkpoint

    store = open_store(url, create=False)  # a reader: never a new, empty ledger
    try:
        count, failures = await verify_store(store, keys, start=start, end=end, ledger=name)
        failures = failures + await _case_failures(store, cases)
        for note in trusted:
            failures = failures + await verify_against_trusted_checkpoint(store, note, keys, origin)
        if start == 0 and end is None:  # the whole ledger: its Merkle tree and checkpoints too
            from proxy.receipts.tree import verify_tree

            try:
                await store.tree_size()
            except NotImplementedError:
                return count, failures
            _, tree_failures = await verify_tree(store, keys, origin)
            failures = failures + tree_failures
        return count, failures
    finally:
        await store.close()


async def _case_failures(store: Any, cases: Sequence[str], page: int = 500) -> list[Failure]:
    """The :func:`proxy.server.flow.review.case_chain.verify_case` failures of ``cases`` over the whole ledger."""
    if not cases:
        return []
    from proxy.server.flow.review.case_chain import verify_case

    head = await store.head()
    receipts: list[dict[str, Any]] = []
    for start in range(0, 0 if head is None else head.height + 1, page):
        receipts += await store.range(start, min(start + page, head.height + 1))
    return [failure for case_id in cases for failure in verify_case(receipts, case_id)[1]]


def _content_hash_failures(receipt: Any, field: str, content: Any) -> list[Failure]:
    """A Failure when ``receipt[field]`` is not the RFC 8785 SHA-256 of ``content`` (docs/architecture.md)."""
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

    Failures go to ``stdout`` (default: sys.stdout), one line each (``height N (rcpt_…): check:
    detail``), followed by a summary line. A :class:`UsageError` (bad flags, unreadable file or
    URL) is printed on ``stderr`` as ``sonate verify: error: <message>`` and gives 2: the
    command reports on the streams it is given, also when run standalone (:func:`main`).
    """
    try:
        count, failures, noun = _check(args, stdin or sys.stdin)
    except UsageError as exc:
        return report_usage_error(exc, prefix="sonate verify: error", stream=stderr)
    if args.ledger and count == 0 and not failures:  # "OK: 0" proves nothing: say so
        print("sonate verify: warning: the ledger holds no receipt in the range: nothing was verified (a new "
              "ledger, or a mistyped URL or Redis namespace?)", file=stderr or sys.stderr)  # no URL: it may hold a password
    return _print_result(count, failures, noun, stdout or sys.stdout)


def _print_result(count: int, failures: list[Failure], noun: str, out: TextIO) -> int:
    """One line per failure, then the summary; the exit status (0 all valid, 1 any failure)."""
    for failure in failures:
        print(failure, file=out)
    if failures:
        print(f"FAILED: {len(failures)} failure(s) in {count} {noun} checked", file=out)
        return EXIT_CHECK_FAILED
    print(f"OK: {count} {noun} verified", file=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m proxy.cli.verify ...``."""
    parser = argparse.ArgumentParser(prog="sonate verify", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
