"""Several ledgers on a real Redis Cluster: two proxy processes append to three ledgers at once.

A local cluster of three masters (tests/support/redis_cluster.py); ``ledger.partition: hash`` with
three shards, whose hash tags ``{sonate:shard-0..2}`` fall on the three masters. Both proxies
answer concurrent requests; every chain must verify (``sonate verify --all``), every receipt
must be stored exactly once and be found by id from either proxy, and a receipt tampered with in
any one ledger must be reported in that ledger.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from proxy.receipts.ledgers import ledger_store_url
from proxy.storage import open_store
from proxy.tlog.checkpoint import parse_checkpoint
from tests.support.forked import sonate
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, start_proxy, stop_proxy
from tests.support.redis_cluster import RedisCluster

SHARDS = ["shard-0", "shard-1", "shard-2"]
REQUESTS_PER_PROXY = 24


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    running = RedisCluster(tmp_path_factory.mktemp("cluster")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory, stub, cluster):
    """Two proxies on the cluster, one signing key (the second starts with the first's key file)."""
    ledger = {"url": cluster.url, "partition": "hash", "shards": 3, "checkpoint_interval_seconds": 1}
    first_dir = tmp_path_factory.mktemp("proxy-a")
    first = start_proxy(first_dir, stub.url, cluster.url, overrides={"ledger": ledger})
    second_dir = tmp_path_factory.mktemp("proxy-b")
    shutil.copytree(first_dir / "keys", second_dir / "keys")
    try:
        second = start_proxy(second_dir, stub.url, cluster.url, overrides={"ledger": ledger})
    except BaseException:
        stop_proxy(first)
        raise
    yield first, second
    stop_proxy(first)
    stop_proxy(second)


def chat(proxy, text: str, key: str) -> str:
    client = openai.OpenAI(base_url=proxy.v1, api_key=key, max_retries=0, timeout=120)
    raw = client.chat.completions.with_raw_response.create(model="demo", messages=[{"role": "user", "content": text}])
    return raw.headers["x-sonate-receipt-id"]


def get_json(proxy, path: str, key: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(proxy.url + path)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            return response.status, json.loads(body) if response.headers.get_content_type() == "application/json" \
                else body.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def _stored(url: str) -> list[dict]:
    store = open_store(url, create=False)
    try:
        head = await store.head()
        return [] if head is None else await store.range(0, head.height + 1)
    finally:
        await store.close()


def verify_all(proxy, cluster) -> subprocess.CompletedProcess:
    return sonate("verify", "--ledger", cluster.url, "--all",
                  "--keys", str(proxy.key_file), timeout=120)


def test_three_ledgers_on_three_masters(cluster) -> None:
    masters = {cluster.master_of(f"{{sonate:{name}}}:head") for name in SHARDS}
    assert len(masters) == 3


def test_two_proxies_three_ledgers_verify_and_lose_nothing(proxies, cluster) -> None:
    import asyncio

    first, second = proxies
    jobs = [(p, key, f"What is {n} + {i}? Answer briefly.")
            for n in range(REQUESTS_PER_PROXY) for i, (p, key) in enumerate([(first, CLIENT_KEY), (second, CLIENT_KEY)])]
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda job: chat(job[0], job[2], job[1]), jobs))
    assert len(set(ids)) == len(ids) == 2 * REQUESTS_PER_PROXY

    stored = {name: asyncio.run(_stored(ledger_store_url(cluster.url, name))) for name in ["default", *SHARDS]}
    assert stored["default"] == []  # the hash rule leaves nothing to the default ledger
    every = [r for name in SHARDS for r in stored[name]]
    assert all(r["ledger"] == name for name in SHARDS for r in stored[name])
    assert all(len(stored[name]) > 0 for name in SHARDS)  # all three ledgers took receipts
    stored_ids = [r["receipt_id"] for r in every]
    assert len(stored_ids) == len(set(stored_ids))  # nothing duplicated
    assert set(ids) <= set(stored_ids)  # nothing lost
    for name in SHARDS:  # heights contiguous from 0 in each ledger
        assert [r["ledger_height"] for r in stored[name]] == list(range(len(stored[name])))

    for rid, (proxy, key, _) in zip(ids[:6], jobs[:6]):  # found by id from the other proxy too
        other = second if proxy is first else first
        status, receipt = get_json(other, f"/v1/receipts/{rid}", key)
        assert status == 200 and receipt["receipt_id"] == rid and receipt["ledger"] in SHARDS

    done = verify_all(first, cluster)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK: {len(every)} ledger receipts verified" in done.stdout

    deadline = time.monotonic() + 30  # each ledger publishes its own checkpoints, under its own origin
    while True:
        status, note = get_json(first, "/v1/ledger/checkpoint?ledger=shard-1")
        if status == 200 and parse_checkpoint(note).tree_size == len(stored["shard-1"]):
            break
        assert time.monotonic() < deadline, (status, note)
        time.sleep(0.5)
    assert note.startswith("sonate-trust-proxy/ledger/shard-1\n")
    texts = []
    for proxy in (first, second):
        metrics = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        with urllib.request.urlopen(metrics, timeout=30) as response:
            texts.append(response.read().decode())
    assert 'sonate_ledger_checkpoint_tree_size{ledger="shard-1"}' in texts[0]
    written: dict[str, float] = {}  # both proxies' receipts written, per ledger label
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "sonate_receipts_written_total":
                    written[sample.labels["ledger"]] = written.get(sample.labels["ledger"], 0) + sample.value
    assert written == {name: len(stored[name]) for name in SHARDS}
    assert get_json(first, "/v1/ledger/checkpoint?ledger=nope")[0] == 404

    # tamper with one receipt of one ledger: the run over all ledgers fails and names that ledger
    victim = stored["shard-2"][0]
    client = redis.RedisCluster.from_url(cluster.url.replace("?cluster=1", ""), decode_responses=True)
    key = f"{{sonate:shard-2}}:r:{victim['ledger_height']}"
    original = client.get(key)
    try:
        client.set(key, original.replace(victim["ts"], victim["ts"][:-2] + ("1Z" if victim["ts"][-2] != "1" else "2Z")))
        done = verify_all(first, cluster)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "ledger shard-2 height 0" in done.stdout and "signature" in done.stdout
        assert "ledger shard-0" not in done.stdout and "ledger shard-1" not in done.stdout
    finally:
        client.set(key, original)
        client.close()
