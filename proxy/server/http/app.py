"""The aiohttp application: the services a running proxy holds, built once, and the app over them.

The request path, in reading order: :mod:`proxy.server.http.middleware` (errors → OpenAI error
objects) → :mod:`proxy.server.http.auth` / :mod:`proxy.server.http.requests` (bearer key, validated JSON)
→ :mod:`proxy.server.http.routes` → :mod:`proxy.server.flow.pipeline` (guardrails, provider, receipts).
Routes (OpenAI-compatible where OpenAI has one), one module each under ``routes/``:
  chat         POST /v1/chat/completions (JSON or SSE)
  embeddings   POST /v1/embeddings (inputs masked by Privacy; Safety per server.embeddings_safety)
  responses    POST /v1/responses  OpenAI Responses API over the chat pipeline (docs/api.md)
  messages     POST /v1/messages   Anthropic Messages API over the chat pipeline (Anthropic errors)
  models       GET  /v1/models
  receipts     GET  /v1/receipts/{receipt_id}[?bundle=1], GET /v1/keys
  escalations  GET  /v1/escalations/{id}, GET /v1/admin/escalations, POST .../{id}/resolve
  review       /v1/review/...  blind two-pass adjudication
  ledger       GET  /v1/ledger/checkpoint|proof/*  transparency log (+ the checkpoint publisher)
  verifier     GET  /verify/  in-browser receipt/bundle verifier
  health       GET  /healthz  /readyz  /metrics
  admin_policies GET /v1/admin/policies, POST /v1/admin/policies/reload (+ SIGHUP, file watch)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiohttp import web

from proxy.config import Config
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.policy_sets import load_policy_bundle
from proxy.receipts.chain import Ledger
from proxy.receipts.keyring import Keyring
from proxy.receipts.ledgers import Ledgers, ledger_names
from proxy.server.admission.limits import KeyLimiter, ScreenLanes, lower_thread_priority, pin_mmap_threshold, trim_heap
from proxy.server.admission.sink import build_sink
from proxy.server.flow.pipeline import Gateway
from proxy.server.flow.policy_runtime import PolicyRuntime, PolicySnapshot, SnapshotBuilder
from proxy.server.flow.upstream import Upstream
from proxy.server.http import tasks
from proxy.server.http.auth import Authenticator
from proxy.server.http.middleware import error_middleware, trace_middleware
from proxy.server.http.requests import SERVICES
from proxy.server.http.routes import (
    admin_policies,
    chat,
    console,
    embeddings,
    escalations,
    health,
    ledger,
    messages,
    models,
    receipts,
    responses,
    review,
    verifier,
)
from proxy.server.http.services import Services
from proxy.server.telemetry import tracing
from proxy.server.telemetry.metrics import Metrics
from proxy.storage import open_store

__all__ = ["Preloaded", "build_services", "create_app", "preload"]

log = logging.getLogger("sonate.server")


@dataclass
class Preloaded:
    """The models of a configuration, loaded before any event loop or thread by :func:`preload`
    (``sonate serve``'s supervisor, whose forked workers share them): ``upstream`` (litellm's
    router, whose token counter the engines use), ``builder`` (its detector pool, reused by policy
    reloads) and the ``snapshot`` of the policy files as they were read."""

    upstream: Upstream
    builder: SnapshotBuilder
    snapshot: PolicySnapshot


def preload(config: Config) -> Preloaded:
    """Load ``config``'s models for processes forked afterwards (:mod:`proxy.server.admission.workers`):
    what :func:`build_services` loads first, in the calling thread, plus a ready spaCy pipeline for
    each thread a worker screens in (:func:`prepare_threads`), with every thread it started
    stopped again (a fork copies only the calling thread). Checks the signing key first, so a key
    error stops the start before the models load. Ends with :func:`settle_heap` (``gc.freeze``:
    the workers' collectors never write to the pages of these objects).

    Raises ConfigError / KeyFileError / ValueError as :func:`build_services` does.
    """
    from proxy import offline
    from proxy.guardrails.detectors.apology import ApologyDetector
    from proxy.guardrails.engine import stop_side_threads

    pin_mmap_threshold()  # as build_services
    offline.keep_torch_out_of_presidio()
    _load_keyring(config)
    upstream = Upstream(config)
    builder = SnapshotBuilder(upstream.count_tokens, apology_detector=ApologyDetector())
    snapshot = _load_snapshot(config, builder)
    warm_up_counters(upstream)
    for engine in snapshot.engines():
        prepare_threads(engine, config.server.detector_threads + config.server.limits.large_input_threads)
    stop_side_threads()
    settle_heap()
    return Preloaded(upstream, builder, snapshot)


def prepare_threads(engine: GuardrailEngine, threads: int) -> None:
    """Keep per-thread models ready for ``threads`` threads yet to screen with ``engine`` (each PII
    detector's presidio analyzer with its spaCy pipeline: :meth:`~proxy.guardrails.detectors.pii.PiiDetector.prepare`)."""
    from proxy.guardrails.detectors.pii import PiiDetector

    for detector in engine.detectors.values():
        if isinstance(detector, PiiDetector):
            detector.prepare(threads)


def _load_keyring(config: Config) -> Keyring:
    return Keyring(*config.signing_paths).load()  # 0600 enforced here


def _load_snapshot(config: Config, builder: SnapshotBuilder, preloaded: PolicySnapshot | None = None) -> PolicySnapshot:
    """The snapshot of the policy files: ``preloaded`` when they are unchanged since it was read,
    else built now (``builder`` reuses the detectors it holds: after a fork, a policy reload made
    in the process a worker replaces holds). Call in a worker thread, or before any thread starts."""
    from proxy.guardrails.detectors.embeddings import warm_up

    bundle = load_policy_bundle(config, builder.registry)  # invalid policies or sets: fail before any model loads
    if preloaded is not None and bundle.version == preloaded.version:
        return preloaded
    warm_up()
    return builder.build(bundle)  # every set's engine; detectors built once per distinct detector block


async def build_services(config: Config, preloaded: Preloaded | None = None) -> Services:
    """Load the signing key, open the ledger store and load every policy's models (slow: the
    NER, embedding and toxicity models load here, once, never at request time), or take them
    from ``preloaded`` (:func:`preload`, in the process this one was forked from).

    Raises ConfigError / KeyFileError / ValueError with a clear message on bad configuration.
    """
    from proxy import offline
    from proxy.guardrails.detectors.apology import ApologyDetector

    pin_mmap_threshold()  # before the models load: large buffers mapped, given back when freed
    offline.keep_torch_out_of_presidio()  # before presidio/spaCy load: no torch in the serving process
    keyring = _load_keyring(config)
    signer = keyring.current()
    log.info("signing key %s (%s; keyring %s)", signer.key_id, keyring.key_file, keyring.keyring_file)
    ledger_options = config.ledger
    ledgers = Ledgers(config.ledger_url, ledger_options.partition,
                      ledger_names(ledger_options.partition, shards=ledger_options.shards, teams=config.teams,
                                   policy_sets=config.policy_sets),
                      lambda opened: Ledger(opened, signer, signer_source=keyring.current),
                      shards=ledger_options.shards,
                      team_of={k.actor: k.team for k in config.auth.keys if k.team},
                      opener=open_store)
    store = ledgers.store
    if preloaded is not None:
        upstream, builder = preloaded.upstream, preloaded.builder
    else:
        upstream = Upstream(config)
        builder = SnapshotBuilder(upstream.count_tokens, apology_detector=ApologyDetector())
    executor = ThreadPoolExecutor(config.server.detector_threads, thread_name_prefix="guardrails")
    loop = asyncio.get_running_loop()
    snapshot = await loop.run_in_executor(executor, _load_snapshot, config, builder,
                                          preloaded.snapshot if preloaded is not None else None)
    for engine in snapshot.engines():
        await loop.run_in_executor(None, warm_threads, executor, config.server.detector_threads, engine, "small")
    engine = snapshot.default.engine
    policies = engine.policies
    await warm_up_upstream(upstream)
    limits = config.server.limits
    large = _large_lane(limits.large_input_threads, engine, limits.large_input_nice)
    metrics = Metrics()
    lanes = ScreenLanes(executor, config.server.detector_threads + limits.max_queued_screens, large,
                        limits.large_input_threads + limits.max_queued_large_screens, limits.large_input_chars,
                        max_chars=limits.max_screen_chars, timeout=limits.screen_timeout_seconds,
                        large_pieces=limits.large_input_pieces, on_change=metrics.lane_changed)
    runtime = PolicyRuntime(config, builder, snapshot, metrics)
    ledger = ledgers.default
    gateway = Gateway(config, runtime, upstream, ledger, metrics, executor,
                      sink=build_sink(config, ledgers, metrics), lanes=lanes,  # ledger.on_unavailable
                      ledgers=ledgers)
    log.info("policies: %s", ", ".join(f"{p.id} ({p.kind}: {', '.join(p.stages)})" for p in policies))
    log.info("policy version %s; policy sets: %s", snapshot.version, ", ".join(sorted(snapshot.sets)))
    settle_heap()
    return Services(config, signer, store, ledger, runtime, upstream, metrics, gateway,
                    Authenticator(config.auth), executor, keyring=keyring, large_executor=large,
                    limiter=KeyLimiter(limits.max_concurrent_per_key, limits.requests_per_second, limits.burst),
                    ledgers=ledgers)


def settle_heap() -> None:
    """After start-up: collect garbage, move every surviving object to the collector's permanent
    generation (``gc.freeze``: later collections no longer walk the models' millions of start-up
    objects, so they stay short instead of stalling requests), and hand freed heap pages back to
    the OS (:func:`proxy.server.admission.limits.trim_heap`; model loading frees large temporary
    buffers: about 70 MB of RSS).
    """
    gc.collect()
    gc.freeze()
    trim_heap()


def warm_up_counters(upstream: Upstream) -> None:
    """The synchronous part of :func:`warm_up_upstream` (also run before a fork, :func:`preload`):
    the OpenAI SDK's resource modules imported, each route's tokenizer loaded."""
    import openai.resources  # noqa: F401  (imported by litellm's first real provider call: ~1.5 s of pydantic models)

    messages = [{"role": "user", "content": "warm up"}]
    for name in list(upstream.routes):
        with contextlib.suppress(Exception):  # its tokenizer loaded now (continuity plans count on the loop)
            upstream.count_tokens(name, messages)


async def warm_up_upstream(upstream: Upstream) -> None:
    """Run each route's litellm code path once with a mocked answer (no provider is called), so the
    first real request does not pay litellm's lazy imports, provider set-up and price-map lookups
    and the OpenAI SDK's resource modules (without it the first request held the
    event loop for 1.5 s importing them). Failures are
    logged and ignored: a route that cannot be warmed still works, only its first call is slower."""
    warm_up_counters(upstream)
    messages = [{"role": "user", "content": "warm up"}]
    for name in list(upstream.routes):
        try:
            await upstream.complete(name, messages, {"mock_response": "ok"})
            stream = await upstream.open_stream(name, messages, {"mock_response": "ok"})
            async for _ in stream:
                pass
        except Exception as exc:  # warm-up only: never fatal
            log.debug("warm-up of route %s skipped: %s", name, exc)


def _large_lane(threads: int, engine: GuardrailEngine, nice: int = 0) -> ThreadPoolExecutor | None:
    """The large-input lane's pool (None when ``threads`` is 0), each thread at OS priority ``nice``
    (:func:`~proxy.server.admission.limits.lower_thread_priority`) and warmed (its own PII analyzer)."""
    if not threads:
        return None
    pool = ThreadPoolExecutor(threads, thread_name_prefix="guardrails-large",
                              initializer=lower_thread_priority, initargs=(nice,))
    warm_threads(pool, threads, engine, "large")
    return pool


def warm_threads(pool: ThreadPoolExecutor, threads: int, engine: GuardrailEngine, lane: str) -> None:
    """Make each of the ``threads`` threads of ``pool`` screen once, so each builds its own PII analyzer
    (spaCy pipeline) now rather than in a request (otherwise a lane's first large
    prompt spends 0.5 s loading one). Each thread screens a different text: a repeated one would be
    answered by the scan cache without reaching the detectors. A barrier keeps one thread from
    taking two of the warm-ups."""
    barrier = threading.Barrier(threads)
    counter = itertools.count()

    def warm() -> None:
        n = next(counter)
        engine.screen_input([{"role": "user", "content": f"Hello, my name is Ada ({lane} {n}). What is 2 + {n}?"}])
        barrier.wait(timeout=300)

    for future in [pool.submit(warm) for _ in range(threads)]:
        future.result()


def create_app(services: Services) -> web.Application:
    """The aiohttp application over already-built services (see :func:`build_services`)."""
    app = web.Application(middlewares=[trace_middleware, error_middleware],
                          client_max_size=services.config.server.max_body_bytes)
    app[SERVICES] = services
    for routes in (chat, embeddings, responses, messages, models, receipts, escalations, health, review, verifier,
                   console, ledger, admin_policies):
        routes.register(app)
    tasks.register(app)  # receipt spool replay (ledger.on_unavailable: spool) + ledger audit

    async def close(_: web.Application) -> None:
        tracing.flush()  # the spans still queued for the collector (no-op when tracing is off)
        if services.ledgers is not None:
            await services.ledgers.close()
        else:
            await services.store.close()
        services.executor.shutdown(wait=False, cancel_futures=True)
        if services.large_executor is not None:
            services.large_executor.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(close)
    return app
