#!/usr/bin/env python3
"""Replay prompts from a CSV or JSONL file through a running Sonate proxy with the openai client.

Prints a table of outcomes by policy and action, then verifies the ledger with `sonate verify`.

    python examples/replay.py prompts.csv --column prompt --base-url http://127.0.0.1:8080/v1 \
        --api-key sk-sonate-demo-client-key-for-local-use-only --model demo --ledger sqlite:///var/ledger.db

Several files may be given as ``FILE[:COLUMN[:TURNS]]``. TURNS (default ``--turns``, 1) groups
consecutive prompts of that file into conversations of TURNS user turns; each request resends
the history, as chat clients do, which is how long contexts reach the Continuity policy.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai


def read_prompts(path: str, column: str, limit: int | None) -> list[str]:
    """Prompts from one column of a CSV file with a header, a JSONL file or a JSON array."""
    rows: list[dict] = []
    if path.endswith(".jsonl"):
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    elif path.endswith(".json"):
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    else:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    prompts = [str(r[column]) for r in rows if r.get(column)]
    if not prompts:
        raise SystemExit(f"{path}: no values in column {column!r}")
    return prompts[:limit] if limit else prompts


def receipt_of(base_url: str, api_key: str, receipt_id: str) -> dict:
    req = urllib.request.Request(f"{base_url}/receipts/{receipt_id}", headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def ask(client: openai.OpenAI, model: str, messages: list[dict], attempts: int = 20):
    """One chat completion (raw response). A 429 is retried after its ``Retry-After`` (the proxy
    refused the request before screening it: no receipt, so a retry duplicates nothing); any other
    error is raised (openai.APIStatusError), never retried (a retry could duplicate receipts)."""
    for attempt in range(attempts):
        try:
            return client.chat.completions.with_raw_response.create(model=model, messages=messages)
        except openai.RateLimitError as exc:
            if attempt == attempts - 1:
                raise
            time.sleep(float(exc.response.headers.get("retry-after") or 1))
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="FILE[:COLUMN[:TURNS]] (.csv, .jsonl or .json)")
    parser.add_argument("--column", default="prompt", help="default column holding the prompt")
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--api-key", default="sk-sonate-demo-client-key-for-local-use-only")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--limit", type=int, help="at most this many prompts per file")
    parser.add_argument("--turns", type=int, default=1, help="user turns per conversation (default 1)")
    parser.add_argument("--ledger", help="ledger URL to verify afterwards (sqlite:///… or redis://…)")
    args = parser.parse_args(argv)

    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=120)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    actions: collections.Counter[str] = collections.Counter()
    errors = 0
    total = 0
    for spec in args.files:
        path, column, turns = (spec.split(":") + ["", ""])[:3]
        turns_per_conversation = int(turns) if turns else args.turns
        history: list[dict] = []
        for i, prompt in enumerate(read_prompts(path, column or args.column, args.limit)):
            if i % turns_per_conversation == 0:
                history = []
            history.append({"role": "user", "content": prompt})
            total += 1
            try:
                raw = ask(client, args.model, history)
            except openai.APIStatusError as exc:
                errors += 1
                print(f"error {exc.status_code}: {exc.message}", file=sys.stderr)
                history.pop()
                continue
            completion = raw.parse()
            history.append({"role": "assistant", "content": completion.choices[0].message.content or ""})
            actions[raw.headers["x-sonate-guardrail-action"]] += 1
            # Every action of the request is a receipt; the final one names the request.
            final = receipt_of(args.base_url, args.api_key, raw.headers["x-sonate-receipt-id"])
            outcomes[(final["policy_id"], final["guardrail_action"])] += 1

    print(f"\nReplayed {total} prompts ({errors} errors) through {args.base_url} (model {args.model})\n")
    print("| policy_id | action | requests |")
    print("|---|---|---:|")
    for (policy_id, action), n in sorted(outcomes.items()):
        print(f"| {policy_id} | {action} | {n} |")
    print("\nDecisive action per request (x-sonate-guardrail-action): "
          + ", ".join(f"{a}={n}" for a, n in sorted(actions.items())))
    status = 0 if errors == 0 else 1
    if args.ledger:
        print(f"\nVerifying ledger {args.ledger} ...", flush=True)
        done = subprocess.run([sys.executable, "-m", "proxy", "verify", "--ledger", args.ledger,
                               "--keys-url", args.base_url + "/keys"])
        status = status or done.returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main())
