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

from proxy.primitives.canonical import canonical
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, entry_hash, load_public_keys, open_store, public_key_entry
from proxy.receipts.audit import audit_heights, classify, sample_heights
from proxy.receipts.receipt import seal
from proxy.receipts.tree import publish_checkpoint
from proxy.receipts.verify import verify_store
from proxy.server.http.tasks import LedgerAuditor
from proxy.server.telemetry.metrics import Metrics
from tests.support.faults import metric_value
from tests.support.ledger import make_receipt
from tests.support.redis_server import redis_url

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


# --- audit_heights: each failure kind, by (height, receipt_id, check) -----------------------------

def _kinds(result) -> list[tuple]:
    """The failures of one AuditResult as (height, receipt_id, check); every failure says why (a non-empty detail)."""
    assert all(isinstance(f.detail, str) and f.detail for f in result.failures), result.failures
    return [(f.height, f.receipt_id, f.check) for f in result.failures]


def _stored(raw, namespace: str, height: int) -> dict:
    return json.loads(raw.get(f"{{{namespace}}}:r:{height}"))


async def test_a_missing_receipt_and_a_receipt_whose_predecessor_is_missing_fail_the_chain(ledger_env) -> None:
    """Deleted heights fail as ``height`` with no receipt id; the receipt above a hole names its own id."""
    store, signer, raw, namespace = ledger_env
    ids = {h: _stored(raw, namespace, h)["receipt_id"] for h in range(SIZE)}
    raw.delete(f"{{{namespace}}}:r:0", f"{{{namespace}}}:r:5")
    results = await audit_heights(store, _keys(signer), [0, 1, 4, 5, 6, 7])
    assert [r.height for r in results] == [0, 1, 4, 5, 6, 7]
    assert [r.result for r in results] == ["fail_chain", "fail_chain", "pass", "fail_chain", "fail_chain", "pass"]
    by_height = {r.height: r for r in results}
    assert _kinds(by_height[0]) == [(0, None, "height")]
    assert _kinds(by_height[5]) == [(5, None, "height")]
    assert _kinds(by_height[1]) == [(1, ids[1], "height")]
    assert _kinds(by_height[6]) == [(6, ids[6], "height")]
    assert "height 5 " in by_height[6].failures[0].detail and "height 0 " in by_height[1].failures[0].detail


async def test_a_receipt_stored_under_another_height_fails_the_chain(ledger_env) -> None:
    """A validly signed receipt that says height 7 but sits at height 0 (a key holder moved it)."""
    store, signer, raw, namespace = ledger_env
    original = _stored(raw, namespace, 0)
    moved = seal(original, ledger_height=7, prev_hash="sha256:" + "cd" * 32, signer=signer)
    raw.set(f"{{{namespace}}}:r:0", canonical(moved).decode())
    [result] = await audit_heights(store, _keys(signer), [0])
    assert result.result == "fail_chain"
    assert (0, original["receipt_id"], "height") in _kinds(result)
    [detail] = [f.detail for f in result.failures if f.check == "height"]
    assert "height 0" in detail and "7" in detail


async def test_the_newest_receipt_must_hash_to_what_the_head_names(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    top = SIZE - 1
    raw.hset(f"{{{namespace}}}:head", "entry_hash", entry_hash(_stored(raw, namespace, top - 1)))
    below, newest = await audit_heights(store, _keys(signer), [top - 1, top])
    assert below.result == "pass"  # only the receipt at the head's height is compared with it
    assert newest.result == "fail_chain"
    assert _kinds(newest) == [(top, _stored(raw, namespace, top)["receipt_id"], "head")]


async def test_an_unhashable_newest_receipt_never_matches_the_head(ledger_env) -> None:
    """A NaN makes the receipt impossible to hash: it fails the head check even against an empty head hash."""
    store, signer, raw, namespace = ledger_env
    top = SIZE - 1
    broken = {**_stored(raw, namespace, top), "evidence": float("nan")}
    raw.set(f"{{{namespace}}}:r:{top}", json.dumps(broken))
    raw.hset(f"{{{namespace}}}:head", "entry_hash", "")
    [result] = await audit_heights(store, _keys(signer), [top])
    kinds = _kinds(result)
    assert (top, broken["receipt_id"], "head") in kinds
    assert (top, broken["receipt_id"], "inclusion") in kinds  # no leaf hash, no proof


async def test_a_malformed_latest_checkpoint_fails_every_covered_receipt(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    raw.hset(f"{{{namespace}}}:cp", "100", "not a checkpoint\n")
    raw.zadd(f"{{{namespace}}}:cp:sizes", {"100": 100})
    results = await audit_heights(store, _keys(signer), list(range(SIZE)))
    assert [r.result for r in results] == ["fail_inclusion"] * SIZE
    assert [_kinds(r) for r in results] == [
        [(h, _stored(raw, namespace, h)["receipt_id"], "checkpoint")] for h in range(SIZE)]


async def test_receipts_above_the_latest_checkpoint_need_no_inclusion_proof(ledger_env) -> None:
    store, signer, _, _ = ledger_env
    await Ledger(store, signer).append([make_receipt(), make_receipt()])  # heights SIZE, SIZE + 1: not yet checkpointed
    results = await audit_heights(store, _keys(signer), [SIZE - 1, SIZE, SIZE + 1])
    assert [r.result for r in results] == ["pass"] * 3, [r.failures for r in results]


async def test_a_checkpoint_signed_by_an_untrusted_key_fails_inclusion(ledger_env) -> None:
    """The receipts are fine, but the newest checkpoint is signed by a key the auditor does not trust."""
    store, signer, _, _ = ledger_env
    await Ledger(store, signer).append([make_receipt()])
    await publish_checkpoint(store, Signer.generate())
    results = await audit_heights(store, _keys(signer), [0, SIZE])
    assert [r.result for r in results] == ["fail_inclusion"] * 2
    assert all("checkpoint_signature" in {f.check for f in r.failures} for r in results)


async def test_missing_tree_nodes_fail_inclusion_for_the_covered_receipts(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    raw.delete(*raw.scan_iter(match=f"{{{namespace}}}:t:*"))
    results = await audit_heights(store, _keys(signer), [0, 7])
    assert [r.result for r in results] == ["fail_inclusion"] * 2
    assert [_kinds(r) for r in results] == [
        [(h, _stored(raw, namespace, h)["receipt_id"], "inclusion")] for h in (0, 7)]


async def test_tampered_content_also_fails_its_inclusion_proof_by_receipt_id(ledger_env) -> None:
    store, signer, raw, namespace = ledger_env
    receipt = _stored(raw, namespace, 5)
    raw.set(f"{{{namespace}}}:r:5", canonical({**receipt, "actor": "mallory"}).decode())
    [result] = await audit_heights(store, _keys(signer), [5])
    assert (5, receipt["receipt_id"], "inclusion") in _kinds(result)


async def test_key_validity_windows_are_applied_and_any_mapping_of_keys_is_accepted(ledger_env) -> None:
    from types import MappingProxyType

    from proxy.receipts.signing import PublicKeys

    store, signer, _, _ = ledger_env
    retired = PublicKeys(_keys(signer), windows={signer.key_id: (None, "2000-01-01T00:00:00.000Z")})
    assert [r.result for r in await audit_heights(store, retired, [0, 1])] == ["fail_key"] * 2
    plain = MappingProxyType(dict(_keys(signer)))
    assert [r.result for r in await audit_heights(store, plain, [0, 1])] == ["pass"] * 2


def test_unknown_checks_count_as_chain_failures_and_schema_ranks_first() -> None:
    fail = lambda check: Failure(1, None, check, "x")  # noqa: E731
    assert classify([fail("a_check_added_later")]) == "fail_chain"
    assert classify([fail("signature"), fail("schema")]) == "fail_schema"


def test_sample_rejects_negative_arguments_and_k_zero_is_just_the_newest() -> None:
    with pytest.raises(ValueError):
        sample_heights(-1, 3)
    with pytest.raises(ValueError):
        sample_heights(5, -1)
    with pytest.raises(ValueError):
        sample_heights(0, -1)  # even for an empty ledger
    assert sample_heights(5, 0) == [4]


async def test_the_genesis_receipt_has_no_predecessor_to_read(ledger_env) -> None:
    """Height 0 is checked against the genesis hash only: a key planted below it (``r:-1``) is never read."""
    store, signer, raw, namespace = ledger_env
    raw.set(f"{{{namespace}}}:r:-1", raw.get(f"{{{namespace}}}:r:0"))
    [result] = await audit_heights(store, _keys(signer), [0])
    assert result.result == "pass", result.failures


@pytest.mark.parametrize("stored", [[1, 2], "a string", 42, None])
async def test_a_stored_receipt_that_is_json_but_no_object_fails_its_height_and_the_round_goes_on(
        ledger_env, stored) -> None:
    """An attacker's non-object JSON at one height fails that height; its neighbours are still audited."""
    store, signer, raw, namespace = ledger_env
    raw.set(f"{{{namespace}}}:r:4", json.dumps(stored))
    results = await audit_heights(store, _keys(signer), [3, 4, 5])
    assert [r.height for r in results] == [3, 4, 5]
    assert results[0].result == "pass"
    assert results[1].result != "pass" and results[1].failures
    assert results[2].result == "fail_chain"  # its predecessor is no receipt: the link cannot hold


async def test_verify_store_fails_a_ledger_whose_head_was_deleted(ledger_env) -> None:
    """Receipts with no head are no empty ledger: verify_store reports the missing head."""
    store, signer, raw, namespace = ledger_env
    assert await verify_store(store, _keys(signer)) == (SIZE, [])
    first = _stored(raw, namespace, 0)
    raw.delete(f"{{{namespace}}}:head")
    count, failures = await verify_store(store, _keys(signer))
    assert count == 0 and [(f.height, f.receipt_id, f.check) for f in failures] == [(0, first["receipt_id"], "head")]
    assert (await verify_store(store, _keys(signer), start=3))[1][0].height == 3


async def test_a_missing_receipt_and_a_malformed_checkpoint_say_why(ledger_env) -> None:
    """The failure details an auditor reads: a hole below the head, and a latest checkpoint that does not parse."""
    store, signer, raw, namespace = ledger_env
    raw.delete(f"{{{namespace}}}:r:5")
    raw.hset(f"{{{namespace}}}:cp", "100", "not a checkpoint\n")
    raw.zadd(f"{{{namespace}}}:cp:sizes", {"100": 100})
    below, missing = await audit_heights(store, _keys(signer), [4, 5])
    assert missing.failures == [Failure(5, None, "height", "no receipt stored at this height (below the head)")]
    assert below.failures == [Failure(4, _stored(raw, namespace, 4)["receipt_id"], "checkpoint",
                                      "the latest checkpoint is malformed")]
