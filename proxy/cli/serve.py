"""``sonate serve``: run the proxy from config.yaml (``--config``, ``$SONATE_CONFIG`` or ./config.yaml).

A configuration or signing key problem found while starting is a usage error (exit 2, one
message naming the file and the key, no traceback, printed by :func:`proxy.cli.main`). So is a
non-loopback ``--host``/``server.host`` while a demo key of the example config.yaml is configured
(:func:`proxy.config.check_exposure`; docs/security.md "Safe defaults").
"""

from __future__ import annotations

import argparse
import logging

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

    from aiohttp import web

    from proxy import __version__, offline

    offline.keep_torch_out_of_presidio()  # before anything imports presidio/spaCy: no torch in the server
    from proxy.receipts.signing import KeyFileError
    from proxy.server.app import build_services, create_app

    port = args.port if args.port is not None else config.server.port

    async def make_app() -> web.Application:
        return create_app(await build_services(config))

    def announce(_: str) -> None:
        logging.getLogger("sonate").info("Sonate Trust Proxy %s listening on http://%s:%s/v1",
                                         __version__, host, port)

    offline.configure_tldextract()
    try:
        web.run_app(make_app(), host=host, port=port, access_log_format='%a "%r" %s %b %Tfs', print=announce)
    except (ConfigError, KeyFileError, ValueError) as exc:
        raise UsageError(f"cannot start:\n{exc}") from None
    return EXIT_OK
