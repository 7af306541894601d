"""``sonate`` commands in processes of their own, forked from a preloaded server instead of new interpreters.

A test that needs a real process (SIGKILL, SIGHUP, exit codes, ``server.workers``, the CLI's log
set-up, a command's output and exit code) but not a fresh interpreter gets one here: a
multiprocessing fork server imports the proxy's command line and its libraries (litellm, the
OpenAI SDK's resources, aiohttp, presidio, spaCy, ONNX Runtime) and builds the detectors of the
repository's policies (:mod:`tests.support.forked_preload`) once per test session, and each
command is a child of it running ``proxy.cli.main(argv)`` with the given environment, its
detectors taken from the fork server's where their ``detector:`` blocks match. :func:`fork_proxy`
starts ``sonate serve`` (output appended to proxy.log; killed, signalled and reaped as a
``python -m proxy serve`` would be); :func:`sonate` runs a command to its end and returns what
``subprocess.run(..., capture_output=True, text=True)`` would. A start then costs the command's
own work, not the imports and the model loading again. The interpreter's own start (``python -m
proxy`` from nothing) keeps its tests through :func:`tests.support.proxy.spawn_proxy` and the
serve-refuses-to-start tests.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Mapping

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


def _run(argv: list[str], env: dict[str, str], out_path: str, err_path: str, cwd: str,
         prepare: Callable[[], None] | None = None, preloaded_models: bool = True) -> None:
    """The child: ``env`` as the environment, stdout and stderr appended to their files, the fork
    server's models in use (``preloaded_models``), ``prepare`` called, then the CLI."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out_path), (2, err_path)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # as PYTHONUNBUFFERED: a killed process loses no line
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["sonate", *argv]
    if preloaded_models:
        from tests.support.forked_preload import use_preloaded_models

        use_preloaded_models()
    if prepare is not None:
        prepare()
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


def fork_proxy(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path,
               prepare: Callable[[], None] | None = None, preloaded_models: bool = True) -> ForkedProcess:
    """Start ``sonate <argv>`` (e.g. ``["serve", "--config", path]``) forked from the fork server,
    with exactly ``env`` as its environment and its output appended to ``log_path``; returns at once.
    ``prepare``: a module-level function (it is pickled by name) the child calls first, e.g. to
    inject a fault (:func:`tests.support.faults.start_proxy_with`). ``preloaded_models``: the
    detectors the fork server built are used (:func:`tests.support.forked_preload.use_preloaded_models`);
    false: the command loads its own, as a new process does."""
    return ForkedProcess(_start(argv, env, str(log_path), str(log_path), str(cwd), prepare, preloaded_models))


def _start(argv: list[str], env: dict[str, str], out_path: str, err_path: str, cwd: str,
           prepare: Callable[[], None] | None = None, preloaded_models: bool = True) -> multiprocessing.process.BaseProcess:
    """A started child of the fork server running :func:`_run` with these arguments."""
    process = _fork_server().Process(target=_run, args=(argv, env, out_path, err_path, cwd, prepare, preloaded_models),
                                     daemon=False)
    process.start()
    return process


def sonate(*argv: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``sonate ARGV`` to its end in a forked child (``env``: its whole environment, default
    this process's; ``cwd``: default the repository root) and return its exit code and output as
    ``subprocess.run([sys.executable, "-m", "proxy", *argv], capture_output=True, text=True)``
    would. subprocess.TimeoutExpired (the child killed) after ``timeout`` s."""
    from tests.support.proxy import ROOT

    with tempfile.TemporaryDirectory(prefix="sonate-cli-") as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        out.touch()
        err.touch()
        process = _start(list(argv), dict(os.environ if env is None else env), str(out), str(err), str(cwd or ROOT))
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["sonate", *argv], timeout)
        return subprocess.CompletedProcess(["sonate", *argv], process.exitcode, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))
