"""``server.workers``: several serving processes on one port (docs/operations.md "Workers").

The pre-fork model of gunicorn, without forking a loaded interpreter: ``sonate serve`` with
``server.workers: N`` > 1 becomes a small *supervisor* that loads no model. It opens N listening
sockets on the one address with ``SO_REUSEPORT`` (Linux spreads new connections over them by a
hash of the connection's addresses and ports), then starts N worker processes (``python -m proxy
serve``, the same command), worker *i* inheriting socket *i* (its descriptor number in
``$SONATE_WORKER_FD``); each loads its own detectors. The supervisor keeps every socket open, so
connections that reach a worker still loading, or being restarted, wait in its socket's backlog
instead of being refused. (One shared socket would not spread load: asyncio accepts up to its
backlog of waiting connections in one go, so one worker would take a whole burst.)
``SO_REUSEPORT`` lets another process of the same user bind the same port too: run the proxy under
its own user.

- Ledger: every worker appends to the configured store; the stores' compare-and-set appends keep one
  chain across processes (Redis: the group-commit turn; SQLite: ``BEGIN IMMEDIATE`` on the file).
- Metrics: the supervisor creates a per-run ``$PROMETHEUS_MULTIPROC_DIR`` (removed when it stops);
  any worker's ``/metrics`` shows the totals of all (:mod:`proxy.server.telemetry.metrics`). A dead worker's
  live-gauge files are dropped (``mark_process_dead``); its counters stay in the totals.
- Signals: SIGHUP to the supervisor is forwarded to every worker (each reloads its policies);
  SIGTERM or SIGINT to the supervisor sends SIGTERM to every worker (aiohttp's graceful
  shutdown: in-flight requests finish, receipts are appended) and waits up to ``grace_s`` before
  SIGKILL. A worker that exits on its own is logged and restarted (after 1 s, doubling up to 30 s
  while it keeps dying within 10 s of its start); one that exits with the usage-error code (2: bad
  configuration or key) stops the whole server with that code, as restarting cannot fix it. A
  worker is sent SIGTERM by the kernel if the supervisor itself dies (Linux ``PR_SET_PDEATHSIG``).
- Every response of a worker carries ``x-sonate-worker: <index>`` (0..N-1), so an operator can see
  the spread.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["FD_ENV", "INDEX_ENV", "WORKER_HEADER", "Supervisor", "bind", "inherited_socket", "label_responses",
           "worker_index"]

log = logging.getLogger("sonate.workers")

#: The listening socket's descriptor number in a worker.
FD_ENV = "SONATE_WORKER_FD"
#: The worker's index, 0..N-1 (a restarted worker keeps its predecessor's).
INDEX_ENV = "SONATE_WORKER_INDEX"
#: The response header naming the worker that answered.
WORKER_HEADER = "x-sonate-worker"
#: A worker exit code that stops the supervisor instead of a restart (proxy.cli.common.EXIT_USAGE).
EXIT_USAGE = 2
#: Seconds of life under which a worker's exit counts as a crash loop (the restart delay doubles).
CRASH_LOOP_S = 10.0
#: Restart delays in seconds: first, and the ceiling of the doubling.
RESTART_DELAY_S, MAX_RESTART_DELAY_S = 1.0, 30.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


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


def inherited_socket() -> socket.socket | None:
    """In a worker: its listening socket from the supervisor (``$SONATE_WORKER_FD``); None otherwise."""
    fd = os.environ.get(FD_ENV)
    return None if not fd else socket.socket(fileno=int(fd))


def worker_index() -> int | None:
    """In a worker: its index (``$SONATE_WORKER_INDEX``); None otherwise."""
    index = os.environ.get(INDEX_ENV)
    return None if index is None else int(index)


def label_responses(app: Any, index: int) -> None:
    """Add ``x-sonate-worker: index`` to every response of the aiohttp ``app`` (its ``on_response_prepare``)."""
    value = str(index)

    async def label(_: Any, response: Any) -> None:
        response.headers[WORKER_HEADER] = value

    app.on_response_prepare.append(label)


def _die_with_parent() -> None:  # pragma: no cover  (runs in the child between fork and exec)
    """In the child before exec: ask Linux for SIGTERM when the supervisor dies (no-op elsewhere)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen | None = None
    started: float = 0.0
    delay: float = 0.0
    restart_at: float | None = None


class Supervisor:
    """Runs one copy of ``command`` per socket of ``socks`` until SIGTERM/SIGINT (module docstring).

    ``command``: the worker's argv (``python -m proxy serve ...``); ``socks``: the listening sockets
    of :func:`bind`, one per worker; ``env``: extra environment for the workers; ``grace_s``:
    seconds a worker gets to finish after SIGTERM before SIGKILL.
    """

    def __init__(self, command: list[str], socks: list[socket.socket], *, env: dict[str, str] | None = None,
                 grace_s: float = 70.0) -> None:
        """Configure; nothing starts until :meth:`run`. Raises ValueError without sockets."""
        if not socks:
            raise ValueError("at least one listening socket is needed")
        self.command = command
        self.socks = socks
        self.env = dict(env or {})
        self.grace_s = grace_s
        self.workers = [_Worker(i) for i in range(len(socks))]
        self._stopping = False  # a plain flag: set from signal handlers (an Event's lock could deadlock there)
        self.metrics_dir: str | None = None

    def stop(self) -> None:
        """Ask :meth:`run` to stop every worker and return (safe from a signal handler)."""
        self._stopping = True

    def forward(self, sig: int) -> None:
        """Send ``sig`` to every running worker (SIGHUP: each reloads its policies,
        docs/operations.md "Policy sets and hot reload"); safe from a signal handler."""
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.send_signal(sig)

    def run(self) -> int:
        """Start the workers, keep them running, stop them on SIGTERM/SIGINT; return the exit code
        (0, or :data:`EXIT_USAGE` when a worker reported a usage error). Call from the main thread."""
        self.metrics_dir = tempfile.mkdtemp(prefix="sonate-metrics-")
        handlers = {sig: signal.signal(sig, lambda *_: self.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
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
        finally:
            self._shutdown()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return code

    def _spawn(self, worker: _Worker) -> None:
        from proxy.server.telemetry.metrics import MULTIPROC_DIR_ENV

        fd = self.socks[worker.index].fileno()
        env = {**os.environ, **self.env, FD_ENV: str(fd), INDEX_ENV: str(worker.index),
               MULTIPROC_DIR_ENV: str(self.metrics_dir)}
        worker.process = subprocess.Popen(self.command, env=env, pass_fds=(fd,), preexec_fn=_die_with_parent)
        worker.started, worker.restart_at = time.monotonic(), None
        log.info("worker %d started (pid %d)", worker.index, worker.process.pid)

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
