"""``sonate eval fairness``: PFI over HolisticBias groups, measured through a running proxy.

Builds the templated prompts (:mod:`proxy.evaluation.fairness`), sends each through the proxy with
the openai client (one user message; ``--concurrency`` at a time), records refusal
(``x-sonate-guardrail-action: refuse`` or ``finish_reason: content_filter``), escalation
(``x-sonate-guardrail-action: escalate``) and client-side latency, then writes the result
(:data:`proxy.evaluation.fairness.PFI_RESULT_FORMAT`) to ``--out``. Exit 0 on success, 2 for usage
or data errors and an unreachable proxy (message, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from proxy.evaluation.data import DEFAULT_DATA_DIR, DataError, read_holistic_bias
from proxy.evaluation.fairness import (OUTCOME_WEIGHTS, Observation, Prompt, build_prompts, groups_from_descriptors,
                                pfi_result, prompt_variants)
from proxy.kpi.methodology import BOOTSTRAP_RESAMPLES


class UsageError(Exception):
    """Bad arguments or an unreachable proxy: printed as ``sonate eval fairness: <message>``, exit 2."""


def _weights(text: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in OUTCOME_WEIGHTS:
            raise argparse.ArgumentTypeError(f"unknown outcome {name!r} (outcomes: {', '.join(OUTCOME_WEIGHTS)})")
        try:
            weights[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"weight of {name!r} must be a number, got {value!r}") from None
    if abs(sum(weights.values()) - 1.0) > 1e-9 or any(w < 0 for w in weights.values()):
        raise argparse.ArgumentTypeError(f"weights must be >= 0 and sum to 1, got {weights}")
    return weights


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``sonate eval fairness``."""
    parser.add_argument("--proxy", required=True, help="base URL of a running proxy (http://host:port or .../v1)")
    parser.add_argument("--api-key", required=True, help="client API key of the proxy")
    parser.add_argument("--model", required=True, help="model route to ask through the proxy")
    parser.add_argument("--data-dir", type=Path, default=Path(DEFAULT_DATA_DIR),
                        help=f"evaluation data directory with holistic_bias/ (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--axes", help="protected attributes (HolisticBias axes), comma-separated (default all)")
    parser.add_argument("--per-group", type=_positive, default=20, help="prompts per group (default 20)")
    parser.add_argument("--groups-per-axis", type=_positive, default=10,
                        help="seeded sample of groups per axis (default 10; 0 is not allowed, use a large number for all)")
    parser.add_argument("--include-dispreferred", action="store_true",
                        help="also use descriptors HolisticBias marks dispreferred (slurs, outdated terms)")
    parser.add_argument("--weights", type=_weights, default=dict(OUTCOME_WEIGHTS),
                        help="outcome weights, e.g. refusal=0.5,escalation=0.3,latency=0.2 (the default)")
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES,
                        help=f"bootstrap resamples (default and minimum {BOOTSTRAP_RESAMPLES})")
    parser.add_argument("--seed", type=int, default=0, help="seed of group/prompt sampling and the bootstrap")
    parser.add_argument("--concurrency", type=_positive, default=4, help="simultaneous requests (default 4)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the PFI result JSON")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def send_prompts(base_url: str, api_key: str, model: str, prompts: list[Prompt], concurrency: int) -> list[Observation]:
    """Send every prompt through the proxy (openai client); one Observation per prompt, in order.

    HTTP status errors become observations with ``error`` set; an unreachable proxy raises
    UsageError.
    """
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)

    def one(prompt: Prompt) -> Observation:
        ts = _now()
        start = time.perf_counter()
        common = dict(axis=prompt.axis, bucket=prompt.bucket, group=prompt.group, variant=prompt.variant,
                      prompt=prompt.text, ts=ts)
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": prompt.text}])
            completion = raw.parse()
        except openai.APIStatusError as exc:
            return Observation(refused=False, escalated=False, latency_seconds=time.perf_counter() - start,
                               error=f"HTTP {exc.status_code}: {exc.message}", **common)
        latency = time.perf_counter() - start
        action = raw.headers.get("x-sonate-guardrail-action")
        finish = completion.choices[0].finish_reason if completion.choices else None
        return Observation(refused=action == "refuse" or finish == "content_filter",
                           escalated=action == "escalate" or bool(raw.headers.get("x-sonate-escalation-id")),
                           latency_seconds=latency, action=action, finish_reason=finish, **common)

    observations: list[Observation] = []
    try:
        with ThreadPoolExecutor(concurrency) as pool, tqdm(total=len(prompts), desc="fairness prompts", unit="req",
                                                           file=sys.stderr) as bar:
            for observation in pool.map(one, prompts):
                observations.append(observation)
                bar.update(1)
    except openai.APIConnectionError as exc:
        raise UsageError(f"cannot reach the proxy at {base_url}: {exc}") from None
    return observations


def run(args: argparse.Namespace) -> int:
    """Entry point of ``sonate eval fairness``; returns the exit code."""
    try:
        return _run(args)
    except (UsageError, DataError, ValueError) as exc:
        print(f"sonate eval fairness: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.resamples < BOOTSTRAP_RESAMPLES:
        raise UsageError(f"--resamples must be at least {BOOTSTRAP_RESAMPLES} (methodology)")
    if args.groups_per_axis < 2:
        raise UsageError("--groups-per-axis must be at least 2 (PFI compares groups)")
    data = read_holistic_bias(args.data_dir)
    axes = [a.strip() for a in args.axes.split(",") if a.strip()] if args.axes else None
    groups = groups_from_descriptors(data["descriptors"], axes=axes, include_dispreferred=args.include_dispreferred,
                                     groups_per_axis=args.groups_per_axis, seed=args.seed)
    chosen_axes = list(dict.fromkeys(g.axis for g in groups))
    variants = prompt_variants(data["templates"], data["nouns"], args.per_group, seed=args.seed)
    prompts = build_prompts(groups, variants)
    base = args.proxy.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    print(f"{len(prompts)} prompts: {len(groups)} groups over {len(chosen_axes)} axes × {len(variants)} prompts",
          file=sys.stderr)
    observations = send_prompts(base, args.api_key, args.model, prompts, args.concurrency)
    result = pfi_result(observations, proxy=base, model=args.model, axes=chosen_axes, per_group=len(variants),
                        groups_per_axis=args.groups_per_axis, include_dispreferred=args.include_dispreferred,
                        generated_at=_now(), weights=args.weights, resamples=args.resamples, seed=args.seed)
    try:
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    overall = result["overall"]
    ci = f" (95% CI {overall['ci_display'][0]}–{overall['ci_display'][1]})" if overall["ci_display"] else ""
    raw = f"{overall['pfi']:.4f}" if overall["pfi"] is not None else "n/a"
    print(f"PFI {overall['display']}{ci} [estimate {raw}, binding axis {overall['binding_axis']}] over "
          f"{overall['n']} answered prompts ({result['inputs']['errors']} errors) → {args.out}")
    for axis, block in result["per_axis"].items():
        value = f"{block['pfi']:.4f}" if block["pfi"] is not None else "n/a"
        print(f"  {axis:<22} {block['display']:>6}  estimate {value}  n={block['n']}  Δ={block['deltas']}")
    return 0
