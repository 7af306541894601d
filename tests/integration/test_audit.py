"""The ledger audit (LVP): sampled receipts are re-verified; tampering shows up in the fail counters.

A test-owned Redis namespace holds a real ledger with a Merkle tree and a signed checkpoint; the
tests then rewrite stored receipts the way an attacker with write access to Redis would and check
which result the audit reports (docs/receipts.md "Ledger audit", proxy.receipts.audit).
"""

from __future__ import annotations

import json
import random
import uuid

import pytest
import redis

from proxy.server.metrics import Metrics
from proxy.receipts import Ledger, Signer, entry_hash, load_public_keys, open_store, public_key_entry
from proxy.receipts.audit import audit_heights, classify, sample_heights
from proxy.receipts.canonical import canonical
from proxy.receipts.receipt import seal
from proxy.tlog.tree import publish_checkpoint
from proxy.receipts.verify import Failure
from proxy.server.tasks import LedgerAuditor
from tests.support.redis_server import redis_url
from tests.support.faults import metric_value
from tests.support.ledger import make_receipt

SIZE = 12


@pytest.fixture()
async def ledger_env():
    namespace = "audit-" + uuid.uuid4().hex[:10]
    store = open_store(f"{redis_url()}?namespace={namespace}")
    signer = Signer.generate()
    ledger = Ledger(store, signer)
    for _ in range(SIZE // 2):
        await ledger.append([make_receipt(), make_receipt()])
    await publish_checkpoint(store, signer)
    raw = redis.Redis.from_url(redis_url(), decode_responses=True)
    yield store, signer, raw, namespace
    await store.close()
    keys = list(raw.scan_iter(match=f"{{{namespace}}}*", count=1000))
    if keys:
        raw.delete(*keys)
    raw.close()


def _keys(signer: Signer):
    return load_public_keys(public_key_entry(signer))


def test_sample_is_the_newest_plus_distinct_random_heights() -> None:
    heights = sample_heights(100, 10, random.Random(7))
    assert heights[-1] == 99 and len(set(heights)) == 11 and all(0 <= h < 100 for h in heights)
    assert sample_heights(3, 10) == [0, 1, 2] and sample_heights(0, 5) == []


def test_results_follow_signature_chain_inclusion_priority() -> None:
    fail = lambda check: Failure(1, None, check, "x")  # noqa: E731
    assert classify([]) == "pass"
    assert classify([fail("inclusion"), fail("signature")]) == "fail_signature"
    assert classify([fail("inclusion"), fail("prev_hash")]) == "fail_chain"
    assert classify([fail("key_window")]) == "fail_key"
    assert classify([fail("checkpoint_signature")]) == "fail_inclusion"


async def test_untouched_ledger_passes_every_check(ledger_env) -> None:
    store, signer, _, _ = ledger_env
    results = await audit_heights(store, _keys(signer), list(range(SIZE)))
    assert [r.result for r in results] == ["pass"] * SIZE, [r.failures for r in results if r.failures]


async def test_tampered_content_fails_the_signature_and_the_counter_rises(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    key = f"{{{namespace}}}:r:5"
    receipt = json.loads(raw.get(key))
    receipt["actor"] = "mallory"
    raw.set(key, canonical(receipt).decode())
    metrics = Metrics()
    auditor = LedgerAuditor(store, lambda: _keys(signer), metrics, interval_s=0, sample_size=SIZE)
    results = await auditor.run_once()  # the sample covers every height
    by_height = {r.height: r.result for r in results}
    assert by_height[5] == "fail_signature"
    assert by_height[6] == "fail_chain"  # its prev_hash no longer names receipt 5
    text = metrics.render().decode()
    assert metric_value(text, "sonate_ledger_verifications_total", {"result": "fail_signature"}) == 1
    assert metric_value(text, "sonate_ledger_verifications_total", {"result": "fail_chain"}) == 1
    assert metric_value(text, "sonate_ledger_verifications_total", {"result": "pass"}) == SIZE - 2


async def test_resigned_receipt_with_a_broken_link_fails_the_chain(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    original = json.loads(raw.get(f"{{{namespace}}}:r:3"))
    forged = seal(original, ledger_height=3, prev_hash="sha256:" + "ab" * 32, signer=signer)  # key holder
    raw.set(f"{{{namespace}}}:r:3", canonical(forged).decode())
    [result] = await audit_heights(store, _keys(signer), [3])
    assert result.result == "fail_chain" and {f.check for f in result.failures} >= {"prev_hash", "inclusion"}


async def test_rewritten_tail_passes_the_chain_but_not_the_checkpoint(ledger_env) -> None:
    """A key holder rewrites the newest receipt and the head: only the signed checkpoint catches it."""
    store, signer, raw, namespace = ledger_env
    top = SIZE - 1
    original = json.loads(raw.get(f"{{{namespace}}}:r:{top}"))
    rewritten = seal({**original, "guardrail_action": "allow", "actor": "mallory"}, ledger_height=top,
                     prev_hash=original["prev_hash"], signer=signer)
    raw.set(f"{{{namespace}}}:r:{top}", canonical(rewritten).decode())
    raw.hset(f"{{{namespace}}}:head", mapping={"height": top, "entry_hash": entry_hash(rewritten)})
    [result] = await audit_heights(store, _keys(signer), [top])
    assert result.result == "fail_inclusion", result.failures


async def test_receipt_from_an_unpublished_key_fails_the_key_check(ledger_env) -> None:
    store, signer, _, _ = ledger_env
    [result] = await audit_heights(store, _keys(Signer.generate()), [0])
    assert result.result == "fail_key"
