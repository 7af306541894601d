"""Guardrail accuracy evaluation: ``sonate eval guardrails``.

Modules: :mod:`.datasets` (labelled data loaders and column mapping), :mod:`.metrics` (pure
statistics: Wilson intervals, span matching, F-beta, latency percentiles), :mod:`.runner` (runs
items through the proxy's own :class:`~proxy.guardrails.engine.GuardrailEngine`, in-process or
through a running proxy), :mod:`.report` (JSON report and its Markdown table), :mod:`.cmd` (the
CLI subcommand).
"""
