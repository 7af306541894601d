"""Helpers of the fault tests: a proxy with ledger options, kill -9, and reading its /metrics.

Real processes only: the proxy as ``python -m proxy serve`` with a config written by
:func:`tests.support.proxy.write_config` plus the ledger/signing options a test needs. The private
``redis-server`` these tests kill is :class:`tests.support.redis_server.RedisServer`.
"""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.proxy import ADMIN_KEY, RunningProxy, spawn_proxy, wait_until_up, write_config
from tests.support.redis_server import free_port


def start_proxy_with(directory: Path, stub_url: str, ledger_url: str, *, ledger: dict[str, Any] | None = None,
                     signing: dict[str, Any] | None = None, policies: Path | None = None,
                     wait: bool = True) -> RunningProxy:
    """Start `python -m proxy serve` with extra ``ledger``/``signing`` options; wait for /healthz.

    A second call on the same ``directory`` restarts on its config, keys and log (new free port).
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = directory / "config.yaml"
    if not config_path.exists():
        write_config(directory, stub_url, ledger_url, port, policies)
    config = yaml.safe_load(config_path.read_text())
    config["server"]["port"] = port
    config["ledger"] = {"url": ledger_url, **(ledger or {})}
    config["signing"].update(signing or {})
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    running = spawn_proxy(config_path, ledger_url, Path(config["signing"]["key_file"]), port)
    return wait_until_up(running, "/healthz", timeout=240) if wait else running


def kill9(proxy: RunningProxy) -> None:
    """SIGKILL the proxy process and reap it."""
    if proxy.process.poll() is None:
        proxy.process.send_signal(signal.SIGKILL)
    proxy.process.wait(15)


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of one series in a Prometheus text exposition (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                return sample.value
    return 0.0


def scrape(proxy: RunningProxy) -> str:
    request = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read().decode()
