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
    sonate eval suite examples/suite/support-assistant.yaml --out suite-report   # exit 1 on regression

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

from proxy.cli.common import Subcommand, UsageError, int_at_least
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
                      help="utility: only the ordinary prompts (alpaca seed tasks without personal data + TruthfulQA "
                           "questions the regulated labels call ordinary): the share that reaches the model "
                           "unchanged, masked, escalated, refused")
    data.add_argument("--sealed", action="store_true",
                      help="measure on the sealed part of the development split instead of the tuning part "
                           "(proxy/evaluation/split.py): aggregates with Wilson intervals only, never a row; "
                           "no rule, example or threshold is written from it")
    data.add_argument("--sample", type=int, help="at most N items per dataset subset (quick runs)")
    data.add_argument("--seed", type=int, default=0, help="seed of --sample and of the framed pass (default 0)")
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
    output.add_argument("--no-framed", action="store_true",
                        help="skip the framed pass (each Safety and Compliance item again with a greeting, "
                             "reference or sign-off around it; proxy/evaluation/framings.py)")


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
    if args.sealed and (args.show_touched or args.dataset is not None):
        raise UsageError("--sealed prints aggregates only: it cannot be combined with --show-touched or --dataset")
    items: list[Any] = []
    missing: list[str] = []
    if args.only == "utility":
        names = [n for n in names if n in ("alpaca_seed", "truthfulqa")]
    if names:
        builtin, missing = load_builtin(Path(args.data_dir), "sealed" if args.sealed else "tuning")
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
    from proxy.server.flow.upstream import Upstream

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
        found.append(Provenance("domain-svm", "compliance", "trained", rows,
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
    from proxy.evaluation.framings import framed_items
    from proxy.evaluation.guardrails import run_items
    from proxy.evaluation.report import build_report
    from proxy.evaluation.scorecard import read_person_labels, scorecard
    from proxy.guardrails.detectors.pii import DATASET_ENTITY_MAPPING

    items, sources, missing = _load_items(args)
    for path in (args.out, args.markdown):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    offline.configure_tldextract()
    started, load_before = time.perf_counter(), _loadavg()
    target, policies_dir = _open_target(args)
    framed: tuple[list[Any], list[Any]] | None = None
    try:
        outcomes = run_items(target, items, progress=not args.no_progress, total=len(items))
        apology = _apology(args.apology_data, target) if args.only is None else None
        if args.only is None and not args.no_framed:
            copies = framed_items(items, args.seed)
            framed = (copies, run_items(target, copies, progress=not args.no_progress, total=len(copies)))
    finally:
        if hasattr(target, "close"):
            target.close()
    meta = _meta(args, target, policies_dir, sources, missing, started, load_before)
    report = build_report(items, outcomes, meta=meta, latency_measures=target.latency_measures,
                          mapping=DATASET_ENTITY_MAPPING, apology=apology,
                          provenances=_provenances(policies_dir, args.config), framed=framed)
    report["part"] = "sealed" if args.sealed else "tuning"
    report["scorecard"] = scorecard(items, outcomes, read_person_labels())
    if args.sealed:  # the seal: aggregates only, no row ids or per-row outcomes
        report.pop("items", None)
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


#: argparse type of the counts below: an integer >= 1.
_positive = int_at_least(1)


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


# ---- sonate eval suite ----------------------------------------------------------------------

def add_suite_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval suite`` on ``parser``."""
    parser.add_argument("suite", type=Path, help="suite file (YAML; see docs/eval-suites.md and examples/suite/)")
    target = parser.add_argument_group("target (override the suite's target section)")
    target.add_argument("--proxy", metavar="URL", help="base URL of the running proxy (default: the suite's "
                        "target.proxy, else $SONATE_PROXY_URL)")
    target.add_argument("--api-key", help="client key (default: target.api_key, else $SONATE_API_KEY)")
    target.add_argument("--model", action="append", help="model route to evaluate; repeat to compare several "
                        "(default: target.models)")
    target.add_argument("--metrics-key", help="a metrics or admin key: engine overhead from GET /metrics "
                        "(default: target.metrics_key, else $SONATE_METRICS_KEY; without one it is not measured)")
    judge = parser.add_argument_group("judge (override the suite's judge section)")
    judge.add_argument("--judge-model", help="litellm model of the LLM judge (e.g. openai/gpt-4o-mini)")
    judge.add_argument("--judge-api-base", help="API base of the judge (an OpenAI-compatible server)")
    judge.add_argument("--judge-api-key", help="API key of the judge (default: judge.api_key, else "
                       "$SONATE_JUDGE_API_KEY, else litellm's environment)")
    out = parser.add_argument_group("output and regression gate")
    out.add_argument("--out", type=Path, help="folder for result.json, report.md, report.html (default "
                     "./suite-<name>)")
    out.add_argument("--baseline", type=Path, help="stored baseline run (default: <suite>.baseline.json beside "
                     "the suite file); the run exits 1 when a gated metric regressed against it")
    out.add_argument("--update-baseline", action="store_true", help="store this run as the new baseline (no gate)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_suite(args: argparse.Namespace) -> int:
    """Run ``sonate eval suite``: write result.json, report.md and report.html; print the Markdown summary.

    Returns 1 when a gated metric regressed against the baseline (CI gate), else 0. Raises UsageError
    for suite, judge, proxy and output problems.
    """
    import asyncio

    from proxy.evaluation.client import ProxyError
    from proxy.evaluation.judge import Judge, JudgeError
    from proxy.evaluation.suite.model import load_suite
    from proxy.evaluation.suite.regression import baseline_document
    from proxy.evaluation.suite.report_html import render_html
    from proxy.evaluation.suite.report_md import render_markdown
    from proxy.evaluation.suite.runner import run_suite as run

    try:
        suite = load_suite(args.suite)
    except ValueError as exc:  # SuiteError
        raise UsageError(str(exc)) from None
    proxy = args.proxy or suite.proxy or os.environ.get("SONATE_PROXY_URL")
    api_key = args.api_key or suite.api_key or os.environ.get("SONATE_API_KEY")
    if not proxy or not api_key:
        raise UsageError("a proxy URL and a client key are needed: --proxy/--api-key, the suite's target section, "
                         "or $SONATE_PROXY_URL/$SONATE_API_KEY")
    judge_model = args.judge_model or (suite.judge.model if suite.judge else None)
    judge = None if judge_model is None else Judge(
        judge_model, api_base=args.judge_api_base or (suite.judge.api_base if suite.judge else None),
        api_key=args.judge_api_key or (suite.judge.api_key if suite.judge else None)
        or os.environ.get("SONATE_JUDGE_API_KEY"))
    baseline_path = args.baseline or args.suite.with_name(f"{args.suite.stem}.baseline.json")
    baseline = None
    if baseline_path.is_file() and not args.update_baseline:
        try:
            baseline = json.loads(baseline_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{baseline_path}: cannot read the baseline: {exc}") from None
    out = args.out or Path(f"suite-{suite.name}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the output folder: {exc.strerror or exc}") from None
    try:
        result = asyncio.run(run(suite, proxy=proxy, api_key=api_key, models=args.model or list(suite.models),
                                 judge=judge, metrics_key=args.metrics_key or suite.metrics_key
                                 or os.environ.get("SONATE_METRICS_KEY"),
                                 progress=not args.no_progress, baseline=baseline))
    except (ValueError, ProxyError, JudgeError) as exc:  # UnknownPrice is a ValueError
        raise UsageError(str(exc)) from None
    result["regression"]["baseline"] = str(baseline_path) if baseline is not None else None
    _write_json(out / "result.json", result)
    markdown = render_markdown(result)
    for name, text in (("report.md", markdown), ("report.html", render_html(result))):
        try:
            (out / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{out / name}: cannot write: {exc.strerror or exc}") from None
    if args.update_baseline:
        _write_json(baseline_path, baseline_document(result))
    print(render_markdown(result, cases=False))
    print(f"→ {out}/result.json, report.md, report.html"
          + (f"; baseline stored in {baseline_path}" if args.update_baseline else ""), file=sys.stderr)
    return 1 if result["regression"]["regressed"] else 0


# ---- sonate eval conversation ---------------------------------------------------------------

def _weight_map(text: str) -> dict[str, float]:
    """argparse type of ``name=weight,...`` (weights as floats; the metric checks names and sums)."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected name=weight,..., got {part!r}") from None
    return weights


def add_conversation_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval conversation`` on ``parser``."""
    from proxy.evaluation.conversation import METRICS

    parser.add_argument("conversations", type=Path, help="conversations JSONL (see docs/eval-suites.md)")
    source = parser.add_argument_group("the proxy's own traffic (replay the queries through a running proxy)")
    source.add_argument("--proxy", metavar="URL", help="base URL of a running proxy: each answer gets its receipt id")
    source.add_argument("--api-key", default=os.environ.get("SONATE_API_KEY"),
                        help="client key for --proxy (default $SONATE_API_KEY)")
    source.add_argument("--model", default="demo", help="model route for --proxy (default demo)")
    judge = parser.add_argument_group("judge")
    judge.add_argument("--judge-model", help="litellm model of the LLM judge (e.g. openai/gpt-4o-mini); without "
                       "it the judge metrics (quality, context, bestof) are left out")
    judge.add_argument("--judge-api-base", help="API base of the judge (an OpenAI-compatible server)")
    judge.add_argument("--judge-api-key", default=os.environ.get("SONATE_JUDGE_API_KEY"),
                       help="API key of the judge (default $SONATE_JUDGE_API_KEY, else litellm's environment)")
    what = parser.add_argument_group("metrics")
    what.add_argument("--metrics", help=f"comma-separated subset of {', '.join(METRICS)} (default: all the "
                      "inputs allow)")
    what.add_argument("--lexicon", type=Path, help="toxic-word lexicon in HurtLex's TSV format (toxicity clustering)")
    what.add_argument("--config", help="config.yaml whose policies' Safety detectors score risk (default "
                      "$SONATE_CONFIG or ./config.yaml)")
    what.add_argument("--policies", type=Path, help="policies directory (overrides the config's)")
    what.add_argument("--risk-weights", type=_weight_map, help="prompt=0.4,response=0.4,context=0.2 (the default)")
    what.add_argument("--criteria-weights", type=_weight_map,
                      help="BestOf: relevance=0.25,accuracy=0.35,coherence=0.15,helpfulness=0.25 (the default)")
    what.add_argument("--seed", type=int, default=0, help="seed of UMAP (default 0)")
    what.add_argument("--concurrency", type=_positive, default=4, help="simultaneous judge calls (default 4)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", type=Path, help="write the JSON result here")
    out.add_argument("--markdown", type=Path, help="write the Markdown tables here (always printed)")
    out.add_argument("--html", type=Path, help="write the HTML page here")
    out.add_argument("--ledger", metavar="URL", help="store the result in this ledger store (sqlite:///… or "
                     "redis://…) for longitudinal queries (`sonate report --from … --to …` shows the trends)")
    out.add_argument("--export-jsonl", type=Path, help="write every stored run (with --ledger; else this run) as JSONL")
    out.add_argument("--run-id", help="id of this run in the store (default: a random conv_… id)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")


def _conversation_options(args: argparse.Namespace) -> tuple[Any, Path | None]:
    """(runner Options, policies directory or None) from the arguments. Raises UsageError."""
    from proxy.config import ConfigError, load_config
    from proxy.evaluation.conversation import METRICS
    from proxy.evaluation.conversation.runner import Options
    from proxy.evaluation.conversation.steps import default_metrics

    if args.metrics:
        metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
        unknown = [m for m in metrics if m not in METRICS]
        if unknown or not metrics:
            raise UsageError(f"--metrics: unknown {', '.join(unknown) or '(empty)'} (choose from {', '.join(METRICS)})")
    else:
        metrics = default_metrics(bool(args.judge_model), args.lexicon is not None)
    if args.proxy and not args.api_key:
        raise UsageError("--proxy needs --api-key (or $SONATE_API_KEY)")
    if args.lexicon is not None and not args.lexicon.is_file():
        raise UsageError(f"--lexicon {args.lexicon} not found")
    for path in (args.out, args.markdown, args.html, args.export_jsonl):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    options = Options(metrics=metrics, seed=args.seed, concurrency=args.concurrency, progress=not args.no_progress)
    if args.risk_weights:
        options.risk_weights = args.risk_weights
    if args.criteria_weights:
        options.criteria_weights = args.criteria_weights
    policies = args.policies
    if policies is None and ("risk" in metrics or "bias" in metrics):
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            raise UsageError(f"configuration error (risk uses the policies' Safety detectors; pass --policies "
                             f"or --config):\n{exc}") from None
        policies = Path(config.path(config.policies))
    return options, policies


def run_conversation(args: argparse.Namespace) -> int:
    """Run ``sonate eval conversation``: print the Markdown; write ``--out`` / ``--markdown`` / ``--html``;
    store the result with ``--ledger``; ``--export-jsonl``. Returns 0.

    Raises UsageError for data, judge, proxy, store and output problems.
    """
    import asyncio

    from proxy.evaluation.client import ProxyError
    from proxy.evaluation.conversation import report, results
    from proxy.evaluation.conversation.steps import evaluate
    from proxy.evaluation.judge import JudgeError
    from proxy.storage.base import LedgerError

    options, policies = _conversation_options(args)
    try:
        result = evaluate(args.conversations, options, policies_dir=policies, lexicon_path=args.lexicon,
                          judge_model=args.judge_model, judge_api_base=args.judge_api_base,
                          judge_api_key=args.judge_api_key, proxy=args.proxy, api_key=args.api_key,
                          model=args.model, run_id=args.run_id)
        stored = [result]
        if args.ledger:
            asyncio.run(results.store_run(args.ledger, result))
            stored = asyncio.run(results.list_runs(args.ledger)) if args.export_jsonl else stored
    except (ValueError, ProxyError, JudgeError, LedgerError) as exc:  # DataError and ConfigError are ValueErrors
        raise UsageError(str(exc)) from None
    if args.out is not None:
        _write_json(args.out, result)
    markdown = report.render_markdown(result)
    for path, text in ((args.markdown, markdown), (args.html, report.render_html(result) if args.html else ""),
                       (args.export_jsonl, results.to_jsonl(stored))):
        if path is not None:
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
    print(markdown, end="")
    return 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "guardrails": ("accuracy and latency of the guardrails on labelled data (JSON + Markdown report)",
                   add_guardrails_arguments, run_guardrails),
    "hallucination": ("FAR-H: claims in model outputs checked against the oracle set (HaluEval, TruthfulQA) "
                      "and regex rules", add_hallucination_arguments, run_hallucination),
    "fairness": ("PFI: HolisticBias prompts over protected groups through a running proxy",
                 add_fairness_arguments, run_fairness),
    "suite": ("evaluation suite through a proxy: correctness, determinism, latency, cost, safety, with a "
              "regression gate against a stored baseline (exit 1 on regression)", add_suite_arguments, run_suite),
    "conversation": ("Fair Forge conversation metrics (humanity, bias, risk, quality, context, toxicity clusters, "
                     "BestOf) over recorded conversations or replayed through a proxy", add_conversation_arguments,
                     run_conversation),
}
