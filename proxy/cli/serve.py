"""``sonate serve``: run the proxy from config.yaml (``--config``, ``$SONATE_CONFIG`` or ./config.yaml).

A configuration or signing key problem found while starting is a usage error (exit 2, one
message naming the file and the key, no traceback, printed by :func:`proxy.cli.main`). So is a
non-loopback ``--host``/``server.host`` while a demo key of the example config.yaml is configured
(:func:`proxy.config.check_exposure`; docs/security.md "Safe defaults").

``server.workers`` > 1: this process becomes the supervisor of that many worker processes, each
running this command again on a socket the supervisor bound (:mod:`proxy.server.admission.workers`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from proxy.cli.common import EXIT_OK, UsageError

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
    from proxy.config import ConfigError, check_exposure, load_config

    config = load_config(args.config)  # before the heavy imports: a bad config fails fast
    host = args.host or config.server.host
    check_exposure(config, host)
    from proxy.server.telemetry import tracing

    tracing.setup(config.observability)  # JSON log lines; OTLP traces when configured (docs/operations.md)
    port = args.port if args.port is not None else config.server.port

    from proxy.server.admission import workers

    sock = workers.inherited_socket()  # set in a worker of a supervisor
    if sock is None and config.server.workers > 1:
        return _supervise(args, config.server.workers, host, port)

    from aiohttp import web

    from proxy import __version__, offline

    offline.keep_torch_out_of_presidio()  # before anything imports presidio/spaCy: no torch in the server
    from proxy.receipts.signing import KeyFileError
    from proxy.server.http.app import build_services, create_app

    async def make_app() -> web.Application:
        app = create_app(await build_services(config))
        if sock is not None:
            workers.label_responses(app, workers.worker_index() or 0)
        return app

    def announce(_: str) -> None:
        logging.getLogger("sonate").info("Sonate Trust Proxy %s listening on http://%s:%s/v1",
                                         __version__, host, port)

    offline.configure_tldextract()
    try:
        where = {"sock": sock} if sock is not None else {"host": host, "port": port}
        web.run_app(make_app(), **where, access_log_format='%a "%r" %s %b %Tfs', print=announce)
    except (ConfigError, KeyFileError, ValueError) as exc:
        raise UsageError(f"cannot start:\n{exc}") from None
    return EXIT_OK


def _supervise(args: argparse.Namespace, count: int, host: str, port: int) -> int:
    """Bind ``host``:``port`` and run ``count`` workers on it until SIGTERM/SIGINT; the supervisor's exit code.

    Raises :class:`UsageError` when the address cannot be bound.
    """
    from proxy import __version__
    from proxy.server.admission import workers

    try:
        socks = workers.bind(host, port, count)
    except OSError as exc:
        raise UsageError(f"cannot start: cannot listen on {host}:{port}: {exc}") from None
    bound = socks[0].getsockname()[1]
    command = [sys.executable, "-m", "proxy", "--log-level", getattr(args, "log_level", None) or "INFO", "serve",
               "--host", host, "--port", str(bound)]
    if args.config:
        command += ["--config", str(Path(args.config).resolve())]
    logging.getLogger("sonate").info("Sonate Trust Proxy %s: %d workers listening on http://%s:%s/v1",
                                     __version__, count, host, bound)
    try:
        return workers.Supervisor(command, socks).run()
    finally:
        for sock in socks:
            sock.close()
