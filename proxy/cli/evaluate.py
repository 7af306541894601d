"""``sonate eval guardrails | hallucination | fairness``: offline measurement on labelled data.

Examples::

    sonate eval guardrails --data-dir ../shared/data --out report.json --markdown report.md
    sonate eval guardrails --sample 20 --seed 1                       # a quick run
    sonate eval guardrails --only utility --show-touched 2>touched.txt # ordinary prompts only
    sonate eval guardrails --dataset mine.csv --text-column text --label-column label \\
        --positive harmful --policy safety
    sonate eval guardrails --proxy http://127.0.0.1:8080 --api-key sk-sonate-demo-client-key-for-local-use-only --sample 10
    sonate eval hallucination --outputs outputs.jsonl --out farh.json
    sonate eval fairness --proxy http://127.0.0.1:8080 --api-key K --model demo --out pfi.json

The measurements live in :mod:`proxy.evaluation` (guardrails, farh_run, pfi_run); this module
holds their options, turns their errors into :class:`~proxy.cli.common.UsageError` and prints
the summaries. Exit codes: 0 done (targets missed or not), 2 usage, data, configuration or
connection error (one message, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proxy.cli.common import Subcommand, UsageError
from proxy.evaluation.data import DEFAULT_DATA_DIR, SOURCES  # one default: $SONATE_DATA_DIR or ../shared/data

HELP = "measure guardrails and KPIs on labelled data"
#: Labelled completions the apology detector's rules were tuned on, and the held-out set written after.
APOLOGY_DATA = Path(__file__).resolve().parents[1] / "evaluation" / "data" / "apology_completions.jsonl"
APOLOGY_HELDOUT = APOLOGY_DATA.with_name("apology_completions_heldout.jsonl")
#: Options left out of the report's ``meta.options`` (secrets and parser bookkeeping).
_NOT_OPTIONS = ("func", "api_key", "command", "subcommand", "log_level")


def _write_json(path: Path, document: Any) -> None:
    """Write ``document`` as indented UTF-8 JSON; raises UsageError naming ``path``."""
    try:
        path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None


# ---- sonate eval guardrails ------------------------------------------------------------------

def add_guardrails_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval guardrails`` on ``parser``."""
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                      help=f"folder of the development split (default {DEFAULT_DATA_DIR}; see its README)")
    data.add_argument("--sources", default="all",
                      help=f"comma-separated built-in sources to use ({', '.join(SOURCES)}), "
                           "'all' (default) or 'none' (only --dataset)")
    data.add_argument("--dataset", type=Path, help="an extra labelled CSV/JSONL/JSON file (needs --text-column, "
                      "--label-column, --positive)")
    data.add_argument("--text-column", help="column of --dataset holding the user message")
    data.add_argument("--label-column", help="column of --dataset holding the label")
    data.add_argument("--positive", help="label value of --dataset rows the policy should act on")
    data.add_argument("--policy", choices=["safety", "compliance"], default="safety",
                      help="policy --dataset evaluates: safety (refuse) or compliance (escalate); default safety")
    data.add_argument("--only", choices=["utility"],
                      help="utility: only the ordinary prompts (alpaca_seed + TruthfulQA non-regulated "
                           "categories): the share that reaches the model unchanged, masked, escalated, refused")
    data.add_argument("--sample", type=int, help="at most N items per dataset subset (quick runs)")
    data.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    data.add_argument("--apology-data", type=Path, action="append",
                      help="labelled completions for the model-apology detector; repeatable (default: the two "
                           "sets shipped in proxy/evaluation/data, the tuning set and the held-out set)")
    target = parser.add_argument_group("guardrails")
    target.add_argument("--config", help="config.yaml whose policies are evaluated (default $SONATE_CONFIG or "
                        "./config.yaml)")
    target.add_argument("--policies", type=Path, help="policies directory (overrides the config's)")
    target.add_argument("--proxy", metavar="URL", help="go through a running proxy instead (e.g. "
                        "http://127.0.0.1:8080); writes receipts and opens review cases there")
    target.add_argument("--api-key", default=os.environ.get("SONATE_API_KEY"),
                        help="client key for --proxy (default $SONATE_API_KEY)")
    target.add_argument("--model", default="demo", help="model route for --proxy (default demo)")
    output = parser.add_argument_group("output")
    output.add_argument("--out", type=Path, help="write the JSON report here")
    output.add_argument("--markdown", type=Path, help="write the Markdown tables here (always printed)")
    output.add_argument("--show-touched", action="store_true",
                        help="also print each ordinary prompt that did not pass unchanged (row id, action, "
                             "policies, the text the model receives) — terminal only, never into a report")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")


def _loadavg() -> float | None:
    """1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _source_names(text: str) -> list[str]:
    """The built-in sources ``--sources`` selects (all, none or a comma-separated list)."""
    wanted = text.strip().lower()
    if wanted in ("all", "none"):
        return list(SOURCES) if wanted == "all" else []
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in SOURCES]
    if unknown or not names:
        raise UsageError(f"--sources: unknown source(s) {', '.join(unknown) or '(empty)'} "
                         f"(choose from {', '.join(SOURCES)}, all, none)")
    return names


def _custom_items(args: argparse.Namespace) -> list[Any]:
    """The items of ``--dataset`` (checking its column options)."""
    from proxy.evaluation.data import load_custom

    mapping = ("text_column", "label_column", "positive")
    if args.dataset is None:
        if any(getattr(args, n) is not None for n in mapping):
            raise UsageError("--text-column/--label-column/--positive describe --dataset, which is missing")
        return []
    absent = [f"--{n.replace('_', '-')}" for n in mapping if getattr(args, n) is None]
    if absent:
        raise UsageError(f"--dataset needs {', '.join(absent)}")
    return load_custom(args.dataset, text_column=args.text_column, label_column=args.label_column,
                       positive=args.positive, policy=args.policy)


def _load_items(args: argparse.Namespace) -> tuple[list[Any], list[str], list[str]]:
    """(items, sources used, sources missing). Raises UsageError / DataError."""
    from proxy.evaluation.data import load_builtin, sample
    from proxy.evaluation.utility import is_ordinary

    names = _source_names(args.sources)
    items: list[Any] = []
    missing: list[str] = []
    if args.only == "utility":
        names = [n for n in names if n in ("alpaca_seed", "truthfulqa")]
    if names:
        builtin, missing = load_builtin(Path(args.data_dir))
        items = [i for i in builtin if i.dataset in names and (args.only != "utility" or is_ordinary(i))]
        missing = [m for m in missing if m in names]
    items += _custom_items(args)
    if not items:
        raise UsageError("no items to evaluate")
    if args.sample is not None and args.sample <= 0:
        raise UsageError("--sample must be a positive number")
    args.apology_data = args.apology_data or [APOLOGY_DATA, APOLOGY_HELDOUT]
    absent = [str(p) for p in args.apology_data if not p.is_file()]
    if absent:
        raise UsageError(f"--apology-data {', '.join(absent)} not found")
    return sample(items, args.sample, args.seed), names, missing


def _open_target(args: argparse.Namespace) -> tuple[Any, str | None]:
    """(the target to screen items with, the policies directory evaluated or None via a proxy)."""
    from proxy.config import load_config
    from proxy.evaluation.guardrails import EngineTarget, ProxyTarget, TargetError, build_engine
    from proxy.server.upstream import Upstream

    if args.proxy:
        if not args.api_key:
            raise UsageError("--proxy needs --api-key (or $SONATE_API_KEY)")
        target = ProxyTarget(args.proxy, args.api_key, args.model)
        try:
            target.check()
        except BaseException:
            target.close()
            raise
        return target, None
    config = load_config(args.config)
    policies = Path(args.policies if args.policies is not None else config.path(config.policies))
    try:
        engine = build_engine(policies, Upstream(config).count_tokens)
    except (ValueError, RuntimeError, OSError, ImportError) as exc:  # a detector cannot load (artefact, model)
        raise TargetError(f"cannot build the guardrail engine from {policies}: {exc}") from None
    return EngineTarget(engine), str(policies)


def _apology(paths: list[Path], target: Any) -> list[dict[str, Any]]:
    """The model-apology detector's sections of the report, one per labelled completions file in
    ``paths``; a completion counts as tuned on ("seen") when it is a row of the tuning set
    :data:`APOLOGY_DATA` (the rules were written against it), so that set is in-sample and
    :data:`APOLOGY_HELDOUT` held-out."""
    from proxy.evaluation.data import load_apology_completions
    from proxy.evaluation.provenance import row_hash
    from proxy.evaluation.report import apology_section
    from proxy.guardrails.detectors.apology import ApologyDetector

    detector = getattr(getattr(target, "engine", None), "apology_detector", None) or ApologyDetector()
    tuned = {row_hash(r["completion"]) for r in load_apology_completions(APOLOGY_DATA)}
    sections = []
    for path in paths:
        rows = load_apology_completions(path)
        texts = [r["completion"] for r in rows]
        sections.append(apology_section(rows, detector.score(texts), [detector.is_apology(t) for t in texts],
                                        {"name": detector.name, "version": detector.version, "data": str(path)},
                                        seen=lambda text: row_hash(text) in tuned))
    return sections


def _provenances(policies_dir: str | None, config_path: str | None) -> list[Any]:
    """The rows files shipped with the artefacts, plus the Compliance domain classifier's training
    examples (the ``detector.domains`` of the compliance policies; from the config's policies
    directory when going through a proxy). Raises UsageError for a malformed rows file."""
    from proxy.config import ConfigError, load_config
    from proxy.evaluation.provenance import Provenance, load_provenances, row_hash
    from proxy.guardrails.detectors.harm import ARTEFACT_DIR
    from proxy.guardrails.schema import load_policies

    try:
        found = load_provenances(ARTEFACT_DIR)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if policies_dir is None:  # through a proxy: its policies are assumed to be this config's
        try:
            config = load_config(config_path)
        except (ConfigError, OSError):
            return found
        policies_dir = str(config.path(config.policies))
    rows: dict[str, str] = {}
    for policy in load_policies(Path(policies_dir)):
        domains = policy.detector.get("domains") if policy.kind == "compliance" else None
        for name, spec in (domains or {}).items():  # as DomainClassifier fits: description + examples
            rows.update({row_hash(t): name for t in (spec["description"], *spec["examples"])})
    if rows:
        found.append(Provenance("domain-logreg", "compliance", "trained", rows,
                                source=f"{policies_dir}: compliance detector.domains (description + examples)"))
    return found


def _option(value: Any) -> Any:
    """An option value as JSON (paths as strings, lists of paths as lists of strings)."""
    if isinstance(value, list):
        return [_option(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def _meta(args: argparse.Namespace, target: Any, policies_dir: str | None, sources: list[str],
          missing: list[str], started: float, load_before: float | None) -> dict[str, Any]:
    """The report's ``meta``: options, target, data, timing and the machine's load."""
    return {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "options": {k: _option(v) for k, v in sorted(vars(args).items()) if k not in _NOT_OPTIONS},
        "mode": target.mode,
        "target": target.describe(),
        "policies_dir": policies_dir,
        "data_dir": str(args.data_dir) if sources else None,
        "sources": sources + ([f"custom:{args.dataset.stem}"] if args.dataset is not None else []),
        "missing_sources": missing,
        "sample": args.sample,
        "seed": args.seed,
        "elapsed_seconds": round(time.perf_counter() - started, 1),
        # latency depends on what else runs: the CPU count and the 1-minute load average
        # before and after the run (os.getloadavg)
        "machine": {"cpus": os.cpu_count(), "loadavg_1m": [load_before, _loadavg()]},
    }


def _guardrails_report(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Load the items, screen them, measure the apology detector: (report, missing sources)."""
    from proxy import offline
    from proxy.evaluation.guardrails import run_items
    from proxy.evaluation.report import build_report
    from proxy.guardrails.detectors.pii import DATASET_ENTITY_MAPPING

    items, sources, missing = _load_items(args)
    for path in (args.out, args.markdown):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    offline.configure_tldextract()
    started, load_before = time.perf_counter(), _loadavg()
    target, policies_dir = _open_target(args)
    try:
        outcomes = run_items(target, items, progress=not args.no_progress, total=len(items))
        apology = _apology(args.apology_data, target) if args.only is None else None
    finally:
        if hasattr(target, "close"):
            target.close()
    meta = _meta(args, target, policies_dir, sources, missing, started, load_before)
    report = build_report(items, outcomes, meta=meta, latency_measures=target.latency_measures,
                          mapping=DATASET_ENTITY_MAPPING, apology=apology,
                          provenances=_provenances(policies_dir, args.config))
    if args.show_touched:
        _print_touched(items, outcomes)
    return report, missing


def _print_touched(items: list[Any], outcomes: list[Any]) -> None:
    """Print the ordinary prompts the guardrails touched, one block each, on stderr."""
    from proxy.evaluation.utility import touched

    rows = touched(items, outcomes)
    print(f"# {len(rows)} ordinary prompts not passed unchanged (terminal only; alpaca_seed is CC BY-NC)",
          file=sys.stderr)
    for row in rows:
        print(f"{row['id']}\t{row['action']}\t{','.join(row['fired'])}\n  sent:  {row['text']!r}\n"
              f"  model: {row['model_text']!r}", file=sys.stderr)


def run_guardrails(args: argparse.Namespace) -> int:
    """Run ``sonate eval guardrails``: print the Markdown; write ``--out`` / ``--markdown``. Returns 0.

    Raises UsageError for data, target, proxy and output problems (ConfigError passes through).
    """
    from proxy.evaluation.client import ProxyError
    from proxy.evaluation.data import DataError
    from proxy.evaluation.guardrails import TargetError
    from proxy.evaluation.report import render_markdown

    try:
        report, missing = _guardrails_report(args)
    except (DataError, TargetError, ProxyError) as exc:
        raise UsageError(str(exc)) from None
    if args.out is not None:
        _write_json(args.out, report)
    markdown = render_markdown(report)
    if args.markdown is not None:
        try:
            args.markdown.write_text(markdown, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{args.markdown}: cannot write: {exc.strerror or exc}") from None
    if missing:
        print(f"note: sources not found in {args.data_dir}: {', '.join(missing)}", file=sys.stderr)
    print(markdown, end="")
    return 0


# ---- sonate eval hallucination ---------------------------------------------------------------

def add_hallucination_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval hallucination`` on ``parser``."""
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


def _oracle_names(text: str) -> list[str]:
    """The oracle sources ``--oracle`` lists (a non-empty subset of farh_run.ORACLES)."""
    from proxy.evaluation.farh_run import ORACLES

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in ORACLES for n in names):
        raise UsageError(f"--oracle must list some of {', '.join(ORACLES)}; got {','.join(names) or 'nothing'}")
    return names


def _check_hallucination_options(args: argparse.Namespace) -> None:
    if args.model_assisted and not args.claims_model:
        raise UsageError("--model-assisted needs --claims-model (a model_name of config.yaml)")
    if args.proxy and (not args.api_key or not args.model):
        raise UsageError("--proxy needs --api-key and --model")
    if args.proxy and (args.limit < 1 or args.concurrency < 1):
        raise UsageError("--limit and --concurrency must be at least 1")


def _output_rows(args: argparse.Namespace, oracle: Any) -> tuple[list[dict[str, Any]], str]:
    """(outputs JSONL rows, their source): read ``--outputs`` or ask ``--proxy`` the oracle questions."""
    from proxy.evaluation.client import ProxyClient
    from proxy.evaluation.data import read_jsonl
    from proxy.evaluation.farh_run import ask_proxy

    if not args.proxy:
        return read_jsonl(args.outputs), str(args.outputs)
    client = ProxyClient(args.proxy, args.api_key, args.model)
    try:
        rows = ask_proxy(client, oracle, limit=args.limit, concurrency=args.concurrency)
    finally:
        client.close()
    if args.save_outputs:
        args.save_outputs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return rows, args.proxy


def _span_pass(args: argparse.Namespace, records: list[Any]) -> tuple[Any, int]:
    """(model claims, failures) of the model-assisted pass, or (None, 0) without ``--model-assisted``."""
    from proxy.config import ConfigError, load_config
    from proxy.evaluation.farh_run import model_span_pass

    if not args.model_assisted:
        return None, 0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(f"configuration error:\n{exc}") from None
    try:
        return model_span_pass(config, args.claims_model, records, concurrency=args.concurrency)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _farh(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """The FAR-H result of the run and the number of outputs measured."""
    from proxy.evaluation.farh_run import build_oracle, measure, read_regex_rules, records_from_rows

    names = _oracle_names(args.oracle)
    _check_hallucination_options(args)
    oracle = build_oracle(args.data_dir, names)
    rules = read_regex_rules(args.regex_rules) if args.regex_rules else []
    rows, source = _output_rows(args, oracle)
    records, skipped = records_from_rows(rows, source)
    model_claims, failures = _span_pass(args, records)
    result = measure(records, oracle, oracles=names, rules=rules, model_claims=model_claims,
                     model_assisted=args.model_assisted, source=source, details=not args.no_details)
    result["inputs"]["outputs_not_model"] = skipped
    result["inputs"]["model_assisted_failures"] = failures
    return result, len(records)


def run_hallucination(args: argparse.Namespace) -> int:
    """Run ``sonate eval hallucination``: write the FAR-H result, print its summary. Returns 0.

    Raises UsageError for usage, data and proxy problems.
    """
    from proxy.evaluation.client import ProxyError
    from proxy.evaluation.data import DataError

    try:
        result, outputs = _farh(args)
    except (DataError, ProxyError) as exc:
        raise UsageError(str(exc)) from None
    _write_json(args.out, result)
    overall, claims = result["overall"], result["claims"]
    ci = f" (95% CI {overall['ci_display'][0]}–{overall['ci_display'][1]})" if overall["ci_display"] else ""
    print(f"FAR-H {overall['display']}{ci}: {claims['failed']} failed of {claims['checked']} checked claims "
          f"({claims['unchecked']} left for human review) from {outputs} outputs → {args.out}")
    for domain, block in result["per_domain"].items():
        print(f"  {domain:<10} {block['display']:>7}  {block['failed']}/{block['checked']} ({block['tier']})")
    return 0


# ---- sonate eval fairness --------------------------------------------------------------------

def _weights(text: str) -> dict[str, float]:
    """argparse type of ``--weights``: ``refusal=0.5,escalation=0.3,latency=0.2`` (>= 0, sum 1)."""
    from proxy.evaluation.fairness import OUTCOME_WEIGHTS

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
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_fairness_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval fairness`` on ``parser``."""
    from proxy.kpi.methodology import BOOTSTRAP_RESAMPLES

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
    parser.add_argument("--weights", type=_weights,
                        help="outcome weights, e.g. refusal=0.5,escalation=0.3,latency=0.2 (the default)")
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES,
                        help=f"bootstrap resamples (default and minimum {BOOTSTRAP_RESAMPLES})")
    parser.add_argument("--seed", type=int, default=0, help="seed of group/prompt sampling and the bootstrap")
    parser.add_argument("--concurrency", type=_positive, default=4, help="simultaneous requests (default 4)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the PFI result JSON")


def _pfi(args: argparse.Namespace) -> dict[str, Any]:
    """Build the prompts, send them through the proxy and compute the PFI result."""
    from proxy.evaluation.client import ProxyClient
    from proxy.evaluation.fairness import OUTCOME_WEIGHTS, pfi_result
    from proxy.evaluation.pfi_run import build_prompt_set, now, send_prompts
    from proxy.kpi.methodology import BOOTSTRAP_RESAMPLES

    if args.resamples < BOOTSTRAP_RESAMPLES:
        raise UsageError(f"--resamples must be at least {BOOTSTRAP_RESAMPLES} (methodology)")
    if args.groups_per_axis < 2:
        raise UsageError("--groups-per-axis must be at least 2 (PFI compares groups)")
    axes = [a.strip() for a in args.axes.split(",") if a.strip()] if args.axes else None
    prompts = build_prompt_set(args.data_dir, axes=axes, per_group=args.per_group,
                               groups_per_axis=args.groups_per_axis,
                               include_dispreferred=args.include_dispreferred, seed=args.seed)
    client = ProxyClient(args.proxy, args.api_key, args.model)
    print(f"{len(prompts.prompts)} prompts: {len(prompts.groups)} groups over {len(prompts.axes)} axes × "
          f"{len(prompts.variants)} prompts", file=sys.stderr)
    try:
        observations = send_prompts(client, prompts.prompts, args.concurrency)
    finally:
        client.close()
    return pfi_result(observations, proxy=client.base, model=args.model, axes=prompts.axes,
                      per_group=len(prompts.variants), groups_per_axis=args.groups_per_axis,
                      include_dispreferred=args.include_dispreferred, generated_at=now(),
                      weights=args.weights or dict(OUTCOME_WEIGHTS),
                      resamples=args.resamples, seed=args.seed)


def run_fairness(args: argparse.Namespace) -> int:
    """Run ``sonate eval fairness``: write the PFI result, print its summary. Returns 0.

    Raises UsageError for usage and data problems, unknown axes and an unreachable proxy.
    """
    from proxy.evaluation.client import ProxyError

    try:
        result = _pfi(args)
    except (ValueError, ProxyError) as exc:  # DataError is a ValueError
        raise UsageError(str(exc)) from None
    _write_json(args.out, result)
    overall = result["overall"]
    ci = f" (95% CI {overall['ci_display'][0]}–{overall['ci_display'][1]})" if overall["ci_display"] else ""
    raw = f"{overall['pfi']:.4f}" if overall["pfi"] is not None else "n/a"
    print(f"PFI {overall['display']}{ci} [estimate {raw}, binding axis {overall['binding_axis']}] over "
          f"{overall['n']} answered prompts ({result['inputs']['errors']} errors) → {args.out}")
    for axis, block in result["per_axis"].items():
        value = f"{block['pfi']:.4f}" if block["pfi"] is not None else "n/a"
        print(f"  {axis:<22} {block['display']:>6}  estimate {value}  n={block['n']}  Δ={block['deltas']}")
    return 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "guardrails": ("accuracy and latency of the guardrails on labelled data (JSON + Markdown report)",
                   add_guardrails_arguments, run_guardrails),
    "hallucination": ("FAR-H: claims in model outputs checked against the oracle set (HaluEval, TruthfulQA) "
                      "and regex rules", add_hallucination_arguments, run_hallucination),
    "fairness": ("PFI: HolisticBias prompts over protected groups through a running proxy",
                 add_fairness_arguments, run_fairness),
}
