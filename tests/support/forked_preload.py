"""What the proxy fork server (:mod:`tests.support.forked`) loads once, in the order `sonate serve`
does: the offline settings, spaCy and presidio without torch, the command line and the libraries
the server loads before its models; then the models of the repository's policies
(:func:`load_models`). A forked proxy starts with them loaded.

Not prometheus_client: it picks its multiprocess mode when imported, from
``$PROMETHEUS_MULTIPROC_DIR``, which a supervisor of workers sets first
(:func:`proxy.server.admission.workers.metrics_directory`); so not the server's HTTP modules either
(nor :mod:`proxy.server.flow.policy_runtime`: it imports the metrics).
Imported here, a forked supervisor's workers would each show only their own counts
(tests/e2e/test_workers.py's metrics tests fail then); :func:`load_models` checks that it is not.

The models: every detector of the repository's policies, built through the process-wide cache of
:func:`tests.support.inprocess.shared_registry` (keyed by the policy's ``detector:`` block and
``$SONATE_MODELS_DIR``), each presidio analyzer pool filled for the threads of a test config
(``server.detector_threads`` + ``server.limits.large_input_threads``), the embedding model and the
routes' token counters warmed. A child that calls :func:`use_preloaded_models` (the default of
:func:`tests.support.forked.fork_proxy` and :func:`tests.support.forked.sonate`) builds its
detectors through that registry: a detector block the fork server built comes from it, any other
is built in the child, as `sonate serve` would. This is how ``server.workers`` shares models with
its workers (:func:`proxy.server.http.app.preload`): the product's ONNX Runtime sessions run on
the calling thread, so they survive a fork, and a presidio analyzer taken from the pool is used by
one thread only. Nothing runs in a side thread when the fork server forks (:func:`load_models`
checks that too).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from proxy import offline

offline.keep_torch_out_of_presidio()
for _name in ("proxy.cli", "proxy.cli.serve", "proxy.config", "proxy.guardrails.registry", "litellm",
              "openai.resources", "onnxruntime", "aiohttp"):
    importlib.import_module(_name)

#: Modules the fork server must not import (see the module docstring).
NOT_PRELOADED = ("prometheus_client", "proxy.server.telemetry.metrics")


def load_models() -> None:
    """Build and warm the detectors of the repository's policies (policies/) for a test config, in
    :func:`tests.support.inprocess.shared_registry`. RuntimeError when that imported a module of
    :data:`NOT_PRELOADED` or left a thread running."""
    from proxy.config import load_config
    from proxy.guardrails.detectors.embeddings import limit_blas_threads, warm_up
    from proxy.guardrails.detectors.pii import PiiDetector
    from proxy.guardrails.engine import GuardrailEngine, stop_side_threads
    from proxy.guardrails.policy_sets import load_policy_bundle
    from proxy.server.flow.upstream import Upstream
    from tests.support.inprocess import shared_registry
    from tests.support.proxy import ROOT, write_config

    registry = shared_registry()
    with tempfile.TemporaryDirectory(prefix="sonate-fork-server-") as scratch:
        config = load_config(write_config(Path(scratch), "http://127.0.0.1:9/v1", "redis://127.0.0.1:9/0", 9,
                                          policies=ROOT / "policies"))
        bundle = load_policy_bundle(config, registry)
    upstream = Upstream(config)
    greeting = [{"role": "user", "content": "Hello, my name is Ada. What is 2 + 2?"}]
    for name in list(upstream.routes):
        with contextlib.suppress(Exception):  # as warm_up_counters: a route that cannot count is left cold
            upstream.count_tokens(name, greeting)  # each route's tokenizer loaded
    warm_up()
    threads = config.server.detector_threads + config.server.limits.large_input_threads
    for policies in bundle.sets.values():
        engine = GuardrailEngine(policies, count_tokens=upstream.count_tokens, registry=registry)
        engine.screen_input(greeting)  # lazy state loaded, as a new engine's first screen does
        for detector in engine.detectors.values():
            if isinstance(detector, PiiDetector):
                detector.prepare(threads)
    stop_side_threads()
    limit_blas_threads()
    gc.collect()
    gc.freeze()  # as a serving process does after start-up: a child's collections skip these objects
    imported = [name for name in NOT_PRELOADED if name in sys.modules]
    if imported:
        raise RuntimeError(f"the fork server imported {', '.join(imported)}: forked workers' metrics would break")
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        raise RuntimeError(f"threads left running in the fork server: {', '.join(others)}")


def use_preloaded_models() -> None:
    """In a forked child, before the command runs: build detectors through the fork server's
    registry (:func:`proxy.guardrails.registry.default_registry` replaced, in every module that
    imported it)."""
    from proxy.guardrails import registry
    from tests.support.inprocess import shared_registry

    original = registry.default_registry

    def default_registry() -> Any:
        return shared_registry()

    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("proxy", "tests") and getattr(module, "default_registry", None) is original:
            module.default_registry = default_registry


load_models()
