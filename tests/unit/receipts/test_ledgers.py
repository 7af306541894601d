"""The ledger partition rule, the ledgers' store URLs and the receipt's optional ``ledger`` field."""

from __future__ import annotations

import pytest

from proxy.config import LedgerConfig
from proxy.receipts import Signer
from proxy.receipts.ledgers import (
    choose_ledger,
    ledger_names,
    ledger_store_url,
    shard_of,
)
from proxy.receipts.receipt import schema_problems, seal
from proxy.receipts.verify import verify_receipt
from tests.support.ledger import make_receipt


def test_none_partition_names_no_ledger() -> None:
    assert choose_ledger("none", team="a", policy_set="b", request_id="req_1") is None
    assert ledger_names("none", teams=["a"]) == ["default"]


def test_team_and_policy_set_rules_fall_back_to_default() -> None:
    assert choose_ledger("team", team="payments") == "payments"
    assert choose_ledger("team", team=None, policy_set="x") == "default"
    assert choose_ledger("policy_set", team="payments", policy_set="strict") == "strict"
    assert choose_ledger("policy_set", policy_set=None) == "default"
    assert ledger_names("team", teams=["b", "a", "default"]) == ["default", "a", "b"]
    assert ledger_names("policy_set", policy_sets=["strict"]) == ["default", "strict"]


def test_hash_rule_is_stable_and_spreads() -> None:
    # fixed value: the SHA-256 rule must not change between releases (receipts already name it)
    assert shard_of("req_0", 3) == shard_of("req_0", 3) == choose_ledger("hash", shards=3, request_id="req_0")
    import hashlib
    expected = int.from_bytes(hashlib.sha256(b"req_0").digest()[:8], "big") % 3
    assert shard_of("req_0", 3) == f"shard-{expected}"
    counts: dict[str, int] = {}
    for i in range(3000):
        name = shard_of(f"req_{i}", 3)
        counts[name] = counts.get(name, 0) + 1
    assert sorted(counts) == ["shard-0", "shard-1", "shard-2"]
    assert min(counts.values()) > 900
    assert ledger_names("hash", shards=2) == ["default", "shard-0", "shard-1"]
    with pytest.raises(ValueError):
        choose_ledger("hash", shards=3)
    with pytest.raises(ValueError):
        shard_of("x", 0)
    with pytest.raises(ValueError):
        choose_ledger("tenant")


def test_store_urls_per_ledger() -> None:
    assert ledger_store_url("sqlite:////var/l/ledger.db", "default") == "sqlite:////var/l/ledger.db"
    assert ledger_store_url("sqlite:////var/l/ledger.db", "team-a") == "sqlite:////var/l/ledger.team-a.db"
    assert ledger_store_url("redis://h:7000/0", "shard-1") == "redis://h:7000/0?namespace=sonate%3Ashard-1"
    url = ledger_store_url("redis://h:7000/0?namespace=prod&cluster=1", "t")
    assert "namespace=prod%3At" in url and "cluster=1" in url
    with pytest.raises(ValueError):
        ledger_store_url("sqlite:////x.db", "a/b")


def test_config_partition_fields() -> None:
    assert LedgerConfig().partition == "none"
    cfg = LedgerConfig(partition="hash", shards=3)
    assert (cfg.partition, cfg.shards) == ("hash", 3)
    with pytest.raises(ValueError):
        LedgerConfig(partition="tenant")
    with pytest.raises(ValueError):
        LedgerConfig(partition="hash", shards=0)


def test_ledger_field_is_optional_checked_and_signed() -> None:
    signer = Signer.generate()
    keys = {signer.key_id: signer.public_key}
    old = seal(make_receipt(), ledger_height=0, prev_hash="sha256:" + "0" * 64, signer=signer)
    assert "ledger" not in old and verify_receipt(old, keys) == []  # receipts without it still verify
    named = seal({**make_receipt(), "ledger": "team-a"}, ledger_height=0, prev_hash="sha256:" + "0" * 64, signer=signer)
    assert named["ledger"] == "team-a" and verify_receipt(named, keys) == []
    moved = {**named, "ledger": "team-b"}  # the field is signed: a receipt cannot be re-labelled
    assert [f.check for f in verify_receipt(moved, keys)] == ["signature"]
    assert schema_problems({**named, "ledger": "bad name"})[0][0] == "ledger"
    assert schema_problems({**named, "ledgers": "x"}) == [("ledgers", "unexpected field")]
