"""``sonate eval guardrails``: measure the guardrails on labelled data.

Examples::

    sonate eval guardrails --data-dir ../shared/data --out report.json --markdown report.md
    sonate eval guardrails --sample 20 --seed 1                       # a quick run
    sonate eval guardrails --dataset mine.csv --text-column text --label-column label \\
        --positive harmful --policy safety
    sonate eval guardrails --proxy http://127.0.0.1:8080 --api-key sk-sonate-demo --sample 10

Exit codes: 0 done (targets missed or not), 2 usage, data, configuration or connection error
(one message, no traceback).
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

from proxy.evaluation.data import DEFAULT_DATA_DIR  # one default: $SONATE_DATA_DIR or ../shared/data

APOLOGY_DATA = Path(__file__).resolve().parent / "data" / "apology_completions.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``sonate eval guardrails`` on ``parser``."""
    from proxy.evaluation.datasets import SOURCES

    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                      help=f"folder of the development split (default {DEFAULT_DATA_DIR}; see its README)")
    data.add_argument("--sources", default="all",
                      help=f"comma-separated built-in sources to use ({', '.join(SOURCES)}), 'all' (default) "
                           "or 'none' (only --dataset)")
    data.add_argument("--dataset", type=Path, help="an extra labelled CSV/JSONL/JSON file (needs --text-column, "
                      "--label-column, --positive)")
    data.add_argument("--text-column", help="column of --dataset holding the user message")
    data.add_argument("--label-column", help="column of --dataset holding the label")
    data.add_argument("--positive", help="label value of --dataset rows the policy should act on")
    data.add_argument("--policy", choices=["safety", "compliance"], default="safety",
                      help="policy --dataset evaluates: safety (refuse) or compliance (escalate); default safety")
    data.add_argument("--sample", type=int, help="at most N items per dataset subset (quick runs)")
    data.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    data.add_argument("--apology-data", type=Path, default=APOLOGY_DATA,
                      help="labelled completions for the model-apology detector (default: the set shipped in "
                           "proxy/evaluation/data)")
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
    output.add_argument("--no-progress", action="store_true", help="no progress bar")


def _loadavg() -> float | None:
    """1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _fail(message: str) -> int:
    print(f"sonate eval guardrails: {message}", file=sys.stderr)
    return 2


def _load_items(args: argparse.Namespace) -> tuple[list[Any], list[str], list[str]]:
    """(items, sources used, sources missing). Raises DatasetError / ValueError."""
    from proxy.evaluation.datasets import SOURCES, DatasetError, load_builtin, load_custom, sample

    wanted = args.sources.strip().lower()
    if wanted == "all":
        names = list(SOURCES)
    elif wanted == "none":
        names = []
    else:
        names = [n.strip() for n in wanted.split(",") if n.strip()]
        unknown = [n for n in names if n not in SOURCES]
        if unknown or not names:
            raise DatasetError(f"--sources: unknown source(s) {', '.join(unknown) or '(empty)'} "
                               f"(choose from {', '.join(SOURCES)}, all, none)")
    items: list[Any] = []
    missing: list[str] = []
    if names:
        builtin, missing = load_builtin(Path(args.data_dir))
        items = [i for i in builtin if i.dataset in names]
        missing = [m for m in missing if m in names]
    if args.dataset is not None:
        absent = [f"--{n.replace('_', '-')}" for n in ("text_column", "label_column", "positive")
                  if getattr(args, n) is None]
        if absent:
            raise DatasetError(f"--dataset needs {', '.join(absent)}")
        items += load_custom(args.dataset, text_column=args.text_column, label_column=args.label_column,
                             positive=args.positive, policy=args.policy)
    elif any(getattr(args, n) is not None for n in ("text_column", "label_column", "positive")):
        raise DatasetError("--text-column/--label-column/--positive describe --dataset, which is missing")
    if not items:
        raise DatasetError("no items to evaluate")
    if args.sample is not None and args.sample <= 0:
        raise DatasetError("--sample must be a positive number")
    return sample(items, args.sample, args.seed), names, missing


def _engine_target(args: argparse.Namespace):
    from proxy.config import ConfigError, load_config
    from proxy.evaluation.guardrails import EngineTarget, TargetError, build_engine
    from proxy.server.upstream import Upstream

    config = load_config(args.config)
    policies = args.policies if args.policies is not None else config.path(config.policies)
    upstream = Upstream(config)
    try:
        engine = build_engine(Path(policies), upstream.count_tokens)
    except ConfigError:
        raise
    except (ValueError, RuntimeError, OSError, ImportError) as exc:  # a detector cannot load (artefact, model)
        raise TargetError(f"cannot build the guardrail engine from {policies}: {exc}") from None
    return EngineTarget(engine), str(policies)


def _apology(path: Path, target: Any) -> dict[str, Any]:
    from proxy.evaluation.datasets import load_apology_completions
    from proxy.evaluation.report import apology_section
    from proxy.guardrails.detectors.apology import ApologyDetector

    rows = load_apology_completions(path)
    detector = getattr(getattr(target, "engine", None), "apology_detector", None) or ApologyDetector()
    texts = [r["completion"] for r in rows]
    return apology_section(rows, detector.score(texts), [detector.is_apology(t) for t in texts],
                           {"name": detector.name, "version": detector.version, "data": str(path)})


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; print the Markdown; write ``--out`` / ``--markdown``. Returns the exit code."""
    from proxy import offline
    from proxy.config import ConfigError
    from proxy.evaluation.datasets import DatasetError
    from proxy.evaluation.report import build_report, render_markdown
    from proxy.evaluation.guardrails import ProxyTarget, TargetError, run_items
    from proxy.guardrails.detectors.pii import DATASET_ENTITY_MAPPING

    try:
        items, sources, missing = _load_items(args)
        if not args.apology_data.is_file():
            raise DatasetError(f"--apology-data {args.apology_data} not found")
    except (DatasetError, ValueError) as exc:
        return _fail(str(exc))
    for path in (args.out, args.markdown):
        if path is not None and not path.parent.is_dir():
            return _fail(f"cannot write {path}: directory {path.parent} does not exist")

    offline.configure_tldextract()
    started = time.perf_counter()
    load_before = _loadavg()
    target = None
    try:
        if args.proxy:
            if not args.api_key:
                return _fail("--proxy needs --api-key (or $SONATE_API_KEY)")
            target = ProxyTarget(args.proxy, args.api_key, args.model)
            target.check()
            policies_dir = None
        else:
            target, policies_dir = _engine_target(args)
        outcomes = run_items(target, items, progress=not args.no_progress, total=len(items))
        apology = _apology(args.apology_data, target)
    except (ConfigError, TargetError, DatasetError) as exc:
        return _fail(str(exc))
    finally:
        if target is not None and hasattr(target, "close"):
            target.close()

    meta = {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(args).items())
                    if k not in ("func", "api_key", "command", "what", "log_level")},
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
    report = build_report(items, outcomes, meta=meta, latency_measures=target.latency_measures,
                          mapping=DATASET_ENTITY_MAPPING, apology=apology)
    markdown = render_markdown(report)
    try:
        if args.out is not None:
            args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if args.markdown is not None:
            args.markdown.write_text(markdown, encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write the report: {exc}")
    if missing:
        print(f"note: sources not found in {args.data_dir}: {', '.join(missing)}", file=sys.stderr)
    print(markdown, end="")
    return 0
