"""Hot reload of the policies, end to end: the real proxy (real models, SQLite ledger), the official
openai client, the stub provider.

An edit takes effect without a restart (``POST /v1/admin/policies/reload`` and SIGHUP); a broken
edit is rejected with the message a start with that file prints (file, key, expected), counted in
``sonate_policy_reloads_total{result="rejected"}``, and the old version keeps serving; a request in
flight during a reload finishes on the version it started with. Each test starts from the shipped
policy files (the ``pristine`` fixture writes them back and reloads).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.support.ledger import sqlite_url
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, ROOT, RunningProxy, start_proxy, stop_proxy, write_config
from tests.support.redis_server import free_port
from tests.support.stub_upstream import Reply, StubUpstream

LEGAL = "Can I sue my landlord for keeping my security deposit, and which court should I file in?"
PII = "Hi, I'm John Smith. Email me at john.smith@example.com about my order."


@pytest.fixture(scope="module")
def reloading(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    directory = tmp_path_factory.mktemp("policy-reload")
    running = start_proxy(directory, stub.url, sqlite_url(directory / "ledger.db"))  # no file watch
    yield running
    stop_proxy(running)


@pytest.fixture(scope="module")
def hangup(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    """A process of its own (the test sends it SIGHUP) with the shipped Compliance policy alone: the
    reload it shows needs no other policy, and the process then loads one model instead of all."""
    directory = tmp_path_factory.mktemp("policy-reload-sighup")
    policies = directory / "policies"
    policies.mkdir()
    shutil.copy(ROOT / "policies" / "compliance.yaml", policies / "compliance.yaml")
    running = start_proxy(directory, stub.url, sqlite_url(directory / "ledger.db"), policies=policies,
                          subprocess=True)
    yield running
    stop_proxy(running)


def policies_dir(proxy: RunningProxy) -> Path:
    return proxy.config_path.parent / "policies"


def call(proxy: RunningProxy, method: str, path: str, key: str | None = ADMIN_KEY) -> tuple[int, dict, dict | str]:
    req = urllib.request.Request(proxy.url + path, method=method, data=b"" if method == "POST" else None)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read()
            return r.status, dict(r.headers), json.loads(raw) if raw.startswith(b"{") else raw.decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def reload(proxy: RunningProxy) -> tuple[int, dict]:
    status, _, body = call(proxy, "POST", "/v1/admin/policies/reload")
    return status, body


def version(proxy: RunningProxy) -> str:
    status, _, body = call(proxy, "GET", "/v1/admin/policies")
    assert status == 200, body
    return body["policy_version"]


@pytest.fixture
def pristine(reloading: RunningProxy) -> RunningProxy:
    """The shipped policy files, reloaded."""
    target = policies_dir(reloading)
    for path in target.glob("*.y*ml"):
        path.unlink()
    for path in (ROOT / "policies").glob("*.y*ml"):
        shutil.copy(path, target / path.name)
    status, body = reload(reloading)
    assert status == 200, body
    return reloading


def client(proxy: RunningProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


def chat(proxy: RunningProxy, text: str):
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": text}])
    return raw, raw.parse()


def receipt_version(proxy: RunningProxy, receipt_id: str) -> tuple[str, str]:
    status, _, body = call(proxy, "GET", f"/v1/receipts/{receipt_id}")
    assert status == 200, body
    return body["evidence"]["policy_set"], body["evidence"]["policy_version"]


def disable_compliance(proxy: RunningProxy) -> None:
    path = policies_dir(proxy) / "compliance.yaml"
    path.write_text(path.read_text() + "\nenabled: false\n")


def test_an_edit_takes_effect_through_the_reload_endpoint(pristine, upstream):
    before = version(pristine)
    raw, _ = chat(pristine, LEGAL)
    assert raw.headers["x-sonate-guardrail-action"] == "escalate"
    assert receipt_version(pristine, raw.headers["x-sonate-receipt-id"]) == ("default", before)

    disable_compliance(pristine)
    status, outcome = reload(pristine)
    assert status == 200 and outcome["result"] == "applied"
    assert outcome["previous_version"] == before and outcome["policy_version"] != before
    raw, completion = chat(pristine, LEGAL)
    assert raw.headers["x-sonate-guardrail-action"] == "allow"
    assert completion.choices[0].message.content == f"Stub answer: {LEGAL}"
    assert receipt_version(pristine, raw.headers["x-sonate-receipt-id"]) == ("default", outcome["policy_version"])
    assert version(pristine) == outcome["policy_version"]
    assert reload(pristine)[1]["result"] == "unchanged"


def start_message(proxy: RunningProxy, tmp_path: Path) -> str:
    """What `sonate serve` prints when it starts over the proxy's (current) policy directory."""
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", sqlite_url(tmp_path / "ledger.db"), free_port(),
                          policies=policies_dir(proxy))
    env = {**os.environ, "STUB_PROVIDER_KEY": "x", "SONATE_TEST_ADMIN_KEY": ADMIN_KEY}
    env.pop("SONATE_LEDGER_URL", None)
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--config", str(config)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    return done.stderr


def test_a_broken_edit_is_rejected_with_the_start_message_and_the_old_version_keeps_serving(pristine, upstream,
                                                                                             tmp_path):
    before = version(pristine)
    broken = policies_dir(pristine) / "privacy.yaml"
    broken.write_text(broken.read_text().replace("restore_in_answer: true", "restore_in_answer: maybe"))
    status, headers, body = call(pristine, "POST", "/v1/admin/policies/reload")
    assert status == 400 and body["error"]["code"] == "invalid_policy"
    message = body["error"]["message"]
    assert message == f"{broken}: privacy.restore_in_answer: Input should be a valid boolean, unable to interpret " \
                      "input (got 'maybe')"
    assert headers["x-sonate-policy-version"] == before
    assert f"cannot start:\n{message}\n" in start_message(pristine, tmp_path)  # the same message as at start
    assert message in pristine.log()  # logged

    # the old version keeps serving: PII masked for the model and restored for the client
    raw, completion = chat(pristine, PII)
    assert raw.headers["x-sonate-guardrail-action"] == "mask"
    assert "john.smith@example.com" not in upstream.received()[0]["messages"][0]["content"]
    assert completion.choices[0].message.content == f"Stub answer: {PII}"
    assert receipt_version(pristine, raw.headers["x-sonate-receipt-id"]) == ("default", before)
    assert version(pristine) == before
    _, _, metrics = call(pristine, "GET", "/metrics")
    rejected = [line for line in metrics.splitlines() if line.startswith('sonate_policy_reloads_total{result="rejected"}')]
    assert rejected and float(rejected[0].split()[-1]) >= 1


def test_sighup_reloads(hangup, upstream):
    before = version(hangup)
    raw, _ = chat(hangup, LEGAL)
    assert raw.headers["x-sonate-guardrail-action"] == "escalate"
    disable_compliance(hangup)
    os.kill(hangup.process.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while version(hangup) == before:
        assert time.monotonic() < deadline, hangup.log()[-3000:]
        time.sleep(0.3)
    raw, _ = chat(hangup, LEGAL)
    assert raw.headers["x-sonate-guardrail-action"] == "allow"
    assert hangup.process.poll() is None  # SIGHUP did not stop the proxy


def test_a_request_in_flight_finishes_on_the_version_it_started_with(pristine, upstream):
    before = version(pristine)
    released = threading.Event()  # the answer's words wait until the reload is done
    upstream.queue(Reply("one two three four five six seven eight", gate=released))
    stream_client = client(pristine)
    with stream_client.chat.completions.with_streaming_response.create(
            model="stub", stream=True, messages=[{"role": "user", "content": "Tell me a story."}]) as response:
        receipt_id = response.headers["x-sonate-receipt-id"]  # the request is in flight: screened, upstream open
        disable_compliance(pristine)
        status, outcome = reload(pristine)
        assert status == 200 and outcome["result"] == "applied"
        assert call(pristine, "GET", f"/v1/receipts/{receipt_id}")[0] == 404  # still in flight: not sealed yet
        released.set()
        text = "".join(chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices)
    assert text == "one two three four five six seven eight"
    assert receipt_version(pristine, receipt_id) == ("default", before)
    raw, _ = chat(pristine, "Tell me another story.")
    assert receipt_version(pristine, raw.headers["x-sonate-receipt-id"]) == ("default", outcome["policy_version"])
