"""The one proxy launcher of the tests: config writer, the proxy on a free port, keys, paths.

A proxy runs in the test process by default (:mod:`tests.support.inprocess`: the real app and
services, models loaded once per session); ``subprocess=True`` or :func:`fork_serve` runs
`sonate serve` in a process of its own, forked from a preloaded fork server
(:mod:`tests.support.forked`), for what needs a real process (signals, exit codes,
``server.workers``, the CLI's log set-up), its detectors built once in the fork server;
:func:`spawn_proxy` runs `python -m proxy serve` in a
new interpreter (its start-up, and the benchmarks).

On import, the test process gets the environment the test config names (``STUB_PROVIDER_KEY``,
``SONATE_TEST_ADMIN_KEY``) and loses ``SONATE_LEDGER_URL`` (the config's ledger applies), as the
subprocesses do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from proxy import offline  # noqa: F401  (offline settings for in-process model loading)
from tests.support.forked import ForkedProcess, fork_proxy
from tests.support.inprocess import InProcessServer, serve_in_process
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CLIENT_KEY, OTHER_KEY, ADMIN_KEY = ("sk-test-client-0001-padded-to-32-chars", "sk-test-other-0002-padded-to-32-chars",
                                   "sk-test-admin-0003-padded-to-32-chars")
#: ``SONATE_TEST_PROXY=subprocess``: every :func:`start_proxy` runs `python -m proxy serve` (to compare the modes).
MODE_ENV = "SONATE_TEST_PROXY"
#: The secrets the test config names (``os.environ/NAME``), set in this process and its subprocesses.
TEST_ENV = {"STUB_PROVIDER_KEY": "stub-secret", "SONATE_TEST_ADMIN_KEY": ADMIN_KEY}
os.environ.update(TEST_ENV)
os.environ.pop("SONATE_LEDGER_URL", None)


@dataclass
class RunningProxy:
    """A running proxy: base URL, config path, ledger URL, its log file and ``process`` (a
    ``subprocess.Popen``, or the Popen-like :class:`~tests.support.forked.ForkedProcess` or
    :class:`~tests.support.inprocess.InProcessServer`)."""

    url: str
    config_path: Path
    ledger_url: str
    key_file: Path
    log_path: Path
    process: subprocess.Popen | ForkedProcess | InProcessServer

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def write_config(directory: Path, stub_url: str, ledger_url: str, port: int, policies: Path | None = None,
                 extra_keys: list[dict] | None = None, overrides: dict | None = None) -> Path:
    """A config.yaml for tests: a `stub` route to the stub provider, the demo route, test keys.

    ``extra_keys`` are appended to auth.keys; ``overrides`` replace top-level sections. Per-key
    admission limits are off (many modules share the session proxy and its keys, and a fast run
    would meet the default 20 requests/s); tests/e2e/test_limits.py sets its own. So is the input
    screen's time budget (a loaded test machine can exceed it; tests/unit/server/admission/test_limits.py tests it).
    """
    if policies is None:
        policies = directory / "policies"
        shutil.copytree(ROOT / "policies", policies)
    config = {
        "server": {"host": "127.0.0.1", "port": port, "max_body_bytes": 65536, "upstream_timeout_seconds": 5,
                   "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0, "screen_timeout_seconds": 0}},
        "model_list": [
            {"model_name": "stub", "litellm_params": {"model": "openai/stub-model", "api_base": stub_url,
                                                      "api_key": "os.environ/STUB_PROVIDER_KEY"}},
            {"model_name": "demo", "litellm_params": {"model": "openai/demo", "api_key": "x",
                                                      "mock_response": "Hello from the demo model."},
             "model_info": {"demo": True}},
        ],
        "policies": str(policies),
        "ledger": {"url": ledger_url},
        "signing": {"key_file": str(directory / "keys" / "signing-key.json")},
        "auth": {"keys": [
            {"key": CLIENT_KEY, "actor": "alice", "role": "client"},
            {"key": OTHER_KEY, "actor": "bob", "role": "client"},
            {"key": "os.environ/SONATE_TEST_ADMIN_KEY", "actor": "reviewer-rita", "role": "admin"},
        ]},
    }
    config["auth"]["keys"] += extra_keys or []
    config.update(overrides or {})
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_proxy(directory: Path, stub_url: str, ledger_url: str, policies: Path | None = None,
                extra_keys: list[dict] | None = None, overrides: dict | None = None,
                subprocess: bool = False) -> RunningProxy:
    """Start the proxy on a free port and wait until /readyz answers 200: in this process, or
    `sonate serve` in a process of its own (:func:`fork_serve`) when ``subprocess`` is true or the
    config needs one (``observability`` set up, ``server.workers`` > 1); `python -m proxy serve`
    (:func:`spawn_proxy`) with ``SONATE_TEST_PROXY=subprocess``.

    ``extra_keys`` / ``overrides``: see :func:`write_config`. RuntimeError (with the log) when the
    proxy does not start.
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = write_config(directory, stub_url, ledger_url, port, policies, extra_keys, overrides)
    key_file = directory / "keys" / "signing-key.json"
    if os.environ.get(MODE_ENV) == "subprocess":
        running = spawn_proxy(config_path, ledger_url, key_file, port)
    elif subprocess or needs_a_process(overrides or {}):
        running = fork_serve(config_path, ledger_url, key_file, port)
    else:
        running = serve_proxy(config_path, ledger_url, key_file, port)
    return wait_until_up(running, "/readyz", timeout=180)


def needs_a_process(overrides: dict) -> bool:
    """Whether config ``overrides`` need `sonate serve` itself: its log and trace set-up
    (``observability``) or a supervisor of workers (``server.workers`` > 1)."""
    return "observability" in overrides or int(overrides.get("server", {}).get("workers", 1)) > 1


def serve_proxy(config_path: Path, ledger_url: str, key_file: Path, port: int) -> RunningProxy:
    """Serve ``config_path`` in this process (:mod:`tests.support.inprocess`) without waiting; log
    lines appended to proxy.log beside it. The in-process counterpart of :func:`spawn_proxy`."""
    server = serve_in_process(config_path, port)
    return RunningProxy(f"http://127.0.0.1:{port}", config_path, ledger_url, key_file, server.log_path, server)


def fork_serve(config_path: Path, ledger_url: str, key_file: Path, port: int,
               options: tuple[str, ...] = (), prepare: Callable[[], None] | None = None) -> RunningProxy:
    """Start `sonate [OPTIONS] serve --config CONFIG_PATH` in a process forked from the preloaded fork
    server (:mod:`tests.support.forked`) without waiting; output appended to proxy.log beside it.
    The environment is :func:`spawn_proxy`'s; ``prepare``: see :func:`tests.support.forked.fork_proxy`.
    The fork server's detectors are used, except by a supervisor of workers (``server.workers`` > 1):
    it loads its own, so that what its workers share is what it loaded."""
    log_path = config_path.parent / "proxy.log"
    env = {**os.environ, **TEST_ENV, "PYTHONUNBUFFERED": "1"}
    env.pop("SONATE_LEDGER_URL", None)
    server = (yaml.safe_load(config_path.read_text()) or {}).get("server") or {}
    process = fork_proxy([*options, "serve", "--config", str(config_path)], env, log_path, ROOT, prepare,
                         preloaded_models=int(server.get("workers", 1)) <= 1)
    return RunningProxy(f"http://127.0.0.1:{port}", config_path, ledger_url, key_file, log_path, process)


def spawn_proxy(config_path: Path, ledger_url: str, key_file: Path, port: int, root: Path = ROOT) -> RunningProxy:
    """Start `python -m proxy serve --config CONFIG_PATH` without waiting; output appended to proxy.log beside it.

    ``root``: the checkout whose ``proxy`` package runs (the working directory comes first on
    ``sys.path``; bench/gateway.py ``--baseline`` runs another commit's this way).

    The environment supplies the secrets the test config names (``STUB_PROVIDER_KEY``,
    ``SONATE_TEST_ADMIN_KEY``) and drops ``SONATE_LEDGER_URL`` so the config's ledger applies.
    """
    log_path = config_path.parent / "proxy.log"
    env = {**os.environ, **TEST_ENV, "PYTHONUNBUFFERED": "1"}
    env.pop("SONATE_LEDGER_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config_path)],
                               cwd=root, env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT)
    return RunningProxy(f"http://127.0.0.1:{port}", config_path, ledger_url, key_file, log_path, process)


def wait_until_up(proxy: RunningProxy, path: str, timeout: float) -> RunningProxy:
    """Poll ``GET path`` until it answers 200; RuntimeError (with the log) if the proxy exits or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proxy.process.poll() is not None:
            raise RuntimeError(f"proxy exited with {proxy.process.returncode}:\n{proxy.log()}")
        try:
            with urllib.request.urlopen(proxy.url + path, timeout=2) as r:
                if r.status == 200:
                    return proxy
        except OSError:
            time.sleep(0.05)
    proxy.process.kill()
    raise RuntimeError(f"proxy did not become ready:\n{proxy.log()}")


def stop_proxy(proxy: RunningProxy) -> None:
    """Stop the proxy (a subprocess: SIGTERM) and wait up to 15 s, then kill it."""
    proxy.process.terminate()
    try:
        proxy.process.wait(15)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
