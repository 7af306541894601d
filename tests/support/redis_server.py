"""The tests' Redis: a private ``redis-server`` process and the one Redis namespace helper.

The test session starts its own server (tests/conftest.py, ``pytest_configure``) and exports its
URL as ``SONATE_TEST_REDIS`` for every test and subprocess; an explicitly set ``SONATE_TEST_REDIS``
is used as is. Fault and spool tests start further servers of their own with :class:`RedisServer`.

(Not named ``redis.py``: ``tests/support/ledger.py`` runs as a script, and a ``redis.py`` beside it
would shadow the redis library for that worker process.)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import redis

ENV = "SONATE_TEST_REDIS"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of the test's own on ``port`` (default: a free one), data in ``directory``.

    ``aof=True`` turns on the append-only file with ``appendfsync always`` (what the fault tests
    restart from); ``aof=False`` keeps nothing on disk. :meth:`start` may be called again after
    :meth:`kill` to restart on the same port and directory.
    """

    def __init__(self, directory: Path, port: int | None = None, aof: bool = True) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.aof = aof
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        """Start the server and wait (up to 20 s) until it answers PING; RuntimeError if it does not."""
        self.directory.mkdir(parents=True, exist_ok=True)
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             *persistence, "--save", "", "--protected-mode", "no"],
            stdout=(self.directory / "redis.log").open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                client = redis.Redis(port=self.port, socket_timeout=1)
                if client.ping():
                    client.close()
                    return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start:\n{(self.directory / 'redis.log').read_text()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to clients."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """Stop the server (a SIGKILL: the tests keep nothing across sessions)."""
        self.kill()


def redis_url() -> str:
    """The test session's Redis, ``redis://host:port/db`` from ``SONATE_TEST_REDIS`` (read at call time).

    Raises KeyError outside a test session that set it (tests/conftest.py does).
    """
    return os.environ[ENV]


def redis_namespace_url(prefix: str = "test") -> str:
    """A ledger URL on the test Redis with a fresh namespace ``PREFIX-<10 hex>``."""
    return f"{redis_url()}?namespace={prefix}-{uuid.uuid4().hex[:10]}"


def delete_redis_namespace(url: str) -> None:
    """Delete every key of the namespace of ledger ``url`` (``redis://...?namespace=NS``)."""
    delete_redis_keys(url.split("?", 1)[0], f"{{{url.split('namespace=', 1)[1]}}}*")


def delete_redis_keys(url: str, match: str) -> None:
    """Delete every key matching the SCAN pattern ``match`` in the database of Redis ``url``."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=match, count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
