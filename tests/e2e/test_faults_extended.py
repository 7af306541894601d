"""Faults, extended, with real processes; tests/e2e/test_faults.py has the first
set (one kill -9 of the proxy, Redis killed and restarted under fail_closed and spool, an append
refused after a ping).

- Two proxies on one Redis namespace under load from 4 clients (two streaming), killed with
  SIGKILL ten times in turn and restarted: one chain, the Merkle tree over it verifies, every
  acknowledged receipt stored exactly once (``test_kill9_ten_times_two_proxies_one_chain``).
- A detector raising: 503 ``guardrail_error``, nothing forwarded, counted, the text not logged.
- The provider failing mid-stream: the client gets the chunks, then one error event and no
  ``[DONE]``; the receipt says what was delivered.
- Disk full (RLIMIT_FSIZE on the proxy process: a write past the limit fails with EFBIG, as on
  a full disk; no root needed) for the SQLite ledger and for the spool: a clear 503, nothing
  acknowledged is lost, the ledger verifies and SQLite's integrity check passes.

The only stand-in is the LLM provider (the stub); the detector fault is injected in the proxy
process (``python -m tests.support.faults --raise-in-detector``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import redis

from tests.support.faults import (
    DETECTOR_FAULT,
    ChatLoad,
    check_ledger,
    kill9,
    metric_value,
    public_keys,
    scrape,
    start_proxy_with,
    wait_until,
)
from tests.support.proxy import CLIENT_KEY, ROOT, RunningProxy, stop_proxy
from tests.support.redis_server import RedisServer, delete_redis_namespace, redis_namespace_url
from tests.support.stub_upstream import Reply

KILLS = 10


@pytest.fixture(scope="module")
def no_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the continuity policy (no detector model): the ledger faults need no guardrails, and each
    of the many restarts is then quick. The request flow and receipts are unchanged."""
    directory = tmp_path_factory.mktemp("policies-continuity")
    shutil.copy(ROOT / "policies" / "continuity.yaml", directory / "continuity.yaml")
    return directory


@pytest.fixture(scope="module")
def privacy_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Privacy alone, screening the model's answers too (so an output detector can fail)."""
    directory = tmp_path_factory.mktemp("policies-privacy")
    text = (ROOT / "policies" / "privacy.yaml").read_text()
    assert "stages: [input]" in text
    (directory / "privacy.yaml").write_text(text.replace("stages: [input]", "stages: [input, output]", 1))
    return directory


QUIET = {"audit_interval_seconds": 0, "checkpoint_interval_seconds": 0.5}


def test_kill9_ten_times_two_proxies_one_chain(tmp_path: Path, stub, no_models: Path) -> None:
    """Two proxies serve 4 clients (two streaming) on one Redis namespace; ten times, one of them is
    killed with SIGKILL mid-load and its clients move to a replacement process. Replacements start
    in the background (at most 3 at once, sharing the first one's signing key) while the load runs,
    so the kills do not wait for model loading one after another."""
    url = redis_namespace_url("kill9x10")
    first = start_proxy_with(tmp_path / "p0", stub.url, url, ledger=QUIET, policies=no_models, process=True)
    signing = {"key_file": str(first.key_file)}

    def spawn(n: int) -> RunningProxy:
        return start_proxy_with(tmp_path / f"p{n}", stub.url, url, ledger=QUIET, policies=no_models, signing=signing,
                                process=True)

    pool = ThreadPoolExecutor(3)
    spares = [pool.submit(spawn, n) for n in range(1, KILLS + 2)]
    live = [first, spares.pop(0).result(300)]
    everyone = list(live)
    load = ChatLoad("K", [p.url for p in live], clients=4).start()
    try:
        wait_until(lambda: load.count() >= 8, 60, "answers before the first kill")
        for kill in range(KILLS):
            index = kill % 2
            replacement = spares[kill].result(300)
            everyone.append(replacement)
            before = load.count()
            wait_until(lambda: load.count() >= before + 4, 60, f"answers before kill {kill + 1}")  # noqa: B023
            kill9(live[index])
            live[index] = replacement
            load.point(index, replacement.url)
        restarted = time.monotonic()
        wait_until(lambda: load.count(since=restarted) >= 8, 60, "answers after the last kill")
    finally:
        outcomes = load.finish()
        for future in spares:
            future.cancel()
        pool.shutdown(wait=True)
        everyone += [f.result() for f in spares if f.done() and not f.cancelled() and f.exception() is None
                     and f.result() not in everyone]
        keys = public_keys(live[0])
        for proxy in everyone:
            stop_proxy(proxy)
    try:
        acknowledged = [o.receipt_id for o in outcomes if o.acknowledged]
        streamed = [o for o in outcomes if o.acknowledged and int(o.marker.split("x")[0][1:]) % 2 == 1]
        assert len(acknowledged) >= 60 and len(streamed) >= 20
        assert sum(1 for o in outcomes if o.status == "connection") >= 1  # the kills did cut clients off
        assert {o.status for o in outcomes} <= {200, "connection", "stream_error"}, {o.status for o in outcomes}
        size = asyncio.run(check_ledger(url, keys, acknowledged))
        assert size >= len(acknowledged)
    finally:
        delete_redis_namespace(url)


# --------------------------------------------------------------------------------------------
# a detector raising; the provider failing mid-stream (one proxy, Privacy only)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory, stub, privacy_only: Path):
    url = redis_namespace_url("faulty")
    proxy = start_proxy_with(tmp_path_factory.mktemp("faulty"), stub.url, url, policies=privacy_only,
                             ledger=QUIET, raise_in_detector=True)
    yield proxy
    stop_proxy(proxy)
    delete_redis_namespace(url)


@pytest.mark.parametrize("stream", [False, True])
def test_a_detector_raising_fails_closed(faulty: RunningProxy, upstream, stream: bool) -> None:
    before = metric_value(scrape(faulty), "sonate_requests_total", {"result": "guardrail_error"})
    client = openai.OpenAI(base_url=faulty.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    secret = f"{DETECTOR_FAULT} my account number is 00-4471-93 ({stream})"
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="stub", messages=[{"role": "user", "content": secret}], stream=stream)
    assert caught.value.status_code == 503 and caught.value.response.headers["retry-after"] == "1"
    error = caught.value.response.json()["error"]
    assert error["code"] == "guardrail_error" and "00-4471-93" not in error["message"]
    assert "x-sonate-receipt-id" not in caught.value.response.headers
    assert upstream.received() == []  # never forwarded unscreened
    assert metric_value(scrape(faulty), "sonate_requests_total", {"result": "guardrail_error"}) == before + 1
    log = faulty.log()
    assert "guardrails raised RuntimeError" in log and "00-4471-93" not in log and "Traceback" not in log
    ok = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "Name a river."}])
    assert ok.choices[0].message.content == "Stub answer: Name a river."  # the proxy still serves


def test_an_output_detector_raising_withholds_the_answer(faulty: RunningProxy, upstream) -> None:
    client = openai.OpenAI(base_url=faulty.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    upstream.queue(Reply(text=f"Here it is: {DETECTOR_FAULT} 00-4471-93"))
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "Say something."}])
    error = caught.value.response.json()["error"]
    assert caught.value.status_code == 503 and error["code"] == "guardrail_error"
    assert "00-4471-93" not in caught.value.response.text
    # streamed: the content screened so far, then one error event, no [DONE]; the receipt says why it ended
    upstream.queue(Reply(chunks=["Fine ", "words ", "first. ", f"Then {DETECTOR_FAULT} 00-4471-93 ", "and more."]))
    headers, events = _sse(faulty, {"model": "stub", "stream": True,
                                    "messages": [{"role": "user", "content": "Say something."}]})
    assert "[DONE]" not in events and json.loads(events[-1])["error"]["code"] == "guardrail_error"
    assert not any("00-4471-93" in e for e in events)
    request = urllib.request.Request(faulty.v1 + f"/receipts/{headers['x-sonate-receipt-id']}",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert json.loads(r.read())["evidence"]["stream"]["ended"] == "guardrail_error"
    assert "00-4471-93" not in faulty.log()


def _sse(proxy: RunningProxy, body: dict) -> tuple[dict[str, str], list[str]]:
    """(headers, the data lines) of a raw streamed chat completion."""
    request = urllib.request.Request(proxy.v1 + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        lines = [line.decode().strip() for line in r]
        return dict(r.headers), [line[6:] for line in lines if line.startswith("data: ")]


def test_provider_failing_mid_stream_gives_a_clean_error_and_an_honest_receipt(faulty: RunningProxy, upstream) -> None:
    chunks = [f"Sentence {n} says that the water is cold today. " for n in range(40)]  # past the hold-back
    # paced, as a provider sends: the cut comes after chunks the proxy has read, not in one burst
    upstream.queue(Reply(chunks=chunks, chunk_delay=0.005, truncate=True))
    headers, events = _sse(faulty, {"model": "stub", "stream": True,
                                    "messages": [{"role": "user", "content": "Tell me about a river."}]})
    assert events and events[-1] != "[DONE]" and "[DONE]" not in events
    last = json.loads(events[-1])
    assert set(last) == {"error"} and last["error"]["message"] and "Traceback" not in events[-1]
    delivered = "".join((json.loads(e)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                        for e in events[:-1])
    assert delivered and "".join(chunks).startswith(delivered), events
    request = urllib.request.Request(faulty.v1 + f"/receipts/{headers['x-sonate-receipt-id']}",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        receipt = json.loads(r.read())
    assert receipt["evidence"]["stream"] == {"ended": "upstream_error", "delivered_chars": len(delivered)}
    # the openai SDK sees it as an error, not as a finished answer
    upstream.queue(Reply(chunks=chunks, truncate=True))
    client = openai.OpenAI(base_url=faulty.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="stub", stream=True,
                                                messages=[{"role": "user", "content": "Tell me about a river."}]):
            pass


# --------------------------------------------------------------------------------------------
# disk full: RLIMIT_FSIZE on the proxy process


def _fill(proxy: RunningProxy, tag: str, limit: int = 400) -> tuple[list[str], openai.APIStatusError]:
    """Send requests until one fails; (receipt ids acknowledged before, the failure)."""
    client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    acknowledged = []
    padding = "and the river kept flowing past the old mill " * 20
    for n in range(limit):
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="stub", messages=[{"role": "user", "content": f"{tag} {n}: {padding}"}])
        except openai.APIStatusError as exc:
            return acknowledged, exc
        acknowledged.append(raw.headers["x-sonate-receipt-id"])
    raise AssertionError(f"{limit} requests fitted under the file size limit")


def test_disk_full_sqlite_ledger_answers_503_and_stays_intact(tmp_path: Path, stub, no_models: Path) -> None:
    db = tmp_path / "ledger.db"
    proxy = start_proxy_with(tmp_path / "proxy", stub.url, f"sqlite:///{db}", policies=no_models,
                             ledger={"on_unavailable": "fail_closed", **QUIET}, limit_file_bytes=384 * 1024)
    try:
        keys = public_keys(proxy)
        acknowledged, failure = _fill(proxy, "sqlite")
        assert len(acknowledged) >= 5
        error = failure.response.json()["error"]
        assert failure.status_code == 503 and error["code"] == "ledger_unavailable", error
        assert proxy.process.poll() is None  # still running, still answering what needs no write
        with urllib.request.urlopen(proxy.url + "/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        stop_proxy(proxy)
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert asyncio.run(check_ledger(f"sqlite:///{db}", keys, acknowledged)) >= len(acknowledged)


def test_disk_full_spool_answers_503_and_replays_what_it_acknowledged(tmp_path: Path, stub, no_models: Path) -> None:
    server = RedisServer(tmp_path / "redis", aof=False).start()
    admin = redis.Redis(port=server.port, decode_responses=True)
    user, password = "spool-ledger", "spool-ledger-password-for-tests"
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", "~*", "&*", "+@all")
    url = f"redis://{user}:{password}@127.0.0.1:{server.port}/0?namespace=spoolfull"
    proxy = start_proxy_with(tmp_path / "proxy", stub.url, url, policies=no_models, limit_file_bytes=96 * 1024,
                             ledger={"on_unavailable": "spool", "spool_dir": str(tmp_path / "proxy" / "spool"),
                                     **QUIET})
    try:
        keys = public_keys(proxy)
        admin.execute_command("ACL", "SETUSER", user, "-@scripting")  # the ledger refuses appends: receipts spool
        acknowledged, failure = _fill(proxy, "spool")
        assert len(acknowledged) >= 3
        error = failure.response.json()["error"]
        assert failure.status_code == 503 and error["type"] == "api_error", error
        admin.execute_command("ACL", "SETUSER", user, "+@all")  # the ledger is back: the spool replays
        wait_until(lambda: metric_value(scrape(proxy), "sonate_spool_depth") == 0, 60, "the spool to drain")
        assert asyncio.run(check_ledger(url, keys, acknowledged)) >= len(acknowledged)
        client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
        raw = client.chat.completions.with_raw_response.create(model="stub",
                                                               messages=[{"role": "user", "content": "Name a lake."}])
        assert raw.headers["x-sonate-receipt-status"] == "appended"
        acknowledged.append(raw.headers["x-sonate-receipt-id"])
        # Acks that could not be written (the file was full) must not replay twice after a restart.
        stop_proxy(proxy)
        proxy = start_proxy_with(tmp_path / "proxy", stub.url, url,
                                 ledger={"on_unavailable": "spool", "spool_dir": str(tmp_path / "proxy" / "spool"),
                                         **QUIET})
        wait_until(lambda: metric_value(scrape(proxy), "sonate_spool_depth") == 0, 60, "the spool to drain again")
        time.sleep(1)
        assert asyncio.run(check_ledger(url, keys, acknowledged)) >= len(acknowledged)
    finally:
        stop_proxy(proxy)
        admin.close()
        server.stop()
