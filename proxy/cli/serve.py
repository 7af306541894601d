"""``sonate serve``: run the proxy from config.yaml (``--config``, ``$SONATE_CONFIG`` or ./config.yaml).

A configuration or signing key problem found while starting is a usage error (exit 2, one
message naming the file and the key, no traceback, printed by :func:`proxy.cli.main`). So is a
non-loopback ``--host``/``server.host`` while a demo key of the example config.yaml is configured
(:func:`proxy.config.check_exposure`; docs/security.md "Safe defaults").

``server.workers`` > 1: this process becomes the supervisor of that many worker processes: it
binds the sockets, loads the models once, then forks the workers, which share them
(:mod:`proxy.server.admission.workers`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import socket
import threading
import time
from typing import TYPE_CHECKING, Iterator

from proxy.cli.common import EXIT_OK, UsageError, report_usage_error

if TYPE_CHECKING:
    from proxy.config import Config
    from proxy.server.http.app import Preloaded

__all__ = ["HELP", "add_arguments", "run"]

HELP = "run the proxy (config.yaml, or $SONATE_CONFIG)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config``, ``--host`` and ``--port`` to ``parser``."""
    parser.add_argument("--config", help="path of config.yaml (default: $SONATE_CONFIG or ./config.yaml)")
    parser.add_argument("--host", help="override server.host")
    parser.add_argument("--port", type=int, help="override server.port")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; return :data:`EXIT_OK`.

    Raises ``ConfigError`` for an invalid config.yaml or a demo key on a non-loopback host, and :class:`UsageError` (``cannot start:``)
    when the services cannot be built: an unusable signing key, an invalid setting.
    """
    from proxy.config import check_exposure, load_config

    config = load_config(args.config)  # before the heavy imports: a bad config fails fast
    host = args.host or config.server.host
    check_exposure(config, host)
    _check_before_imports(config)  # so do a bad signing key and an invalid policy
    from proxy.server.telemetry import tracing

    tracing.setup(config.observability)  # JSON log lines; OTLP traces when configured (docs/operations.md)
    port = args.port if args.port is not None else config.server.port

    if config.server.workers > 1:
        return _supervise(config, config.server.workers, host, port)
    return _serve(config, host, port, None, None)


@contextlib.contextmanager
def _cannot_start(*errors: type[Exception]) -> Iterator[None]:
    """Turn any of ``errors`` raised inside into :class:`UsageError` ``cannot start:`` and its message."""
    try:
        yield
    except errors as exc:
        raise UsageError(f"cannot start:\n{exc}") from None


def _check_before_imports(config: Config) -> None:
    """Load the signing key and keyring (creating the key on first start, mode 0600 enforced) and
    read the policy files and policy sets, before the serving modules are imported: an unusable key
    or an invalid policy stops the start in a fraction of a second instead of after seconds of
    imports. The services read both again when they are built, and check each policy's
    ``detector:`` block then (that needs the detectors' modules).

    Raises :class:`UsageError` (``cannot start:`` and the file's problem).
    """
    from proxy.config import ConfigError
    from proxy.guardrails.policy_sets import load_policy_bundle
    from proxy.receipts.keyring import Keyring
    from proxy.receipts.signing import KeyFileError

    with _cannot_start(ConfigError, KeyFileError):
        Keyring(*config.signing_paths).load()
        load_policy_bundle(config)


def _serve(config: Config, host: str, port: int, sock: socket.socket | None, index: int | None,
           preloaded: Preloaded | None = None) -> int:
    """Serve on ``sock`` (a worker's) or ``host``:``port`` until SIGTERM/SIGINT; :data:`EXIT_OK`.
    ``index``: the worker's (its responses are labelled); ``preloaded``: the models a supervisor loaded.

    Raises :class:`UsageError` when the services cannot be built.
    """
    from aiohttp import web

    from proxy import __version__, offline
    from proxy.config import ConfigError
    from proxy.server.admission import workers

    offline.keep_torch_out_of_presidio()  # before anything imports presidio/spaCy: no torch in the server
    loading = _load_embeddings_beside_imports() if preloaded is None else None
    from proxy.receipts.signing import KeyFileError
    from proxy.server.http.app import build_services, create_app

    if loading is not None:
        loading.join()

    async def make_app() -> web.Application:
        app = create_app(await build_services(config, preloaded))
        if index is not None:
            workers.label_responses(app, index)
        return app

    def announce(_: str) -> None:
        logging.getLogger("sonate").info("Sonate Trust Proxy %s listening on http://%s:%s/v1%s", __version__, host,
                                         port, "" if index is None else f" (worker {index})")

    offline.configure_tldextract()
    where = {"sock": sock} if sock is not None else {"host": host, "port": port}
    with _cannot_start(ConfigError, KeyFileError, ValueError):
        web.run_app(make_app(), **where, access_log_format='%a "%r" %s %b %Tfs', print=announce)
    return EXIT_OK


def _load_embeddings_beside_imports() -> threading.Thread:
    """Start loading the sentence-embedding model (:func:`proxy.guardrails.detectors.embeddings.warm_up`)
    in a thread of its own and return the thread; join it before the services are built. The
    serving modules imported meanwhile (litellm and the OpenAI SDK: seconds of Python holding the
    GIL) leave it the time ONNX Runtime spends without the GIL (the graph's session set-up, the
    exactness probe's runs), so most of the load is hidden behind them. A failure is left to the
    services' own load, which raises it (a model that fails to load is not kept)."""
    from proxy.guardrails.detectors import embeddings
    from proxy.server.admission.limits import pin_mmap_threshold

    pin_mmap_threshold()  # before the model's buffers are allocated, as build_services does

    def load() -> None:
        with contextlib.suppress(Exception):
            embeddings.warm_up()

    thread = threading.Thread(target=load, name="sonate-embeddings", daemon=True)
    thread.start()
    return thread


def _supervise(config: Config, count: int, host: str, port: int) -> int:
    """Bind ``host``:``port``, load the models once, and run ``count`` workers forked from this
    process on it until SIGTERM/SIGINT; the supervisor's exit code.

    Raises :class:`UsageError` when the address cannot be bound or the models cannot be loaded
    (configuration, signing key).
    """
    from proxy import __version__, offline
    from proxy.config import ConfigError
    from proxy.server.admission import workers

    try:
        socks = workers.bind(host, port, count)
    except OSError as exc:
        raise UsageError(f"cannot start: cannot listen on {host}:{port}: {exc}") from None
    bound = socks[0].getsockname()[1]
    metrics_dir = workers.metrics_directory()  # before the models' modules import prometheus_client
    log = logging.getLogger("sonate")
    try:
        offline.keep_torch_out_of_presidio()
        from proxy.receipts.signing import KeyFileError
        from proxy.server.http.app import preload

        started = time.monotonic()
        with _cannot_start(ConfigError, KeyFileError, ValueError):
            preloaded = preload(config)
        log.info("models loaded in %.1f s, shared by %d workers", time.monotonic() - started, count)

        def serve_worker(index: int, sock: socket.socket) -> int:  # in a forked worker
            try:
                return _serve(config, host, bound, sock, index, preloaded)
            except ConfigError as exc:
                return report_usage_error(f"configuration error:\n{exc}")
            except (UsageError, KeyFileError) as exc:
                return report_usage_error(exc)

        log.info("Sonate Trust Proxy %s: %d workers listening on http://%s:%s/v1", __version__, count, host, bound)
        return workers.Supervisor(serve_worker, socks, metrics_dir=metrics_dir).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        for sock in socks:
            sock.close()
