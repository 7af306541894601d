"""The proxy served inside the test process: the real app over the real services on a free port.

:func:`serve_in_process` builds the services of a config.yaml (``build_services`` + ``create_app``,
exactly what ``sonate serve`` runs) and serves them with aiohttp's ``AppRunner``/``TCPSite`` on
an event loop of its own, in a background thread, so a test talks HTTP to a URL as it would to
a ``sonate serve`` subprocess. What only a process has (signals, exit codes, ``server.workers``,
the CLI's start-up checks and log set-up) is tested through the subprocess launcher
(:func:`tests.support.proxy.spawn_proxy`).

Models load once per test session: every in-process proxy's detectors come from one
process-wide cache keyed by :func:`proxy.guardrails.registry.detector_key` and
``$SONATE_MODELS_DIR`` (:func:`shared_registry`); a policy whose ``detector:`` block differs
still gets a detector of its own, as in production.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
import threading
import traceback
from pathlib import Path
from typing import Any

#: Prefix of the name of each in-process proxy's serving thread (its event loop runs there).
THREAD_PREFIX = "sonate-in-process-"
#: The log line format of ``sonate serve`` (proxy.cli: ``logging.basicConfig``).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The access log line format of ``sonate serve`` (proxy/cli/serve.py).
ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tfs'
#: Loggers set to INFO (when unset) so the in-process proxy logs what ``sonate serve`` logs.
PROXY_LOGGERS = ("sonate", "aiohttp.access", "aiohttp.server", "aiohttp.web")

_numbers = itertools.count(1)
_live_threads: set[str] = set()  # serving threads of the running in-process proxies
_registry_lock = threading.Lock()
_shared: Any = None


class _CachingFactory:
    """A detector factory that returns the detector built earlier for the same block (and models dir)."""

    def __init__(self, factory: Any, cache: dict[str, Any], lock: threading.Lock) -> None:
        self.factory, self.cache, self.lock = factory, cache, lock

    def __call__(self, policy: Any) -> Any:
        from proxy.guardrails.models import MODELS_DIR_ENV
        from proxy.guardrails.registry import detector_key

        key = detector_key(policy) + "|" + os.environ.get(MODELS_DIR_ENV, "")
        with self.lock:
            if key not in self.cache:
                self.cache[key] = self.factory(policy)
            return self.cache[key]


def shared_registry() -> Any:
    """The product's detector registry (:func:`proxy.guardrails.registry.default_registry`) with each
    factory cached process-wide: the first in-process proxy loads the models, later ones reuse them."""
    global _shared
    from proxy.guardrails.registry import default_registry

    with _registry_lock:
        if _shared is None:
            registry, cache, lock = default_registry(), {}, threading.Lock()
            for kind, factory in list(registry._factories.items()):
                registry._factories[kind] = _CachingFactory(factory, cache, lock)
            _shared = registry
        return _shared


def _install_shared_registry() -> None:
    """Make SnapshotBuilder use :func:`shared_registry` when built on an in-process proxy's thread
    (elsewhere, e.g. a unit test's own SnapshotBuilder, the product's registry as it is). Idempotent."""
    from proxy.server.flow import policy_runtime

    original = policy_runtime.default_registry
    if getattr(original, "in_process_aware", False):
        return

    def default_registry() -> Any:
        if threading.current_thread().name.startswith(THREAD_PREFIX):
            return shared_registry()
        return original()

    default_registry.in_process_aware = True  # type: ignore[attr-defined]
    policy_runtime.default_registry = default_registry


class _ProxyLogFilter(logging.Filter):
    """Keep the records of one in-process proxy: those not emitted on another live proxy's serving thread."""

    def __init__(self, thread_name: str) -> None:
        super().__init__()
        self.thread_name = thread_name

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName == self.thread_name or record.threadName not in _live_threads


class InProcessServer:
    """The ``subprocess.Popen``-like handle of an in-process proxy (``poll``, ``wait``, ``terminate``,
    ``kill``, ``returncode``), so :class:`~tests.support.proxy.RunningProxy` and ``stop_proxy`` work
    unchanged. ``returncode``: None while serving, 0 once stopped, 2 when start-up failed (the
    traceback is in the log). There is no ``pid``: signals need the subprocess launcher."""

    def __init__(self, config_path: Path, log_path: Path, port: int) -> None:
        self.config_path, self.log_path, self.port = config_path, log_path, port
        self.returncode: int | None = None
        self.thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{next(_numbers)}", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handler = logging.FileHandler(log_path, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._handler.addFilter(_ProxyLogFilter(self.thread.name))

    def start(self) -> "InProcessServer":
        _install_shared_registry()
        _configure_logging()
        _live_threads.add(self.thread.name)
        logging.getLogger().addHandler(self._handler)
        self.thread.start()
        return self

    def _run(self) -> None:
        from aiohttp import web

        from proxy.config import load_config
        from proxy.server.http.app import build_services, create_app

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = None
        try:
            config = load_config(self.config_path)
            app = create_app(loop.run_until_complete(build_services(config)))
            gc.unfreeze()  # build_services froze the heap for a serving process; the test process goes on
            runner = web.AppRunner(app, access_log_format=ACCESS_LOG_FORMAT)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, config.server.host, self.port).start())
            logging.getLogger("sonate").info("Sonate Trust Proxy (in process) listening on http://%s:%s/v1",
                                             config.server.host, self.port)
            self._loop = loop
            loop.run_forever()
            self.returncode = 0
        except BaseException:  # noqa: BLE001  (start-up failure: reported like a process's exit)
            logging.getLogger("sonate").error("cannot start:\n%s", traceback.format_exc())
            self.returncode = 2
        finally:
            self._loop = None
            try:
                if runner is not None:
                    loop.run_until_complete(runner.cleanup())
                _cancel_remaining(loop)
            finally:
                loop.close()
                self._detach()

    def _detach(self) -> None:
        logging.getLogger().removeHandler(self._handler)
        self._handler.close()
        _live_threads.discard(self.thread.name)

    def poll(self) -> int | None:
        """None while the proxy runs, else its return code (0 stopped, 2 start-up failed)."""
        return None if self.thread.is_alive() else (self.returncode if self.returncode is not None else 0)

    def terminate(self) -> None:
        """Stop serving (the app's clean-up runs, as on SIGTERM); returns at once."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    kill = terminate

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the serving thread to end; TimeoutError (subprocess.TimeoutExpired's base) after ``timeout`` s."""
        import subprocess

        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("in-process proxy", timeout or 0)
        return self.poll() or 0


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending on ``loop`` and let them finish (as ``web.run_app`` does)."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def _configure_logging() -> None:
    """What ``sonate serve`` sets for its logs (proxy.cli): INFO for the proxy's loggers, the noisy
    libraries floored, library DEBUG bodies redacted; the test process's root level is left alone."""
    from proxy import cli

    for name in PROXY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    for name, floor in cli._NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(floor)
    cli._install_redaction()


def serve_in_process(config_path: Path, port: int) -> InProcessServer:
    """Start serving ``config_path`` on ``port`` in this process; log lines go to proxy.log beside it.
    Returns at once (wait with :func:`tests.support.proxy.wait_until_up`)."""
    return InProcessServer(config_path, config_path.parent / "proxy.log", port).start()
