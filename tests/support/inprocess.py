"""The proxy served inside the test process: the real app over the real services on a free port.

:func:`serve_in_process` builds the services of a config.yaml (``build_services`` + ``create_app``,
exactly what ``sonate serve`` runs) and serves them with aiohttp's ``AppRunner``/``TCPSite``, so a
test talks HTTP to a URL as it would to a ``sonate serve`` subprocess. What only a process has
(signals, exit codes, ``server.workers``, the CLI's start-up checks and log set-up) is tested
through the subprocess launcher (:func:`tests.support.proxy.spawn_proxy`).

Every in-process proxy runs on one event loop, in one background thread of the session
(:func:`server_loop`): litellm keeps process-wide asyncio state (its logging worker) bound to one
loop, and would log tracebacks if several loops used it at once.

Models load once per test session: every in-process proxy's detectors come from one
process-wide cache keyed by :func:`proxy.guardrails.registry.detector_key` and
``$SONATE_MODELS_DIR`` (:func:`shared_registry`); a policy whose ``detector:`` block differs
still gets a detector of its own, as in production.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import itertools
import logging
import os
import subprocess
import threading
import traceback
from pathlib import Path
from typing import Any

# The openai SDK reads httpx2 from sys.modules when a request is built; imported first by a proxy's
# thread while a test's client threads send requests, a half-initialised module is seen there.
with contextlib.suppress(ImportError):
    import httpx2  # noqa: F401

#: Name of the thread whose event loop serves every in-process proxy.
THREAD_NAME = "sonate-in-process"
#: The log line format of ``sonate serve`` (proxy.cli: ``logging.basicConfig``).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The access log line format of ``sonate serve`` (proxy/cli/serve.py).
ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tfs'
#: Loggers set to INFO (when unset) so the in-process proxy logs what ``sonate serve`` logs.
PROXY_LOGGERS = ("sonate", "aiohttp.access", "aiohttp.server", "aiohttp.web")
#: How long a stop waits for the app's clean-up (s).
STOP_TIMEOUT = 60

#: The in-process proxy whose code is running (its number; None outside any proxy's tasks).
_current: contextvars.ContextVar[int | None] = contextvars.ContextVar("sonate_test_proxy", default=None)
_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def server_loop() -> asyncio.AbstractEventLoop:
    """The session's serving event loop, started (in a daemon thread) on first use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=THREAD_NAME, daemon=True).start()
            _loop = loop
        return _loop


_numbers = itertools.count(1)
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
    """Make SnapshotBuilder use :func:`shared_registry` when built by an in-process proxy (on the
    serving thread); elsewhere (a unit test's own SnapshotBuilder) the product's registry as it is.
    Idempotent."""
    from proxy.server.flow import policy_runtime

    with _registry_lock:
        original = policy_runtime.default_registry
        if getattr(original, "in_process_aware", False):
            return

        def default_registry() -> Any:
            if threading.current_thread().name == THREAD_NAME:
                return shared_registry()
            return original()

        default_registry.in_process_aware = True  # type: ignore[attr-defined]
        policy_runtime.default_registry = default_registry


class _ProxyLogFilter(logging.Filter):
    """Keep the records of one in-process proxy: its own, and those of threads outside any proxy's
    tasks (detector and library worker threads); not those of the tests' main thread."""

    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number

    def filter(self, record: logging.LogRecord) -> bool:
        number = _current.get()
        return number == self.number or (number is None and record.threadName != "MainThread")


class InProcessServer:
    """The ``subprocess.Popen``-like handle of an in-process proxy (``poll``, ``wait``, ``terminate``,
    ``kill``, ``returncode``), so :class:`~tests.support.proxy.RunningProxy` and ``stop_proxy`` work
    unchanged. ``returncode``: None while serving, 0 once stopped, 2 when start-up failed (the
    traceback is in the log). There is no ``pid``: signals need the subprocess launcher."""

    def __init__(self, config_path: Path, log_path: Path, port: int) -> None:
        self.config_path, self.log_path, self.port = config_path, log_path, port
        self.number = next(_numbers)
        self.returncode: int | None = None
        self._runner: Any = None
        self._started: concurrent.futures.Future | None = None
        self._stopped: concurrent.futures.Future | None = None
        self._handler = logging.FileHandler(log_path, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._handler.addFilter(_ProxyLogFilter(self.number))

    def start(self) -> "InProcessServer":
        _install_shared_registry()
        _configure_logging()
        logging.getLogger().addHandler(self._handler)
        context = contextvars.copy_context()
        context.run(_current.set, self.number)  # the proxy's tasks and callbacks inherit its number
        loop = server_loop()
        self._started = context.run(asyncio.run_coroutine_threadsafe, self._serve(), loop)
        self._started.add_done_callback(self._on_started)
        return self

    async def _serve(self) -> None:
        from aiohttp import web

        from proxy.config import load_config
        from proxy.server.http.app import build_services, create_app

        config = load_config(self.config_path)
        app = create_app(await build_services(config))
        gc.unfreeze()  # build_services froze the heap for a serving process; the test process goes on
        runner = web.AppRunner(app, access_log_format=ACCESS_LOG_FORMAT)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, config.server.host, self.port).start()
        logging.getLogger("sonate").info("Sonate Trust Proxy (in process) listening on http://%s:%s/v1",
                                         config.server.host, self.port)

    def _on_started(self, future: concurrent.futures.Future) -> None:
        error = future.exception()
        if error is None:
            return
        text = "".join(traceback.format_exception(error))
        self._handler.handle(logging.makeLogRecord({"name": "sonate", "levelno": logging.ERROR,
                                                    "levelname": "ERROR", "msg": "cannot start:\n%s",
                                                    "args": (text,)}))
        self._finish(2)

    def _finish(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        logging.getLogger().removeHandler(self._handler)
        self._handler.close()

    def poll(self) -> int | None:
        """None while the proxy runs (or starts), else its return code (0 stopped, 2 start-up failed)."""
        return self.returncode

    def terminate(self) -> None:
        """Stop serving: the app's clean-up runs (as on SIGTERM); returns at once."""
        if self._stopped is None and self.returncode is None:
            self._stopped = asyncio.run_coroutine_threadsafe(self._stop(), server_loop())

    kill = terminate

    async def _stop(self) -> None:
        try:
            if self._started is not None and not self._started.done():
                await asyncio.wrap_future(self._started)
        except BaseException:
            pass
        if self._runner is not None:
            await self._runner.cleanup()
        self._finish(0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait until stopped; subprocess.TimeoutExpired after ``timeout`` s (None: :data:`STOP_TIMEOUT`)."""
        if self.returncode is not None:
            return self.returncode
        if self._stopped is None:
            raise subprocess.TimeoutExpired("in-process proxy (not stopping)", timeout or 0)
        try:
            self._stopped.result(timeout if timeout is not None else STOP_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise subprocess.TimeoutExpired("in-process proxy", timeout or 0) from None
        return self.returncode or 0


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
