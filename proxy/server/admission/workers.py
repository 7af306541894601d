"""``server.workers``: several serving processes on one port (docs/operations.md "Workers").

The pre-fork model of gunicorn with ``preload_app``: ``sonate serve`` with ``server.workers: N`` > 1
becomes a *supervisor*. It opens N listening sockets on the one address with ``SO_REUSEPORT``
(Linux spreads new connections over them by a hash of the connection's addresses and ports),
loads the configuration's models once (:func:`proxy.server.http.app.preload`: the detectors, the
ONNX encoder, spaCy pipelines for every detector thread; no event loop, no thread left running),
then forks N workers from itself: worker *i* serves on socket *i*, in an event loop of its own,
with the loaded models it inherited. Their memory pages stay shared between the supervisor and
every worker until one of them writes to a page (copy-on-write; :func:`gc.freeze` before each
fork keeps the collector from writing to every object it inherited), so N workers take far less
than N times one worker's memory (docs/operations.md "Workers" gives the figures). The
supervisor keeps every socket open, so connections that reach a worker still starting, or being
restarted, wait in its socket's backlog instead of being refused. (One shared socket would not
spread load: asyncio accepts up to its backlog of waiting connections in one go, so one worker
would take a whole burst.) ``SO_REUSEPORT`` lets another process of the same user bind the same
port too: run the proxy under its own user.

- Ledger: every worker appends to the configured store; the stores' compare-and-set appends keep one
  chain across processes (Redis: the group-commit turn; SQLite: ``BEGIN IMMEDIATE`` on the file).
  Each worker opens its own connections after the fork.
- Metrics: the supervisor creates a per-run ``$PROMETHEUS_MULTIPROC_DIR`` (removed when it stops)
  before anything imports prometheus_client; any worker's ``/metrics`` shows the totals of all
  (:mod:`proxy.server.telemetry.metrics`). A dead worker's live-gauge files are dropped
  (``mark_process_dead``); its counters stay in the totals.
- Signals: SIGHUP to the supervisor is forwarded to every worker (each reloads its policies; the
  supervisor keeps the models it loaded); SIGTERM or SIGINT to the supervisor sends SIGTERM to
  every worker (aiohttp's graceful shutdown: in-flight requests finish, receipts are appended)
  and waits up to ``grace_s`` before SIGKILL. A worker that exits on its own is logged and
  replaced by a new fork of the supervisor (after 1 s, doubling up to 30 s while it keeps dying
  within 10 s of its start); the new worker reads the policy files again, so a policy reload
  made before its predecessor died holds. One that exits with the usage-error code (2: bad
  configuration or key) stops the whole server with that code, as restarting cannot fix it. A
  worker is sent SIGTERM by the kernel if the supervisor itself dies (Linux ``PR_SET_PDEATHSIG``;
  a forked worker whose supervisor died before that was set exits at once).
- A forked worker starts with the default SIGTERM and SIGINT handling and ignores SIGHUP until
  its app installs the reload handler (it reads the policy files as they are while it starts);
  the supervisor's handlers are never run in it (those signals are held from the fork until
  then). It closes the other workers' sockets, and leaves the process with ``os._exit`` once its
  target returned (for ``sonate serve``: after aiohttp's shutdown closed the ledger, the receipt
  sink and the spool), so the supervisor's objects and exit handlers, inherited, are never run in
  a worker (a temporary directory of the supervisor's is not removed by a worker's exit).
- Every response of a worker carries ``x-sonate-worker: <index>`` (0..N-1), so an operator can see
  the spread.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["METRICS_DIR_ENV", "WORKER_HEADER", "Supervisor", "WorkerTarget", "bind", "label_responses",
           "metrics_directory"]

log = logging.getLogger("sonate.workers")

#: The response header naming the worker that answered.
WORKER_HEADER = "x-sonate-worker"
#: A worker exit code that stops the supervisor instead of a restart (proxy.cli.common.EXIT_USAGE).
EXIT_USAGE = 2
#: Seconds of life under which a worker's exit counts as a crash loop (the restart delay doubles).
CRASH_LOOP_S = 10.0
#: Restart delays in seconds: first, and the ceiling of the doubling.
RESTART_DELAY_S, MAX_RESTART_DELAY_S = 1.0, 30.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
#: The signals the supervisor handles (and a worker gets the default handling of).
_FORWARDED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
#: prometheus_client's multiprocess directory variable (:data:`proxy.server.telemetry.metrics.MULTIPROC_DIR_ENV`,
#: not imported here: that module imports prometheus_client, which reads the variable at import).
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: What a forked worker runs: ``(index, listening socket) -> exit code``.
WorkerTarget = Callable[[int, socket.socket], int]


def bind(host: str, port: int, count: int, backlog: int = 1024) -> list[socket.socket]:
    """``count`` inheritable listening TCP sockets on ``host``:``port`` with ``SO_REUSEPORT`` (``port`` 0:
    one free port for all; ``""``: every interface), ``SO_REUSEADDR`` as aiohttp sets it.

    Raises ``OSError`` when the address cannot be bound, or on a platform without ``SO_REUSEPORT``.
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        raise OSError("server.workers > 1 needs SO_REUSEPORT (Linux, BSD, macOS)")
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            address = sock.getsockname()  # port 0: the rest join the port the first one got
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def label_responses(app: Any, index: int) -> None:
    """Add ``x-sonate-worker: index`` to every response of the aiohttp ``app`` (its ``on_response_prepare``)."""
    value = str(index)

    async def label(_: Any, response: Any) -> None:
        response.headers[WORKER_HEADER] = value

    app.on_response_prepare.append(label)


def _die_with_parent() -> None:  # pragma: no cover  (runs in the child after the fork)
    """In a new worker: ask Linux for SIGTERM when the supervisor dies (no-op elsewhere)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class _Forked:
    """A forked worker process, with the part of ``subprocess.Popen``'s interface the supervisor uses
    (``pid``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``; ``returncode`` negative
    for a signal, as Popen's)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = 1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class _Worker:
    index: int
    process: _Forked | None = None
    started: float = 0.0
    delay: float = 0.0
    restart_at: float | None = None


class Supervisor:
    """Runs one worker per socket of ``socks`` until SIGTERM/SIGINT (module docstring).

    ``target``: what each worker runs (a :data:`WorkerTarget`: each worker is a fork of this process
    that calls it with its index and socket, then exits with the code it returns); ``socks``: the
    listening sockets of :func:`bind`, one per worker; ``grace_s``: seconds a
    worker gets to finish after SIGTERM before SIGKILL; ``metrics_dir``: the run's
    ``$PROMETHEUS_MULTIPROC_DIR`` when the caller made it (a fork's target may have imported
    prometheus_client before the fork: :func:`metrics_directory`), else one is made by :meth:`run`;
    either is removed when :meth:`run` returns.
    """

    def __init__(self, target: WorkerTarget, socks: list[socket.socket], *, grace_s: float = 70.0,
                 metrics_dir: str | None = None) -> None:
        """Configure; nothing starts until :meth:`run`. Raises ValueError without sockets."""
        if not socks:
            raise ValueError("at least one listening socket is needed")
        self.target = target
        self.socks = socks
        self.grace_s = grace_s
        self.workers = [_Worker(i) for i in range(len(socks))]
        self._stopping = False  # a plain flag: set from signal handlers (an Event's lock could deadlock there)
        self._stopped_by: int | None = None
        self.metrics_dir: str | None = metrics_dir

    def stop(self, sig: int | None = None) -> None:
        """Ask :meth:`run` to stop every worker and return (safe from a signal handler; ``sig``: the
        signal that asked, logged by :meth:`run`)."""
        self._stopping, self._stopped_by = True, sig

    def forward(self, sig: int) -> None:
        """Send ``sig`` to every running worker (SIGHUP: each reloads its policies,
        docs/operations.md "Policy sets and hot reload"); safe from a signal handler."""
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(sig)

    def run(self) -> int:
        """Start the workers, keep them running, stop them on SIGTERM/SIGINT; return the exit code
        (0, or :data:`EXIT_USAGE` when a worker reported a usage error). Call from the main thread."""
        if self.metrics_dir is None:
            self.metrics_dir = tempfile.mkdtemp(prefix="sonate-metrics-")
        handlers = {sig: signal.signal(sig, lambda number, _: self.stop(number)) for sig in (signal.SIGTERM, signal.SIGINT)}
        handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: self.forward(signal.SIGHUP))
        code = 0
        try:
            for worker in self.workers:
                self._spawn(worker)
            while True:
                time.sleep(0.2)
                code = 0 if self._stopping else self._tend()
                if self._stopping or code:
                    break
            if self._stopped_by is not None:
                log.info("%s received: stopping the workers", _signal_name(self._stopped_by))
        finally:
            self._shutdown()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return code

    def _spawn(self, worker: _Worker) -> None:
        worker.process = self._fork(worker.index)
        worker.started, worker.restart_at = time.monotonic(), None
        log.info("worker %d started (pid %d)", worker.index, worker.process.pid)

    def _fork(self, index: int) -> _Forked:
        """Fork a worker that runs :attr:`target` (index, its socket) and exits with its code."""
        supervisor = os.getpid()
        gc.freeze()  # what the supervisor allocated since: never walked (so never written) by a worker's collector
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # Held until the new worker has the default handling: not run by the supervisor's handlers in it.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            return _Forked(pid)
        code = 1  # pragma: no cover  (the rest runs in the worker; tests/e2e/test_workers.py covers it)
        try:
            self._become_worker(index, supervisor)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            code = self.target(index, self.socks[index])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            traceback.print_exc()
        finally:
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)

    def _become_worker(self, index: int, supervisor: int) -> None:  # pragma: no cover  (in the worker)
        """In a new fork: die with the supervisor, the worker's signal handling (module docstring), only
        this worker's socket, the run's metrics directory."""
        _die_with_parent()
        if os.getppid() != supervisor:  # the supervisor died before the request above took effect
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's reload handler: not a reason to die
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for i, sock in enumerate(self.socks):
            if i != index:
                sock.close()
        os.environ[METRICS_DIR_ENV] = str(self.metrics_dir)

    def _tend(self) -> int:
        """Restart workers that exited (after their delay); a non-zero return stops the supervisor."""
        now = time.monotonic()
        for worker in self.workers:
            if worker.process is None:
                if worker.restart_at is not None and now >= worker.restart_at:
                    self._spawn(worker)
                continue
            status = worker.process.poll()
            if status is None:
                continue
            pid, worker.process = worker.process.pid, None
            self._forget(pid)
            if status == EXIT_USAGE:
                log.error("worker %d (pid %d) exited with a usage error (code %d): stopping", worker.index, pid, status)
                return EXIT_USAGE
            how = f"code {status}" if status >= 0 else f"signal {_signal_name(-status)}"
            crash_loop = now - worker.started < CRASH_LOOP_S
            worker.delay = min(MAX_RESTART_DELAY_S, worker.delay * 2) if crash_loop and worker.delay else RESTART_DELAY_S
            worker.restart_at = now + worker.delay
            log.error("worker %d (pid %d) exited with %s; restarting in %.0f s", worker.index, pid, how, worker.delay)
        return 0

    def _forget(self, pid: int) -> None:
        """Drop a dead worker's live-gauge files (prometheus_client ``mark_process_dead``)."""
        from prometheus_client import multiprocess

        try:
            multiprocess.mark_process_dead(pid, self.metrics_dir)
        except OSError as exc:
            log.warning("metrics files of worker pid %d not removed: %s", pid, exc)

    def _shutdown(self) -> None:
        """SIGTERM every running worker, wait up to ``grace_s``, SIGKILL what is left."""
        running = [w.process for w in self.workers if w.process is not None and w.process.poll() is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + self.grace_s
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker pid %d did not stop within %.0f s: killed", process.pid, self.grace_s)
                process.kill()
                process.wait()
        for worker in self.workers:
            worker.process = None
        log.info("all workers stopped")


def metrics_directory() -> str:
    """A new per-run ``$PROMETHEUS_MULTIPROC_DIR``, also set in this process's environment: call it
    before anything imports prometheus_client (which reads the variable at import) when workers are
    forked from this process; hand it to :class:`Supervisor` (``metrics_dir``), which removes it."""
    if "prometheus_client" in sys.modules:
        log.warning("prometheus_client was imported before %s was set: /metrics shows one worker's counts",
                    METRICS_DIR_ENV)
    directory = tempfile.mkdtemp(prefix="sonate-metrics-")
    os.environ[METRICS_DIR_ENV] = directory
    return directory
