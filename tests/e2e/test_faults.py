"""Fault tests with real processes: kill -9 the proxy mid-load; kill -9 its Redis mid-load; a Redis
that answers PING but refuses the append (ACL), for the fail_closed path without timing luck.

Afterwards the chain and the Merkle tree verify, every response a client received with a receipt
id has its receipt in the ledger, and nothing is duplicated (docs/operations.md "Fault policy"). Clients are
the official openai SDK in threads; the only stand-in is the LLM provider (the stub).
The first scenario's proxy is then reused for key rotation without restart and for the ledger
audit job seeing a tampered receipt.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import openai
import pytest
import redis
from openai import OpenAI

from proxy.primitives.canonical import canonical
from proxy.receipts import load_public_keys, open_store, verify_store
from tests.support.faults import kill9, metric_value, scrape, start_proxy_with
from tests.support.proxy import CLIENT_KEY, ROOT, RunningProxy, stop_proxy
from tests.support.redis_server import RedisServer, delete_redis_namespace, redis_namespace_url

CLIENTS = 4


@pytest.fixture(scope="module")
def ledger_policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's policies minus Safety: these tests exercise the ledger, not the guardrails, and
    every proxy start then loads fewer models (the request flow and receipts are unchanged)."""
    directory = tmp_path_factory.mktemp("policies")
    for source in (ROOT / "policies").glob("*.yaml"):
        if source.name != "safety.yaml":
            shutil.copy(source, directory / source.name)
    return directory


@pytest.fixture(scope="module")
def continuity_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The continuity policy alone (no detector model) for the proxy process killed with SIGKILL and
    its restart: the kill and the chain are about the ledger, and the process then starts without
    loading a model (as in tests/e2e/test_faults_extended.py)."""
    directory = tmp_path_factory.mktemp("policies-continuity")
    shutil.copy(ROOT / "policies" / "continuity.yaml", directory / "continuity.yaml")
    return directory


@dataclass
class Outcome:
    marker: str
    status: int | str  # HTTP status, or "connection" when the proxy vanished
    receipt_id: str | None = None
    receipt_status: str | None = None
    at: float = 0.0


@dataclass
class Load:
    """CLIENTS threads sending chat completions through ``proxy_url`` until stopped."""

    tag: str
    proxy_url: str
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _worker(self, index: int) -> None:
        client = OpenAI(base_url=self.proxy_url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=30)
        n = 0
        while not self.stop.is_set():
            n += 1
            marker = f"{self.tag}{index}x{n}x{uuid.uuid4().hex[:6]}"
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="stub", messages=[{"role": "user", "content": f"What is a good name for a cat? ({marker})"}])
                outcome = Outcome(marker, raw.status_code, raw.headers.get("x-sonate-receipt-id"),
                                  raw.headers.get("x-sonate-receipt-status"), time.monotonic())
            except openai.APIStatusError as exc:
                outcome = Outcome(marker, exc.status_code, at=time.monotonic())
            except openai.APIConnectionError:
                outcome = Outcome(marker, "connection", at=time.monotonic())
                time.sleep(0.05)
            with self.lock:
                self.outcomes.append(outcome)

    def start(self) -> "Load":
        self._pool = ThreadPoolExecutor(CLIENTS)
        self._futures = [self._pool.submit(self._worker, i) for i in range(CLIENTS)]
        return self

    def finish(self) -> list[Outcome]:
        self.stop.set()
        for future in self._futures:
            future.result(60)
        self._pool.shutdown()
        return list(self.outcomes)

    def count(self, status: int | str = 200, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for o in self.outcomes if o.status == status and o.at >= since)

    def switch(self, proxy_url: str) -> None:
        self.proxy_url = proxy_url  # the workers read it per client; new clients after a restart
        self.stop.set()
        for future in self._futures:
            future.result(60)
        self.stop = threading.Event()
        self._futures = [self._pool.submit(self._worker, i) for i in range(CLIENTS)]


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


async def check_ledger(url: str, keys, received: list[str]) -> None:
    """Chain and tree verify; every received receipt id is stored exactly once."""
    from proxy.receipts.tree import verify_tree

    store = open_store(url)
    try:
        count, failures = await verify_store(store, keys)
        assert failures == [], [str(f) for f in failures[:5]]
        leaves, tree_failures = await verify_tree(store, keys)
        assert tree_failures == [] and leaves == count, [str(f) for f in tree_failures[:5]]
        stored = [r["receipt_id"] for r in await store.range(0, count)]
        assert len(stored) == len(set(stored)) == count
        missing = [rid for rid in received if rid not in set(stored)]
        assert missing == [], f"{len(missing)} received receipt ids not in the ledger"
    finally:
        await store.close()


# --------------------------------------------------------------------------------------------
# (a) kill -9 the proxy mid-load (Redis ledger), restart it


@pytest.fixture(scope="class")
def crashed(tmp_path_factory: pytest.TempPathFactory, stub, continuity_only: Path):
    directory = tmp_path_factory.mktemp("kill-proxy")
    ledger_url = redis_namespace_url("kill9")
    options = {"audit_interval_seconds": 0.5, "audit_sample_size": 8}
    first = start_proxy_with(directory, stub.url, ledger_url, ledger=options, policies=continuity_only, process=True)
    load = Load("A", first.url).start()
    wait_until(lambda: load.count(200) >= 12, 120, "12 answered requests")
    kill9(first)
    killed_at = time.monotonic()
    wait_until(lambda: load.count("connection", since=killed_at) >= 1, 30, "clients to see the proxy vanish")
    second = start_proxy_with(directory, stub.url, ledger_url, ledger=options)
    load.switch(second.url)
    wait_until(lambda: load.count(200, since=killed_at) >= 8, 120, "8 answered requests after the restart")
    outcomes = load.finish()
    yield second, ledger_url, outcomes, killed_at
    stop_proxy(second)
    delete_redis_namespace(ledger_url)


class TestProxyKilled:
    """(a) kill -9 of the proxy mid-load, restart; then rotation and audit on the restarted proxy."""

    def test_kill9_proxy_chain_tree_and_received_receipts(self, crashed) -> None:
        proxy, ledger_url, outcomes, killed_at = crashed
        received = [o.receipt_id for o in outcomes if o.status == 200]
        assert all(received) and len(received) >= 20
        assert any(o.status == "connection" for o in outcomes)  # the kill did interrupt clients
        assert {o.receipt_status for o in outcomes if o.status == 200} == {"appended"}
        with urllib.request.urlopen(proxy.url + "/v1/keys", timeout=10) as r:
            keys = load_public_keys(json.loads(r.read()))
        asyncio.run(check_ledger(ledger_url, keys, received))

    def test_rotation_takes_effect_without_restart_and_old_receipts_verify(self, crashed) -> None:
        from proxy.cli import main

        proxy, ledger_url, _, _ = crashed
        assert main(["keys", "rotate", "--overlap-seconds", "5", "--key-file", str(proxy.key_file)]) == 0
        new_key = json.loads(proxy.key_file.read_text())["key_id"]
        time.sleep(1.2)  # the proxy checks the key file at most once a second
        client = OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": "Name a colour."}])
        receipt_id = raw.headers["x-sonate-receipt-id"]
        with urllib.request.urlopen(urllib.request.Request(proxy.v1 + f"/receipts/{receipt_id}",
                                                           headers={"Authorization": f"Bearer {CLIENT_KEY}"})) as r:
            assert json.loads(r.read())["key_id"] == new_key
        with urllib.request.urlopen(proxy.v1 + "/keys", timeout=10) as r:
            document = json.loads(r.read())
        statuses = {e["key_id"]: (e["status"], e["not_after"]) for e in document["keys"]}
        assert statuses[new_key] == ("active", None) and len(statuses) == 2
        assert [s for s in statuses.values() if s[0] == "retired"][0][1] is not None
        asyncio.run(check_ledger(ledger_url, load_public_keys(document), [receipt_id]))

    def test_audit_job_counts_passes_then_sees_tampering(self, crashed) -> None:
        proxy, ledger_url, _, _ = crashed
        wait_until(lambda: metric_value(scrape(proxy), "sonate_ledger_verifications_total", {"result": "pass"}) > 0,
                   30, "the audit job to pass receipts")
        namespace = ledger_url.split("namespace=", 1)[1]
        raw = redis.Redis.from_url(ledger_url.split("?", 1)[0], decode_responses=True)
        head = int(raw.hget(f"{{{namespace}}}:head", "height"))
        original = raw.get(f"{{{namespace}}}:r:{head}")  # the newest is sampled every round
        receipt = json.loads(original)
        receipt["outputs_hash"] = "sha256:" + "0" * 64
        raw.set(f"{{{namespace}}}:r:{head}", canonical(receipt).decode())
        try:
            wait_until(lambda: metric_value(scrape(proxy), "sonate_ledger_verifications_total",
                                            {"result": "fail_signature"}) > 0, 30, "the audit job to see the tampering")
        finally:  # the class's other tests verify this ledger, in any order (pytest-randomly)
            raw.set(f"{{{namespace}}}:r:{head}", original)
            raw.close()


# --------------------------------------------------------------------------------------------
# (b) kill -9 Redis mid-load and restart it on the same port and AOF directory


@pytest.fixture(scope="class")
def redis_outage(tmp_path_factory: pytest.TempPathFactory, stub, ledger_policies: Path):
    base = tmp_path_factory.mktemp("kill-redis")
    server = RedisServer(base / "redis").start()
    urls = {"F": server.url + "?namespace=closed", "S": server.url + "?namespace=spooled"}
    quiet = {"audit_interval_seconds": 0}
    with ThreadPoolExecutor(2) as pool:  # both proxies load their models at once
        closed = pool.submit(start_proxy_with, base / "closed", stub.url, urls["F"],
                             ledger={"on_unavailable": "fail_closed", **quiet}, policies=ledger_policies)
        spooled = pool.submit(start_proxy_with, base / "spool", stub.url, urls["S"],
                              ledger={"on_unavailable": "spool", "spool_dir": str(base / "spool" / "q"), **quiet},
                              policies=ledger_policies)
        proxies = {"F": closed.result(), "S": spooled.result()}
    try:
        loads = {tag: Load(tag, proxies[tag].url).start() for tag in "FS"}
        wait_until(lambda: all(load.count(200) >= 6 for load in loads.values()), 120, "load before the outage")
        server.kill()
        killed_at = time.monotonic()
        settle = killed_at + 1.0
        wait_until(lambda: time.monotonic() > settle, 5, "settle")
        stub_f_at_settle = _stub_markers(stub, "F")
        wait_until(lambda: loads["F"].count(503, since=settle) >= 4 and
                   sum(1 for o in loads["S"].outcomes if o.at > settle and o.receipt_status == "pending") >= 4,
                   60, "503s from fail_closed and pending receipts from spool")
        stub_f_before_restart = _stub_markers(stub, "F")
        restart_at = time.monotonic()
        server.start()
        wait_until(lambda: loads["F"].count(200, since=restart_at + 0.5) >= 3, 60, "fail_closed to recover")
        wait_until(lambda: loads["S"].count(200, since=restart_at + 0.5) >= 3, 60, "spool to keep serving")
        outcomes = {tag: load.finish() for tag, load in loads.items()}
        yield dict(urls=urls, proxies=proxies, outcomes=outcomes, killed_at=killed_at, settle=settle,
                   restart_at=restart_at, stub_f=(stub_f_at_settle, stub_f_before_restart))
    finally:
        for proxy in proxies.values():
            stop_proxy(proxy)
        server.stop()


def _stub_markers(stub, tag: str) -> set[str]:
    found = set()
    for body in stub.received():
        text = json.dumps(body)
        start = text.find(f"({tag}")
        if start >= 0:
            found.add(text[start + 1:text.find(")", start)])
    return found


class TestRedisKilled:
    """(b) kill -9 of Redis mid-load, restart on the same port and AOF directory."""

    def test_fail_closed_answers_503_and_forwards_nothing_while_redis_is_down(self, redis_outage, stub) -> None:
        outcomes = redis_outage["outcomes"]["F"]
        at_settle, before_restart = redis_outage["stub_f"]
        during = [o for o in outcomes if redis_outage["settle"] <= o.at < redis_outage["restart_at"]]
        assert during and {o.status for o in during} == {503}
        assert before_restart - at_settle == set(), "fail_closed forwarded requests while the ledger was down"
        assert not ({o.marker for o in during} & before_restart)
        keys = _keys_of(redis_outage["proxies"]["F"])
        received = [o.receipt_id for o in outcomes if o.status == 200]
        asyncio.run(check_ledger(redis_outage["urls"]["F"], keys, received))

    def test_spool_answers_pending_and_replays_everything_in_order(self, redis_outage) -> None:
        outcomes = redis_outage["outcomes"]["S"]
        assert {o.status for o in outcomes} <= {200}, {o.status for o in outcomes}  # no client saw an error
        pending = [o for o in outcomes if o.receipt_status == "pending"]
        assert len(pending) >= 4
        proxy = redis_outage["proxies"]["S"]
        wait_until(lambda: metric_value(scrape(proxy), "sonate_spool_depth") == 0, 60, "the spool to drain")
        assert metric_value(scrape(proxy), "sonate_spool_replayed_total") >= len(pending)
        keys = _keys_of(proxy)
        received = [o.receipt_id for o in outcomes]
        asyncio.run(check_ledger(redis_outage["urls"]["S"], keys, received))
        # Per client, receipts reached the chain in the order the client got its answers.
        heights = asyncio.run(_heights(redis_outage["urls"]["S"], received))
        for index in range(CLIENTS):
            mine = [heights[o.receipt_id] for o in outcomes if o.marker.startswith(f"S{index}x")]
            assert mine == sorted(mine)


def _keys_of(proxy: RunningProxy):
    with urllib.request.urlopen(proxy.v1 + "/keys", timeout=10) as r:
        return load_public_keys(json.loads(r.read()))


async def _heights(url: str, receipt_ids: list[str]) -> dict[str, int]:
    store = open_store(url)
    try:
        return {rid: (await store.get_by_id(rid))["ledger_height"] for rid in receipt_ids}
    finally:
        await store.close()


# --------------------------------------------------------------------------------------------
# (c) fail_closed, deterministic: PING succeeds, the append is refused (Redis ACL)

LEDGER_USER, LEDGER_PASSWORD = "sonate-ledger", "ledger-user-password-for-tests"


def _acl(admin: redis.Redis, *rules: str) -> None:
    """ACL SETUSER for the proxy's ledger user; applies at once to its open connections (Redis 7)."""
    admin.execute_command("ACL", "SETUSER", LEDGER_USER, *rules)


def _height(admin: redis.Redis, namespace: str) -> int:
    return int(admin.hget(f"{{{namespace}}}:head", "height") or -1)


def _chat(proxy: RunningProxy, marker: str):
    client = OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    return client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": f"Suggest a name for a boat ({marker})"}])


def test_fail_closed_append_refused_after_ping_succeeded(tmp_path: Path, upstream, ledger_policies: Path) -> None:
    """A Redis that answers PING but refuses the append (its ACL denies ``@scripting``, i.e. the
    EVALSHA of the append script) under ``on_unavailable: fail_closed`` (docs/operations.md
    "Fault policy"): 503 ``ledger_unavailable`` in OpenAI format from the append path; the model WAS
    called once (the ping passed, its answer is discarded); nothing is stored; the same proxy
    answers normally once the ACL is restored. No timing luck: every step is deterministic."""
    server = RedisServer(tmp_path / "redis", aof=False).start()
    admin = redis.Redis(port=server.port, decode_responses=True)  # the default user: full rights
    _acl(admin, "reset", "on", f">{LEDGER_PASSWORD}", "~*", "&*", "+@all")
    namespace = "failclosed"
    url = f"redis://{LEDGER_USER}:{LEDGER_PASSWORD}@127.0.0.1:{server.port}/0?namespace={namespace}"
    proxy = start_proxy_with(tmp_path / "proxy", upstream.url, url, policies=ledger_policies,
                             ledger={"on_unavailable": "fail_closed", "audit_interval_seconds": 0})
    try:
        first = _chat(proxy, "before")
        assert first.status_code == 200 and first.headers["x-sonate-receipt-status"] == "appended"
        height = _height(admin, namespace)
        assert height >= 0

        _acl(admin, "-@scripting")  # PING/GET/HGET still allowed; EVALSHA (the append) is NOPERM
        with redis.Redis.from_url(url.split("?")[0]) as as_proxy:
            assert as_proxy.ping()  # the proxy's user: PING allowed
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_proxy.evalsha("0" * 40, 0)  # the append script: refused
        with urllib.request.urlopen(proxy.url + "/readyz", timeout=10) as r:
            assert r.status == 200  # readiness pings the ledger: it answers
        keys_before = set(admin.scan_iter(match=f"{{{namespace}}}*"))
        upstream.reset()
        with pytest.raises(openai.APIStatusError) as caught:
            _chat(proxy, "refused")
        error = caught.value.response.json()["error"]
        assert caught.value.status_code == 503 and error["code"] == "ledger_unavailable"
        assert error["type"] == "api_error" and "not completed" in error["message"]  # the append path
        assert "x-sonate-receipt-id" not in caught.value.response.headers
        forwarded = [b for b in upstream.received() if "(refused)" in json.dumps(b)]
        assert len(forwarded) == 1  # the ping passed, so the model was called; its answer was discarded
        assert _height(admin, namespace) == height  # no receipt stored
        assert set(admin.scan_iter(match=f"{{{namespace}}}*")) == keys_before  # nothing else written either

        _acl(admin, "+@all")  # fault lifted: the same proxy, no restart
        after = _chat(proxy, "after")
        assert after.status_code == 200 and after.headers["x-sonate-receipt-status"] == "appended"
        assert _height(admin, namespace) > height
        received = [first.headers["x-sonate-receipt-id"], after.headers["x-sonate-receipt-id"]]
        asyncio.run(check_ledger(url, _keys_of(proxy), received))
    finally:
        stop_proxy(proxy)
        admin.close()
        server.stop()
