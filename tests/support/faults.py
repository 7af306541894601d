"""Helpers of the fault tests: a proxy with ledger options, kill -9, and reading its /metrics.

The proxy with a config written by :func:`tests.support.proxy.write_config` plus the ledger/signing
options a test needs: served in the test process, or as ``python -m proxy serve`` where a test
needs a real process (killed with SIGKILL, a file size limit, a log level, an injected fault). The private
``redis-server`` these tests kill is :class:`tests.support.redis_server.RedisServer`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    ROOT,
    TEST_ENV,
    RunningProxy,
    fork_serve,
    serve_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import free_port


def start_proxy_with(directory: Path, stub_url: str, ledger_url: str, *, ledger: dict[str, Any] | None = None,
                     signing: dict[str, Any] | None = None, policies: Path | None = None,
                     wait: bool = True, log_level: str | None = None, extra_keys: list[dict] | None = None,
                     server: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
                     limit_file_bytes: int | None = None, raise_in_detector: bool = False,
                     process: bool = False) -> RunningProxy:
    """Start the proxy with extra ``ledger``/``signing`` options; wait for /healthz.

    In the test process (:func:`tests.support.proxy.serve_proxy`) unless ``process`` is true (a
    test that kills it: :func:`kill9`), ``log_level`` or ``raise_in_detector`` is given: then `sonate
    serve` in a process of its own (:func:`tests.support.proxy.fork_serve`); with
    ``limit_file_bytes``, `python -m proxy serve` in a new interpreter (its output through a pipe:
    the file size limit must not reach the log).

    ``server`` entries update the ``server`` section; ``extra_keys`` / ``overrides``: see
    :func:`tests.support.proxy.write_config` (first start only). ``log_level`` (e.g. ``"DEBUG"``)
    is passed as ``--log-level``; ``limit_file_bytes`` sets RLIMIT_FSIZE of the proxy process (a
    write past it fails with EFBIG: a full disk for the ledger and the spool, without root; the
    proxy's output then reaches its log through a pipe, so only the ledger and spool files are
    limited). ``raise_in_detector``: the PII detector raises on any text holding
    :data:`DETECTOR_FAULT` (a fault injected in the proxy process: :func:`_inject_detector_fault`;
    not with ``limit_file_bytes``).
    A second call on the same ``directory`` restarts on its config, keys and log (new free port).
    """
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = directory / "config.yaml"
    if not config_path.exists():
        write_config(directory, stub_url, ledger_url, port, policies, extra_keys, overrides)
    config = yaml.safe_load(config_path.read_text())
    config["server"]["port"] = port
    config["server"].update(server or {})
    config["ledger"] = {"url": ledger_url, **(ledger or {})}
    config["signing"].update(signing or {})
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    key_file = Path(config["signing"]["key_file"])
    if limit_file_bytes is not None:
        if raise_in_detector:
            raise ValueError("raise_in_detector and limit_file_bytes cannot be combined")
        running = _spawn(config_path, ledger_url, key_file, port, log_level or "INFO", limit_file_bytes)
    elif process or log_level is not None or raise_in_detector:
        running = fork_serve(config_path, ledger_url, key_file, port, ("--log-level", log_level) if log_level else (),
                             _inject_detector_fault if raise_in_detector else None)
    else:
        running = serve_proxy(config_path, ledger_url, key_file, port)
    return wait_until_up(running, "/healthz", timeout=240) if wait else running


def _spawn(config_path: Path, ledger_url: str, key_file: Path, port: int, log_level: str,
           limit_file_bytes: int) -> RunningProxy:
    """`python -m proxy --log-level LOG_LEVEL serve` with RLIMIT_FSIZE at ``limit_file_bytes`` (SIGXFSZ
    ignored, so an oversized write raises OSError EFBIG instead of killing the process); its output
    reaches proxy.log through a pipe, so the limit does not apply to the log."""
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    log_path = config_path.parent / "proxy.log"
    env = {**os.environ, **TEST_ENV, "PYTHONUNBUFFERED": "1"}
    env.pop("SONATE_LEDGER_URL", None)
    command = [sys.executable, "-m", "proxy", "--log-level", log_level, "serve", "--config", str(config_path)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               preexec_fn=limit)
    threading.Thread(target=_copy, args=(process.stdout, log_path), daemon=True).start()
    return RunningProxy(f"http://127.0.0.1:{port}", config_path, ledger_url, key_file, log_path, process)


def _copy(pipe: Any, path: Path) -> None:
    """Append everything read from ``pipe`` to ``path`` until EOF (the test process has no file limit)."""
    with path.open("ab") as out:
        for line in iter(pipe.readline, b""):
            out.write(line)
            out.flush()


@dataclass
class Outcome:
    """One request of a :class:`ChatLoad`: its ``marker`` (in the prompt), HTTP ``status`` (or
    ``"connection"`` when the proxy vanished, ``"stream_error"`` when a stream ended without
    ``[DONE]``), the receipt id it was answered with, and whether it was ``acknowledged``: a JSON
    answer with a receipt id, or a stream that reached ``[DONE]`` (its receipt appended first)."""

    marker: str
    status: int | str
    receipt_id: str | None = None
    acknowledged: bool = False
    at: float = 0.0


class ChatLoad:
    """``clients`` threads sending chat completions (the official openai SDK, no retries) to the
    proxies in ``urls`` (client *i* uses ``urls[i % len(urls)]``, read per request so
    :meth:`point` can move it); odd-numbered clients stream. Runs until :meth:`finish`."""

    def __init__(self, tag: str, urls: list[str], clients: int = 4, key: str = CLIENT_KEY) -> None:
        self.tag, self.urls, self.clients, self.key = tag, list(urls), clients, key
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> "ChatLoad":
        for thread in self.threads:
            thread.start()
        return self

    def point(self, index: int, url: str) -> None:
        """Send the clients of proxy ``index`` to ``url`` from their next request on (a restarted proxy)."""
        self.urls[index] = url

    def _worker(self, index: int) -> None:
        import httpx
        import openai

        n, stream = 0, index % 2 == 1
        while not self.stop.is_set():
            n += 1
            marker = f"{self.tag}{index}x{n}x{uuid.uuid4().hex[:6]}"
            client = openai.OpenAI(base_url=self.urls[index % len(self.urls)] + "/v1", api_key=self.key,
                                   max_retries=0, timeout=30)
            messages = [{"role": "user", "content": f"Name a colour for a boat ({marker})"}]
            outcome = Outcome(marker, 0)
            try:
                raw = client.chat.completions.with_raw_response.create(model="stub", messages=messages, stream=stream)
                outcome.status, outcome.receipt_id = raw.status_code, raw.headers.get("x-sonate-receipt-id")
                if stream:
                    list(raw.parse())  # raises unless the stream reached [DONE] (errors are events)
                outcome.acknowledged = outcome.receipt_id is not None
            except openai.APIStatusError as exc:
                outcome.status = exc.status_code
            except openai.APIConnectionError:
                outcome.status = "connection"
                time.sleep(0.05)
            except openai.APIError:
                outcome.status = "stream_error"
            except httpx.TransportError:  # the proxy vanished mid-stream (not wrapped by the SDK)
                outcome.status = "connection"
            except Exception as exc:  # anything else is recorded, never kills the client thread
                outcome.status = type(exc).__name__
            finally:
                client.close()
            outcome.at = time.monotonic()
            with self.lock:
                self.outcomes.append(outcome)

    def count(self, acknowledged: bool = True, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for o in self.outcomes if o.acknowledged == acknowledged and o.at >= since)

    def finish(self) -> list[Outcome]:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        return list(self.outcomes)


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` every 0.05 s; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


async def check_ledger(url: str, keys: dict[str, bytes], acknowledged: list[str]) -> int:
    """The ledger at ``url``: chain and signatures verify, the Merkle tree covers every receipt and
    verifies, no receipt id is stored twice and every ``acknowledged`` id is stored. Returns the size."""
    from proxy.receipts import open_store, verify_store
    from proxy.receipts.tree import verify_tree

    store = open_store(url)
    try:
        count, failures = await verify_store(store, keys)
        assert failures == [], [str(f) for f in failures[:5]]
        leaves, tree_failures = await verify_tree(store, keys)
        assert tree_failures == [] and leaves == count, ([str(f) for f in tree_failures[:5]], leaves, count)
        stored = [r["receipt_id"] for r in await store.range(0, count)] if count else []
        assert len(stored) == len(set(stored)) == count, "a receipt id is stored twice"
        missing = sorted(set(acknowledged) - set(stored))
        assert missing == [], f"{len(missing)} acknowledged receipts not in the ledger: {missing[:5]}"
        return count
    finally:
        await store.close()


def public_keys(proxy: RunningProxy) -> dict[str, bytes]:
    """The proxy's published verify keys (``GET /v1/keys``)."""
    import json

    from proxy.receipts import load_public_keys

    with urllib.request.urlopen(proxy.url + "/v1/keys", timeout=10) as r:
        return load_public_keys(json.loads(r.read()))


#: Text that makes the PII detector of a ``raise_in_detector`` proxy raise (see :func:`_inject_detector_fault`).
DETECTOR_FAULT = "TRIGGER-DETECTOR-FAULT"


def _inject_detector_fault() -> None:
    """Make :meth:`PiiDetector.detect` raise RuntimeError (its message quoting the text, as a careless
    library might) for any batch holding :data:`DETECTOR_FAULT`: the fault of a detector that breaks."""
    from proxy.guardrails.detectors.pii import PiiDetector

    detect = PiiDetector.detect

    def faulty(self: Any, texts: list[str]) -> Any:
        for text in texts:
            if DETECTOR_FAULT in text:
                raise RuntimeError(f"injected detector fault while analysing {text!r}")
        return detect(self, texts)

    PiiDetector.detect = faulty


def kill9(proxy: RunningProxy) -> None:
    """SIGKILL the proxy process (started with ``process=True``) and reap it."""
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
