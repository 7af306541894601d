"""``sonate policy``: validate a policy directory offline, and show what the policies do to a prompt.

Usage::

    sonate policy check [DIR] [--config PATH]
    sonate policy test --prompt TEXT [--policy-set NAME] [--config PATH | --policies DIR] [--model NAME] [--json]

``check`` validates every policy file of DIR (default: ``policies`` of the config) with the
policy schema and each ``detector:`` block with its detector's config model, and, with
``--config``, the config's policy sets, teams and key assignments over them; no model is
loaded. It prints the policy version a proxy would serve (the ``policy_version`` of its
receipts). Exit 0 valid, 1 invalid (every message names the file, the key and what was
expected, as ``sonate serve`` and ``POST /v1/admin/policies/reload`` report them).

``test`` loads the models of one policy set (default ``default``) and prints, for each input
policy, what it would do to the prompt and why (scores against thresholds), then the decisive
action. No model provider is called. Exit 0; 2 for an unknown set or a bad config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from proxy.cli.common import EXIT_CHECK_FAILED, EXIT_OK, Subcommand, UsageError

__all__ = ["HELP", "SUBCOMMANDS"]

HELP = "check a policy directory | test what the policies do to a prompt"


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", nargs="?", help="the policy directory (default: policies of --config)")
    parser.add_argument("--config", help="also validate this config.yaml's policy_sets, teams and key assignments")


def _test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="the user message to screen")
    parser.add_argument("--policy-set", default="default", help="the policy set to apply (default: default)")
    parser.add_argument("--config", help="config.yaml with the policy directory and policy sets "
                        "(default: $SONATE_CONFIG or ./config.yaml)")
    parser.add_argument("--policies", help="a policy directory (overrides the config's; without a config: "
                        "only the default set)")
    parser.add_argument("--model", help="the model_list route whose tokenizer Continuity counts with "
                        "(default: the first route)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _bundle(config_path: str | None, directory: str | None, *, required_config: bool):
    """(config or None, validated PolicyBundle). Raises ConfigError; UsageError without any source."""
    import os

    from proxy import offline
    from proxy.config import load_config
    from proxy.guardrails.policy_sets import load_policy_bundle
    from proxy.guardrails.registry import default_registry

    offline.keep_torch_out_of_presidio()  # the detectors' config models import presidio
    config = None
    if config_path or required_config or (directory is None and (os.environ.get("SONATE_CONFIG")
                                                                   or Path("config.yaml").exists())):
        config = load_config(config_path)
    if config is None and directory is None:
        raise UsageError("name a policy directory or a config.yaml (--config)")
    registry = default_registry()
    return config, registry, load_policy_bundle(config, registry, Path(directory) if directory else None)


def _check(args: argparse.Namespace) -> int:
    """Validate; print ``ok ...`` (exit 0) or the problems (exit 1)."""
    from proxy.config import ConfigError

    try:
        _, _, bundle = _bundle(args.config, args.directory, required_config=False)
    except ConfigError as exc:
        print(f"invalid:\n{exc}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    ids = [d.policy.id for d in bundle.documents]
    print(f"ok: {len(ids)} policies in {bundle.directory} ({', '.join(ids)})")
    for name, policies in sorted(bundle.sets.items()):
        print(f"  policy set {name}: {', '.join(p.id for p in policies) or '(no policy)'}")
    print(f"policy_version: {bundle.version}")
    return EXIT_OK


def _test(args: argparse.Namespace) -> int:
    """Explain the prompt under one set; print text or JSON."""
    from proxy.guardrails.engine import GuardrailEngine
    from proxy.guardrails.explain import explain_input

    config, registry, bundle = _bundle(args.config, args.policies, required_config=args.policies is None)
    if args.policy_set not in bundle.sets:
        raise UsageError(f"--policy-set: unknown policy set {args.policy_set!r} (expected one of {sorted(bundle.sets)})")
    count_tokens, model = _token_counter(config, args.model)
    engine = GuardrailEngine(bundle.sets[args.policy_set], count_tokens=count_tokens, registry=registry)
    explanations, action = explain_input(engine, [{"role": "user", "content": args.prompt}], model)
    if args.json:
        print(json.dumps({"policy_set": args.policy_set, "policy_version": bundle.version, "action": action,
                          "policies": [e.as_dict() for e in explanations]}, indent=2))
        return EXIT_OK
    print(f"policy set {args.policy_set} (policy_version {bundle.version})")
    for e in explanations:
        print(f"  {e.policy_id} [{e.kind}] {e.reason}")
        if e.scores:
            print(f"      scores: {', '.join(f'{k}={v}' for k, v in e.scores.items())}")
        if e.thresholds:
            print(f"      thresholds: {', '.join(f'{k}={v}' for k, v in e.thresholds.items())}")
    print(f"decisive action: {action}")
    return EXIT_OK


def _token_counter(config, model: str | None):
    """(``(model, messages) -> tokens``, the model name): the proxy's counter over ``config``'s
    routes (no provider is called), litellm's default tokenizer without a config."""
    if config is not None:
        from proxy.server.flow.upstream import Upstream

        name = model or config.model_list[0].model_name
        if config.route(name) is None:
            raise UsageError(f"--model: no model_list route named {name!r}")
        return Upstream(config).count_tokens, name
    import litellm

    return (lambda m, messages: int(litellm.token_counter(model=m, messages=messages))), model or "gpt-4o-mini"


SUBCOMMANDS: dict[str, Subcommand] = {
    "check": ("validate a policy directory (and a config's policy sets) offline; exit 1 when invalid",
              _check_arguments, _check),
    "test": ("show what each policy of a set would do to a prompt, and why (no model call)",
             _test_arguments, _test),
}
