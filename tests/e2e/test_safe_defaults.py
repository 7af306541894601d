"""Safe defaults ("Safe defaults" and the smaller findings), against the real proxy.

- `sonate serve --host 0.0.0.0` with the shipped config.yaml (published demo keys) is refused;
- `/metrics` needs a metrics or admin key by default;
- at `--log-level DEBUG` a prompt reaches the provider but not the proxy log (openai logs
  whole request bodies at DEBUG);
- the SQLite ledger (and its WAL files), spool and quarantine files are 0600 whatever the umask;
- a reviewer's free-text `expected_policy_id` never becomes a Prometheus label.

Only the LLM provider is a stub (tests/support/stub_upstream.py).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import openai
import pytest

from proxy.server.admission.spool import Spool
from proxy.storage.sqlite import SQLiteStore
from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    ROOT,
    RunningProxy,
    start_proxy,  # noqa: F401  (conftest marks a module importing a launcher `models`)
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import free_port

METRICS_KEY = "sk-test-metrics-0006-padded-to-32-chars"
REVIEWER_A, REVIEWER_B = "sk-test-reviewer-a-0007-padded-to-32", "sk-test-reviewer-b-0008-padded-to-32"
FREE_TEXT = "reviewer free text 1f9c: the privacy one, I think"


def test_serve_refuses_the_shipped_demo_keys_on_every_interface() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SONATE_CONFIG", "SONATE_LEDGER_URL")}
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "demo-client" in done.stderr and "not a loopback address" in done.stderr
    assert "os.environ/SONATE_ADMIN_KEY" in done.stderr and "SONATE_CONFIG" in done.stderr
    assert "sk-sonate-demo" not in done.stderr and "Traceback" not in done.stderr


def _spawn_debug(directory: Path, stub_url: str) -> RunningProxy:
    """The launcher's config, started with ``--log-level DEBUG`` under umask 000."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ledger_url = "sqlite:///" + str(directory / "ledger.db")
    keys = [{"key": METRICS_KEY, "actor": "prometheus", "role": "metrics"},
            {"key": REVIEWER_A, "actor": "reviewer-ann", "role": "reviewer"},
            {"key": REVIEWER_B, "actor": "reviewer-ben", "role": "reviewer"}]
    config = write_config(directory, stub_url, ledger_url, port, extra_keys=keys,
                          overrides={"review": {"sample_rate": 1.0}})
    log_path = directory / "proxy.log"
    env = {**os.environ, "STUB_PROVIDER_KEY": "stub-secret", "SONATE_TEST_ADMIN_KEY": ADMIN_KEY, "PYTHONUNBUFFERED": "1"}
    env.pop("SONATE_LEDGER_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "proxy", "--log-level", "DEBUG", "serve", "--config", str(config)],
                               cwd=ROOT, env=env, stdout=log_path.open("ab"), stderr=subprocess.STDOUT,
                               preexec_fn=lambda: os.umask(0))
    running = RunningProxy(f"http://127.0.0.1:{port}", config, ledger_url, directory / "keys" / "signing-key.json",
                           log_path, process)
    return wait_until_up(running, "/readyz", timeout=180)


@pytest.fixture(scope="module")
def debug_proxy(tmp_path_factory: pytest.TempPathFactory, stub):
    running = _spawn_debug(tmp_path_factory.mktemp("safe-defaults"), stub.url)
    yield running
    stop_proxy(running)


def call(proxy: RunningProxy, method: str, path: str, key: str | None = None, body: dict | None = None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(proxy.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def chat(proxy: RunningProxy, text: str) -> str:
    client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": text}])
    return raw.headers["x-sonate-receipt-id"]


def test_metrics_need_a_metrics_or_admin_key(debug_proxy) -> None:
    assert call(debug_proxy, "GET", "/metrics")[0] == 401
    assert call(debug_proxy, "GET", "/metrics", CLIENT_KEY)[0] == 403
    assert call(debug_proxy, "GET", "/metrics", REVIEWER_A)[0] == 403
    status, body = call(debug_proxy, "GET", "/metrics", METRICS_KEY)
    assert status == 200 and b"sonate_interactions_total" in body
    assert call(debug_proxy, "GET", "/metrics", ADMIN_KEY)[0] == 200
    assert call(debug_proxy, "GET", "/v1/models", METRICS_KEY)[0] == 403  # the scraper's key reads nothing else


def test_debug_log_never_holds_the_prompt(debug_proxy, upstream) -> None:
    # The canary is what the provider actually received (Privacy may mask part of a random token,
    # e.g. spaCy sometimes tags a hex string as a LOCATION): that text went through litellm, openai
    # and httpx, so it is exactly what their DEBUG records would hold.
    chat(debug_proxy, f"Please repeat the phrase zebra lantern {uuid.uuid4().hex} back to me.")
    canary = upstream.received()[-1]["messages"][-1]["content"]
    assert "zebra lantern" in canary
    log = debug_proxy.log()
    assert canary not in log and "zebra lantern" not in log
    assert " DEBUG openai._base_client: Request options: [redacted]" in log  # DEBUG is on, openai did log


def test_ledger_files_are_private_whatever_the_umask(debug_proxy) -> None:
    chat(debug_proxy, "Hello there")
    path = Path(debug_proxy.ledger_url.removeprefix("sqlite:///"))
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        assert stat.S_IMODE(name.stat().st_mode) == 0o600, name


def _item_of(proxy: RunningProxy, receipt_id: str) -> str:
    status, body = call(proxy, "GET", "/v1/review/items?limit=1000", REVIEWER_A)
    assert status == 200, body
    return next(i["id"] for i in json.loads(body)["data"] if i["receipt_id"] == receipt_id)


def test_reviewer_free_text_is_not_a_metric_label(debug_proxy) -> None:
    item = _item_of(debug_proxy, chat(debug_proxy, "What is two plus two?"))  # sampled (rate 1.0), no trigger
    verdict = {"breach": True, "intent_permissible": False, "content_harmful": True, "expected_policy_id": FREE_TEXT}
    status, body = call(debug_proxy, "POST", f"/v1/review/items/{item}/verdicts", REVIEWER_A, verdict)
    assert status == 400 and b"expected_policy_id" in body, body  # only a loaded policy's id is accepted
    for key in (REVIEWER_A, REVIEWER_B):
        status, body = call(debug_proxy, "POST", f"/v1/review/items/{item}/verdicts", key,
                            {**verdict, "expected_policy_id": "privacy.pii"})
        assert status == 201, body
    metrics = call(debug_proxy, "GET", "/metrics", METRICS_KEY)[1].decode()
    misfires = [line for line in metrics.splitlines() if line.startswith("sonate_guardrail_misfires_total{")]
    assert any('type="false_negative"' in line and 'policy_id="privacy.pii"' in line for line in misfires), misfires
    assert FREE_TEXT not in metrics


def test_sqlite_and_spool_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    import asyncio

    old = os.umask(0)
    try:
        async def touch() -> None:
            store = SQLiteStore(tmp_path / "ledger.db")
            await store.ping()
            await store.close()
        asyncio.run(touch())
        os.umask(0o277)  # strips the owner's write bit: the files must still be exactly 0600
        spool = Spool(tmp_path / "spool").open()
        spool.append([{"receipt_id": "rcpt_1"}])
        quarantine = spool.quarantine(spool.peek().seq, "test")
        spool_path = spool.path
        spool.close()
    finally:
        os.umask(old)
    for path in (tmp_path / "ledger.db", spool_path, quarantine):
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_existing_world_readable_ledger_is_narrowed(tmp_path: Path) -> None:
    import asyncio

    path = tmp_path / "ledger.db"
    path.touch()
    path.chmod(0o644)

    async def touch() -> None:
        store = SQLiteStore(path)
        await store.ping()
        await store.close()
    asyncio.run(touch())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("name, msg, args, expected", [
    ("openai._base_client", "Request options: %s", ({"json_data": "SECRET"},), "Request options: [redacted]"),
    ("openai._base_client", "Retrying due to status code %i", (500,), "Retrying due to status code [redacted]"),
    ("LiteLLM", "Request to litellm: SECRET", None, "[redacted: 26 characters]"),
    ("httpcore.http11", "send_request_body.started request=SECRET", None, "[redacted: 40 characters]"),
    ("sonate.sink", "spool replay waits: %s", ("kept",), "spool replay waits: kept"),
])
def test_library_debug_records_are_redacted(name, msg, args, expected) -> None:
    from proxy.cli import redact_record

    record = logging.LogRecord(name, logging.DEBUG, __file__, 1, msg, args, None)
    assert redact_record(record).getMessage() == expected
    info = logging.LogRecord(name, logging.INFO, __file__, 1, "HTTP Request: %s", ("POST /v1",), None)
    assert redact_record(info).getMessage() == "HTTP Request: POST /v1"


def test_records_made_from_a_dict_pass_the_redacting_factory() -> None:
    """logging.makeLogRecord has the record factory build an empty record (level and name None)
    and fills it in afterwards: the CLI's factory must let it through."""
    from proxy.cli import _install_redaction

    factory = logging.getLogRecordFactory()
    try:
        _install_redaction()
        record = logging.makeLogRecord({"name": "sonate", "levelno": logging.ERROR, "levelname": "ERROR",
                                        "msg": "cannot start:\n%s", "args": ("boom",)})
        assert record.getMessage() == "cannot start:\nboom" and record.name == "sonate"
        debug = logging.getLogRecordFactory()("httpx", logging.DEBUG, __file__, 1, "body %s", ("secret",), None)
        assert debug.getMessage() == "body [redacted]"  # the factory still redacts
    finally:
        logging.setLogRecordFactory(factory)
