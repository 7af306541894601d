"""``sonate serve`` in a process of its own, forked from a preloaded server instead of a new interpreter.

A test that needs a real process (SIGKILL, SIGHUP, exit codes, ``server.workers``, the CLI's log
set-up) but not a fresh interpreter gets one here: :func:`fork_proxy` asks a multiprocessing
fork server that imported the proxy's command line and its libraries (litellm, the OpenAI SDK's
resources, aiohttp, presidio, spaCy, ONNX Runtime) once per test session for a child, which runs
``proxy.cli.main(["serve", "--config", ...])`` with the test environment and its output appended
to proxy.log. A start then costs the models and the services, not ~5 s of imports; the process is
killed, signalled and reaped as a ``python -m proxy serve`` would be. The interpreter's own start
(``python -m proxy serve`` from nothing) keeps its tests through
:func:`tests.support.proxy.spawn_proxy`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

#: Imported once by the fork server; every forked proxy starts with them loaded.
PRELOAD = ["tests.support.forked_preload"]

_lock = threading.Lock()
_context: multiprocessing.context.ForkServerContext | None = None


def _fork_server() -> multiprocessing.context.ForkServerContext:
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _context = context
        return _context


def _serve(argv: list[str], env: dict[str, str], log_path: str, cwd: str) -> None:
    """The child: the test environment, stdout and stderr appended to ``log_path``, then the CLI."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # as PYTHONUNBUFFERED: a killed process loses no line
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from proxy.cli import main

    raise SystemExit(main(argv))


class ForkedProcess:
    """The ``subprocess.Popen``-like handle of a forked proxy (``pid``, ``poll``, ``wait``,
    ``send_signal``, ``terminate``, ``kill``, ``returncode``: negative after a signal, as Popen's)."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        return int(self._process.pid or 0)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        """None while the process runs, else its exit code."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; subprocess.TimeoutExpired after ``timeout`` s."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("forked proxy", timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_proxy(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> ForkedProcess:
    """Start ``sonate <argv>`` (e.g. ``["serve", "--config", path]``) forked from the fork server,
    with exactly ``env`` as its environment and its output appended to ``log_path``; returns at once."""
    process = _fork_server().Process(target=_serve, args=(argv, env, str(log_path), str(cwd)), daemon=False)
    process.start()
    return ForkedProcess(process)
