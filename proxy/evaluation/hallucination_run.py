"""``sonate eval hallucination``: FAR-H of model outputs against the oracle set.

Two ways to get the outputs:

- ``--outputs FILE.jsonl``: one JSON object per line, ``{"output": str, "question": str?,
  "id": str?, "domain": str?, "ts": str?, "action": str?}``. ``question`` links the output
  to the oracle; ``action`` (the proxy's ``x-sonate-guardrail-action``) ``refuse`` or
  ``escalate`` marks a guardrail notice, not a model output: such lines are skipped.
- ``--proxy URL --api-key K --model M``: the oracle questions (``--limit N`` of them, in file
  order) are sent through a running proxy with the openai client; the domain of each answer
  is the receipt's ``intent`` (the Compliance classifier); ``--save-outputs`` keeps them.

Then claims are mined, verified and FAR-H written to ``--out`` (format
:data:`proxy.evaluation.hallucination.FARH_RESULT_FORMAT`). Exit 0 on success, 2 for usage or data
errors (message, no traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from proxy.evaluation.data import DEFAULT_DATA_DIR, DataError, read_halueval_qa, read_jsonl, read_truthfulqa, read_yaml_or_json
from proxy.evaluation.hallucination import OutputRecord, check_outputs, farh_result
from proxy.evaluation.oracle import Oracle, halueval_entries, regex_rules_from_rows, truthfulqa_entries

ORACLES = ("halueval", "truthfulqa")
NOT_MODEL_OUTPUT = {"refuse", "escalate"}


class UsageError(Exception):
    """Bad arguments or inputs: printed as ``sonate eval hallucination: <message>``, exit 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sonate eval hallucination``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--outputs", type=Path, help="JSONL of model outputs ({output, question?, id?, domain?})")
    source.add_argument("--proxy", help="base URL of a running proxy (http://host:port or .../v1): ask it the oracle questions")
    parser.add_argument("--oracle", default="halueval,truthfulqa",
                        help="oracle sources, comma-separated (halueval, truthfulqa; default both)")
    parser.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR),
                        help=f"evaluation data directory (default {DEFAULT_DATA_DIR}, or $SONATE_DATA_DIR)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the FAR-H result JSON")
    parser.add_argument("--regex-rules", type=Path, help="YAML/JSON list of {name, applies, expect} regex fact checks")
    parser.add_argument("--model-assisted", action="store_true",
                        help="add the model-assisted span detection pass (needs --claims-model)")
    parser.add_argument("--claims-model", help="model_name of config.yaml for the span detection pass")
    parser.add_argument("--config", help="config.yaml for --claims-model routes (default $SONATE_CONFIG or ./config.yaml)")
    parser.add_argument("--api-key", help="client API key of the proxy (with --proxy)")
    parser.add_argument("--model", help="model route to ask through the proxy (with --proxy)")
    parser.add_argument("--limit", type=int, default=100, help="oracle questions to send through the proxy (default 100)")
    parser.add_argument("--concurrency", type=int, default=4, help="simultaneous requests (default 4)")
    parser.add_argument("--save-outputs", type=Path, help="with --proxy: also write the answers as outputs JSONL")
    parser.add_argument("--no-details", action="store_true", help="leave the per-claim details out of the result")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_oracle(data_dir: Path, names: list[str]) -> Oracle:
    """The oracle of the named sources read from ``data_dir``. Raises UsageError / DataError."""
    unknown = [n for n in names if n not in ORACLES]
    if unknown or not names:
        raise UsageError(f"--oracle must list some of {', '.join(ORACLES)}; got {','.join(names) or 'nothing'}")
    entries = []
    try:
        if "halueval" in names:
            entries += halueval_entries(read_halueval_qa(data_dir))
        if "truthfulqa" in names:
            entries += truthfulqa_entries(read_truthfulqa(data_dir))
        return Oracle(entries)
    except ValueError as exc:
        raise DataError(str(exc)) from None


def records_from_rows(rows: list[dict[str, Any]], source: str) -> tuple[list[OutputRecord], int]:
    """Output records of an outputs JSONL (and how many were guardrail notices, skipped).

    Raises UsageError naming the line for a missing/non-string ``output`` or bad optional fields.
    """
    records, skipped = [], 0
    for number, row in enumerate(rows, 1):
        where = f"{source}: record {number}"
        if not isinstance(row.get("output"), str):
            raise UsageError(f"{where}: field 'output' must be a string")
        for key in ("question", "id", "domain", "ts", "action"):
            if row.get(key) is not None and not isinstance(row[key], str):
                raise UsageError(f"{where}: field {key!r} must be a string when given")
        if row.get("action") in NOT_MODEL_OUTPUT:
            skipped += 1
            continue
        records.append(OutputRecord(row.get("id") or str(number), row["output"], row.get("question"),
                                    row.get("domain"), row.get("ts")))
    return records, skipped


def ask_proxy(args: argparse.Namespace, oracle: Oracle) -> list[dict[str, Any]]:
    """Send the first ``--limit`` oracle questions through the proxy; outputs JSONL rows."""
    import openai

    if not args.api_key or not args.model:
        raise UsageError("--proxy needs --api-key and --model")
    if args.limit < 1 or args.concurrency < 1:
        raise UsageError("--limit and --concurrency must be at least 1")
    base = args.proxy.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    client = openai.OpenAI(base_url=base, api_key=args.api_key, max_retries=2, timeout=120)
    entries = list(oracle)[: args.limit]

    def one(entry) -> dict[str, Any]:
        raw = client.chat.completions.with_raw_response.create(
            model=args.model, messages=[{"role": "user", "content": entry.question}])
        completion = raw.parse()
        receipt_id = raw.headers.get("x-sonate-receipt-id")
        domain = None
        if receipt_id:
            receipt = client.get(f"/receipts/{receipt_id}", cast_to=object)
            domain = receipt.get("intent") if isinstance(receipt, dict) else None
        return {"id": entry.id, "question": entry.question, "output": completion.choices[0].message.content or "",
                "domain": domain, "action": raw.headers.get("x-sonate-guardrail-action"),
                "receipt_id": receipt_id, "ts": _now()}

    from concurrent.futures import ThreadPoolExecutor

    rows: list[dict[str, Any]] = []
    try:
        with ThreadPoolExecutor(args.concurrency) as pool, tqdm(total=len(entries), desc="asking the proxy",
                                                                unit="q", file=sys.stderr) as bar:
            for row in pool.map(one, entries):
                rows.append(row)
                bar.update(1)
    except openai.APIConnectionError as exc:
        raise UsageError(f"cannot reach the proxy at {base}: {exc}") from None
    except openai.APIStatusError as exc:
        raise UsageError(f"the proxy answered {exc.status_code}: {exc.message}") from None
    return rows


def run(args: argparse.Namespace) -> int:
    """Entry point of ``sonate eval hallucination``; returns the exit code."""
    try:
        return _run(args)
    except (UsageError, DataError) as exc:
        print(f"sonate eval hallucination: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.oracle.split(",") if n.strip()]
    oracle = build_oracle(args.data_dir, names)
    rules = []
    if args.regex_rules:
        document = read_yaml_or_json(args.regex_rules)
        if not isinstance(document, list):
            raise UsageError(f"{args.regex_rules}: must be a list of {{name, applies, expect}}")
        try:
            rules = regex_rules_from_rows(document)
        except ValueError as exc:
            raise UsageError(f"{args.regex_rules}: {exc}") from None
    if args.model_assisted and not args.claims_model:
        raise UsageError("--model-assisted needs --claims-model (a model_name of config.yaml)")

    if args.proxy:
        rows = ask_proxy(args, oracle)
        source = args.proxy
        if args.save_outputs:
            args.save_outputs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    else:
        rows = read_jsonl(args.outputs)
        source = str(args.outputs)
    records, skipped = records_from_rows(rows, source)

    model_claims, failures = None, 0
    if args.model_assisted:
        model_claims, failures = _span_pass(args, records)

    checked = check_outputs(tqdm(records, desc="checking claims", unit="output", file=sys.stderr), oracle,
                            regex_rules=rules, model_claims=model_claims)
    stamps = sorted(r.ts for r in records if r.ts)
    result = farh_result(
        checked, records=len(records), records_with_oracle=sum(1 for r in records if oracle.lookup(r.question)),
        oracles=names, oracle_questions=len(oracle), regex_rules=len(rules), model_assisted=args.model_assisted,
        source=source, generated_at=_now(), window=(stamps[0], stamps[-1]) if stamps else (None, None),
        details=not args.no_details)
    result["inputs"]["outputs_not_model"] = skipped
    result["inputs"]["model_assisted_failures"] = failures
    try:
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    overall, claims = result["overall"], result["claims"]
    ci = f" (95% CI {overall['ci_display'][0]}–{overall['ci_display'][1]})" if overall["ci_display"] else ""
    print(f"FAR-H {overall['display']}{ci}: {claims['failed']} failed of {claims['checked']} checked claims "
          f"({claims['unchecked']} left for human review) from {len(records)} outputs → {args.out}")
    for domain, block in result["per_domain"].items():
        print(f"  {domain:<10} {block['display']:>7}  {block['failed']}/{block['checked']} ({block['tier']})")
    return 0


def _span_pass(args: argparse.Namespace, records: list[OutputRecord]):
    from proxy.evaluation.claim_spans import detect_spans
    from proxy.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(f"configuration error:\n{exc}") from None
    with tqdm(total=len(records), desc="model span detection", unit="output", file=sys.stderr) as bar:
        try:
            found = asyncio.run(detect_spans(config, args.claims_model, [(r.id, r.output) for r in records],
                                             concurrency=args.concurrency, progress=bar.update))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return found.claims, len(found.failures)
