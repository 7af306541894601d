"""A private Redis Cluster for tests and the ledger bench: three masters, no replicas.

Each master is a ``redis-server --cluster-enabled yes`` on a free port with its own directory; the
cluster is formed with ``redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`` and
is ready when every node reports ``cluster_state:ok``.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis


def cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free too."""
    while True:
        port = random.randint(20000, 55535)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


class RedisCluster:
    """``masters`` cluster-enabled redis-servers under ``directory`` (no persistence).

    :meth:`start` raises RuntimeError when a node does not answer or the cluster does not form
    within 30 s. :attr:`url` is a ledger URL of the cluster (``redis://...:PORT/0?cluster=1``).
    """

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.directory = directory
        self.ports = [cluster_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        """A ledger URL reaching the cluster through its first node."""
        return f"redis://127.0.0.1:{self.ports[0]}/0?cluster=1"

    def start(self) -> RedisCluster:
        """Start every node, form the cluster and wait until it serves every slot (the nodes are
        stopped again when that fails)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> RedisCluster:
        for port in self.ports:
            node = self.directory / str(port)
            node.mkdir(parents=True, exist_ok=True)
            self.processes.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--appendonly", "no", "--save", "", "--protected-mode", "no"],
                stdout=(node / "redis.log").open("ab"), stderr=subprocess.STDOUT))
        for port in self.ports:
            self._wait(lambda c: c.ping(), port, "did not answer PING")
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        for port in self.ports:
            self._wait(lambda c: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"), port,
                       "did not reach cluster_state:ok")
        return self

    def _wait(self, ready, port: int, what: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                client = redis.Redis(port=port, socket_timeout=1)
                try:
                    if ready(client):
                        return
                finally:
                    client.close()
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis cluster node {port} {what}")

    def master_of(self, key: str) -> int:
        """The port of the master serving ``key``'s slot."""
        client = redis.Redis(port=self.ports[0], socket_timeout=2)
        try:
            slot = client.execute_command("CLUSTER", "KEYSLOT", key)
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        finally:
            client.close()
        raise RuntimeError(f"no master serves the slot of {key!r}")

    def stop(self) -> None:
        """SIGKILL every node (nothing is kept across sessions)."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)
