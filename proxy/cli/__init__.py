"""The ``sonate`` command: serve | verify | eval | train (and the subcommands registered below).

Exit codes: 0 success, 1 a check failed (verify), 2 usage or configuration error (the message
names the file, the key and what was expected; no traceback).
"""

from __future__ import annotations

import argparse
import logging
import sys

from proxy import __version__, offline  # noqa: F401  (offline settings before any model import)


def _serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from proxy.config import ConfigError, load_config
    from proxy.receipts.signing import KeyFileError
    from proxy.server.app import build_services, create_app

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"sonate: configuration error:\n{exc}", file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port

    async def make_app() -> web.Application:
        return create_app(await build_services(config))

    offline.configure_tldextract()
    try:
        web.run_app(make_app(), host=host, port=port, access_log_format='%a "%r" %s %b %Tfs',
                    print=lambda _: logging.getLogger("sonate").info(
                        "Sonate Trust Proxy %s listening on http://%s:%s/v1", __version__, host, port))
    except (ConfigError, KeyFileError, ValueError) as exc:
        print(f"sonate: cannot start:\n{exc}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from proxy.cli import verify as verify_cmd
    from proxy.evaluation import training

    parser = argparse.ArgumentParser(prog="sonate", description="Sonate Trust Proxy: guardrail gateway "
                                     "with signed, hash-chained trust receipts.")
    parser.add_argument("--version", action="version", version=f"sonate {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the proxy (config.yaml, or $SONATE_CONFIG)")
    serve.add_argument("--config", help="path of config.yaml (default: $SONATE_CONFIG or ./config.yaml)")
    serve.add_argument("--host", help="override server.host")
    serve.add_argument("--port", type=int, help="override server.port")
    serve.set_defaults(func=_serve)

    verify = sub.add_parser("verify", help="verify a receipt or a ledger range (hashes, signature, chain)")
    verify_cmd.add_arguments(verify)
    verify.set_defaults(func=verify_cmd.run)

    # Subcommands that live in their own modules register here: each module exposes
    # `add_arguments(parser)` and `run(args) -> int`.
    from proxy.cli import keys as keys_cmd

    keys = sub.add_parser("keys", help="generate | rotate | list the receipt signing keys")
    keys_cmd.add_arguments(keys)
    keys.set_defaults(func=keys_cmd.run)

    from proxy.cli import ledger as ledger_cmd

    ledger = sub.add_parser("ledger", help="transparency log: reindex | checkpoint | bundle")
    ledger_sub = ledger.add_subparsers(dest="what", required=True)
    ledger_cmd.add_subcommands(ledger_sub)  # other `sonate ledger X` commands register on ledger_sub

    evaluate = sub.add_parser("eval", help="measure guardrails and KPIs on labelled data")
    eval_sub = evaluate.add_subparsers(dest="what", required=True)  # noqa: F841  (eval kinds below)
    from proxy.cli import evaluate as eval_guardrails

    guardrails_eval = eval_sub.add_parser("guardrails", help="accuracy and latency of the guardrails on "
                                          "labelled data (JSON + Markdown report)")
    eval_guardrails.add_arguments(guardrails_eval)
    guardrails_eval.set_defaults(func=eval_guardrails.run)
    from proxy.evaluation import fairness_run as eval_fairness
    from proxy.evaluation import hallucination_run as eval_hallucination

    hallucination_eval = eval_sub.add_parser("hallucination", help="FAR-H: claims in model outputs checked "
                                             "against the oracle set (HaluEval, TruthfulQA) and regex rules")
    eval_hallucination.add_arguments(hallucination_eval)
    hallucination_eval.set_defaults(func=eval_hallucination.run)
    fairness_eval = eval_sub.add_parser("fairness", help="PFI: HolisticBias prompts over protected groups "
                                        "through a running proxy")
    eval_fairness.add_arguments(fairness_eval)
    fairness_eval.set_defaults(func=eval_fairness.run)

    from proxy.cli import report as report_cmd

    report = sub.add_parser("report", help="KPI report (FAR-A, TIS, FAR-H, PFI) of a window: JSON + HTML")
    report_cmd.add_arguments(report)
    report.set_defaults(func=report_cmd.run)

    train = sub.add_parser("train", help="train a guardrail artefact from the development data")
    train_sub = train.add_subparsers(dest="what", required=True)
    safety = train_sub.add_parser("safety", help="the harmful-intent classifier of the Safety policy")
    training.add_arguments(safety)
    safety.set_defaults(func=training.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sonate`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)  # per-language registry notices
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
