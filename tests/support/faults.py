"""Helpers of the fault tests: a proxy with ledger options, kill -9, and reading its /metrics.

Real processes only: the proxy as ``python -m proxy serve`` with a config written by
:func:`tests.support.proxy.write_config` plus the ledger/signing options a test needs. The private
``redis-server`` these tests kill is :class:`tests.support.redis_server.RedisServer`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.proxy import ADMIN_KEY, ROOT, RunningProxy, write_config
from tests.support.redis_server import free_port


def start_proxy_with(directory: Path, stub_url: str, ledger_url: str, *, ledger: dict[str, Any] | None = None,
                     signing: dict[str, Any] | None = None, policies: Path | None = None,
                     wait: bool = True) -> RunningProxy:
    """Start `python -m proxy serve` with extra ``ledger``/``signing`` options; wait for /healthz."""
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
    log_path = directory / "proxy.log"
    env = {**os.environ, "STUB_PROVIDER_KEY": "stub-secret", "SONATE_TEST_ADMIN_KEY": ADMIN_KEY,
           "PYTHONUNBUFFERED": "1"}
    env.pop("SONATE_LEDGER_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config_path)],
                               cwd=ROOT, env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT)
    running = RunningProxy(f"http://127.0.0.1:{port}", config_path, ledger_url,
                           Path(config["signing"]["key_file"]), log_path, process)
    if wait:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"proxy exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                with urllib.request.urlopen(running.url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return running
            except OSError:
                time.sleep(0.3)
        process.kill()
        raise RuntimeError(f"proxy did not start:\n{log_path.read_text()}")
    return running


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
    with urllib.request.urlopen(proxy.url + "/metrics", timeout=10) as r:
        return r.read().decode()
