"""The ledger partition rule, the ledgers' store URLs, finding a deployment's ledgers, routing and
appending over several ledgers (:class:`~proxy.receipts.ledgers.Ledgers` on SQLite) and the receipt's
optional ``ledger`` field."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.config import LedgerConfig
from proxy.receipts import Ledger, Signer
from proxy.receipts.ledgers import (
    Ledgers,
    choose_ledger,
    discover_ledgers,
    ledger_names,
    ledger_of,
    ledger_origin,
    ledger_store_url,
    shard_of,
)
from proxy.receipts.receipt import schema_problems, seal
from proxy.receipts.verify import verify_receipt
from proxy.storage.base import LedgerUnavailable
from tests.support.ledger import make_receipt, sqlite_url
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import delete_redis_keys, free_port, redis_url


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


def test_defaults_are_one_shard_and_the_default_ledger() -> None:
    assert {choose_ledger("hash", request_id=f"req_{i}") for i in range(20)} == {"shard-0"}  # one shard unless told
    assert shard_of("req_1", 1) == "shard-0"
    assert ledger_names("hash") == ["default", "shard-0"]
    assert choose_ledger("policy_set", team="payments") == "default"
    with pytest.raises(ValueError):
        ledger_names("tenant")


def test_a_receipt_names_its_ledger_or_is_of_the_default_one() -> None:
    assert ledger_of({"ledger": "team-a"}) == "team-a"
    assert ledger_of({}) == "default"
    assert ledger_of({"ledger": None}) == "default"


def test_each_ledger_but_the_default_has_its_own_origin() -> None:
    assert ledger_origin("example.org/log", None) == "example.org/log"
    assert ledger_origin("example.org/log", "default") == "example.org/log"
    assert ledger_origin("example.org/log", "team-a") == "example.org/log/team-a"


def test_store_urls_keep_the_rest_of_the_url() -> None:
    assert ledger_store_url("sqlite:///data/ledger", "blue") == "sqlite:///data/ledger.blue.db"  # no suffix: .db
    assert ledger_store_url("sqlite:///data/l.sqlite3", "blue") == "sqlite:///data/l.blue.sqlite3"
    assert ledger_store_url("rediss://:pw@h:6380/2?socket_timeout=5&namespace=a&namespace=prod", "blue") == (
        "rediss://:pw@h:6380/2?socket_timeout=5&namespace=prod%3Ablue")  # the last namespace counts
    assert ledger_store_url("redis://h:7000/0?namespace=prod", "default") == "redis://h:7000/0?namespace=prod"
    with pytest.raises(ValueError):
        ledger_store_url("postgres://h/db", "blue")


# ---- which ledgers a deployment has (what `sonate verify --all` walks) --------------------------------


def _touch(directory: Path, *names: str) -> None:
    for name in names:
        (directory / name).write_bytes(b"")


async def test_sqlite_ledgers_are_the_files_beside_the_configured_one(tmp_path: Path) -> None:
    _touch(tmp_path, "ledger.db", "ledger.red.db", "ledger.blue.db", "ledger.default.db", "ledger.bad name.db",
           "ledger.green.json", "other.grey.db", "ledger.db-wal")
    assert await discover_ledgers(sqlite_url(tmp_path / "ledger.db")) == ["default", "blue", "red"]
    (tmp_path / "ledger.db").unlink()  # no default ledger (yet): only the others
    assert await discover_ledgers(sqlite_url(tmp_path / "ledger.db")) == ["blue", "red"]
    other = tmp_path / "other"
    other.mkdir()
    _touch(other, "l.sqlite3", "l.x.sqlite3", "l.y.db", "plain", "plain.z.db", "plain.w.json")
    assert await discover_ledgers(sqlite_url(other / "l.sqlite3")) == ["default", "x"]
    assert await discover_ledgers(sqlite_url(other / "plain")) == ["default", "z"]  # no suffix: .db files


@pytest.fixture
def redis_namespaces() -> Iterator[str]:
    """A fresh namespace prefix on the test Redis; every key under it (any database) dropped afterwards."""
    prefix = "disc" + uuid.uuid4().hex[:8]
    yield prefix
    for db in (0, 5):
        delete_redis_keys(redis_url().rsplit("/", 1)[0] + f"/{db}", f"{{{prefix}*")


async def _ledgers_with_receipts(url: str, names: list[str]) -> None:
    signer = Signer.generate()
    ledgers = Ledgers(url, "team", names, lambda store: Ledger(store, signer), team_of={n: n for n in names})
    try:
        await ledgers.append([make_receipt(actor=name) for name in names])
    finally:
        await ledgers.close()


async def test_redis_ledgers_are_the_heads_under_the_namespace(redis_namespaces: str) -> None:
    """Every ledger of the namespace, in the database the URL names; another deployment whose
    namespace merely starts with this one's (its default ledger ``{<ns>AB}``) is not among them."""
    server = redis_url().rsplit("/", 1)[0]
    url = f"{server}?socket_timeout=5&db=5&namespace={redis_namespaces}"  # the database as a parameter
    await _ledgers_with_receipts(url, ["red", "blue"])
    await _ledgers_with_receipts(f"{server}?db=5&namespace={redis_namespaces}AB", ["green"])
    assert await discover_ledgers(url) == ["default", "blue", "red"]
    assert await discover_ledgers(f"{server}/0?namespace={redis_namespaces}") == ["default"]  # other database
    assert await discover_ledgers(f"{server}?db=5&namespace={redis_namespaces}AB") == ["default", "green"]


async def test_unsupported_or_unreachable_ledger_urls() -> None:
    with pytest.raises(ValueError):
        await discover_ledgers("postgres://h/db")
    port = free_port()  # nothing listens: a rediss URL is a Redis ledger that cannot be read
    for scheme in ("redis", "rediss"):
        with pytest.raises(LedgerUnavailable):
            await discover_ledgers(f"{scheme}://127.0.0.1:{port}/0?socket_connect_timeout=1")
    with pytest.raises(LedgerUnavailable):  # cluster=1 against a Redis that is not a cluster
        await discover_ledgers(redis_url() + "?cluster=1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    running = RedisCluster(tmp_path_factory.mktemp("cluster")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize(("flag", "namespace"), [("1", "disc-a"), ("yes", None), ("True", "disc-b")])
async def test_cluster_ledgers_are_found_on_every_master(cluster: RedisCluster, flag: str,
                                                         namespace: str | None) -> None:
    """``cluster=1|yes|true`` scans every master; without a namespace the deployment's is ``sonate``
    (the cluster is the test's own)."""
    names = ["blue", "red", "green", "grey", "teal"]
    url = cluster.url.replace("cluster=1", f"cluster={flag}" + (f"&namespace={namespace}" if namespace else ""))
    tag = namespace or "sonate"
    assert len({cluster.master_of(f"{{{tag}:{name}}}:head") for name in names}) > 1  # spread
    await _ledgers_with_receipts(url, names)
    assert await discover_ledgers(url) == ["default", *sorted(names)]


# ---- routing and appending over several ledgers ------------------------------------------------------


def _ledgers(tmp_path: Path, partition: str, names: list[str], **options) -> Ledgers:
    signer = Signer.generate()
    return Ledgers(sqlite_url(tmp_path / "ledger.db"), partition, names, lambda store: Ledger(store, signer),
                   **options)


def test_the_default_ledger_is_always_there_first_and_names_are_unique(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path, "team", ["blue", "red", "blue", "default"])
    assert ledgers.names == ["default", "blue", "red"] and list(ledgers.ledgers) == ledgers.names
    assert ledgers.ledger(None) is ledgers.default is ledgers.ledgers["default"]
    assert ledgers.ledger("red") is ledgers.ledgers["red"] and ledgers.store is ledgers.default.store
    assert Path(ledgers.ledger("red").store.path).name == "ledger.red.db"  # each ledger on its own store
    with pytest.raises(KeyError):
        ledgers.ledger("green")
    with pytest.raises(ValueError):
        _ledgers(tmp_path, "tenant", [])
    assert repr(ledgers) == "Ledgers(partition='team', names=['default', 'blue', 'red'])"


def test_route_follows_the_rule_and_falls_back_to_default(tmp_path: Path) -> None:
    team = _ledgers(tmp_path, "team", ["blue"], team_of={"app:b": "blue", "app:g": "green"})
    assert team.route(make_receipt(actor="app:b")) == "blue"
    assert team.route(make_receipt(actor="app:g")) == "default"  # a team without a ledger of its own
    assert team.route(make_receipt(actor="app:x")) == "default"
    assert team.route({**make_receipt(actor="app:x"), "ledger": "blue"}) == "blue"  # named: kept
    policy_set = _ledgers(tmp_path, "policy_set", ["strict"])
    assert policy_set.route(make_receipt(evidence={"policy_set": "strict"})) == "strict"
    assert policy_set.route(make_receipt(evidence={})) == "default"
    hashed = _ledgers(tmp_path, "hash", ledger_names("hash", shards=4), shards=4)
    assert {hashed.route(make_receipt(request_id=f"req_{i}")) for i in range(40)} == {f"shard-{i}" for i in range(4)}
    assert hashed.route(make_receipt(request_id="req_7")) == shard_of("req_7", 4)
    one_shard = _ledgers(tmp_path, "hash", ["shard-0"])
    assert {one_shard.route(make_receipt(request_id=f"req_{i}")) for i in range(10)} == {"shard-0"}
    none = _ledgers(tmp_path, "none", [])
    assert none.route({**make_receipt(), "ledger": "blue"}) is None


async def test_append_routes_a_batch_of_two_ledgers_and_finds_each_receipt(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path, "team", ["blue"], team_of={"app:b": "blue"})
    try:
        batch = [make_receipt(actor=a) for a in ("app:b", "app:x", "app:b", "app:x", "app:x")]
        ids = [r["receipt_id"] for r in batch]
        sealed = await ledgers.append(batch)
        assert [r["receipt_id"] for r in sealed] == ids
        assert [(r["ledger"], r["ledger_height"]) for r in sealed] == [
            ("blue", 0), ("default", 0), ("blue", 1), ("default", 1), ("default", 2)]
        assert await ledgers.ledger("blue").store.range(0, 2) == [sealed[0], sealed[2]]
        assert await ledgers.get_by_id(ids[2]) == sealed[2] and await ledgers.get_by_id(ids[4]) == sealed[4]
        assert await ledgers.get_by_id("rcpt_" + "0" * 32) is None
        [one] = await ledgers.append([make_receipt(actor="app:b")])  # one ledger: one write there
        assert (one["ledger"], one["ledger_height"]) == ("blue", 2)
        with pytest.raises(KeyError):
            await ledgers.append([{**make_receipt(), "ledger": "green"}])
    finally:
        await ledgers.close()


async def test_a_single_ledger_deployment_appends_and_finds_without_a_ledger_field(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path, "none", [])
    try:
        sealed = await ledgers.append([make_receipt(), make_receipt()])
        assert ["ledger" in r for r in sealed] == [False, False]
        assert [r["ledger_height"] for r in sealed] == [0, 1]
        assert await ledgers.get_by_id(sealed[1]["receipt_id"]) == sealed[1]
        assert await ledgers.get_by_id("rcpt_" + "0" * 32) is None
    finally:
        await ledgers.close()
