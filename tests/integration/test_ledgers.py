"""Several ledgers in one deployment (:class:`proxy.receipts.ledgers.Ledgers`) on SQLite and Redis:
each receipt reaches the ledger its rule names, every ledger is a chain of its own that verifies,
and a receipt is found by id whichever ledger holds it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from proxy.cli import main
from proxy.cli.common import EXIT_OK, EXIT_USAGE
from proxy.receipts import Ledger, Signer
from proxy.receipts.ledgers import Ledgers, ledger_names, ledger_origin, ledger_store_url, shard_of
from proxy.receipts.signing import load_or_create_signer
from proxy.receipts.tree import DEFAULT_ORIGIN, publish_checkpoint
from proxy.receipts.verify import verify_store
from proxy.storage import open_store
from tests.support.forked import sonate
from tests.support.ledger import make_receipt, sqlite_url
from tests.support.redis_server import redis_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "redis"])
async def base_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The deployment's ledger URL: a SQLite file or a fresh namespace of the test Redis (every
    ledger's keys, ``{ns}`` and ``{ns:<name>}``, dropped afterwards)."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "ledger.db")
        return
    namespace = "ledgers-" + uuid.uuid4().hex[:10]
    try:
        yield f"{redis_url()}?namespace={namespace}"
    finally:
        client = redis.Redis.from_url(redis_url())
        keys = list(client.scan_iter(match=f"{{{namespace}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


async def test_team_partition_routes_verifies_and_finds(base_url: str, tmp_path: Path) -> None:
    signer = Signer.generate()
    keys = {signer.key_id: signer.public_key}
    names = ledger_names("team", teams=["payments", "search"])
    ledgers = Ledgers(base_url, "team", names, lambda store: Ledger(store, signer),
                      team_of={"app:pay": "payments", "app:search": "search"})
    try:
        actors = ["app:pay", "app:search", "app:other"] * 10
        sealed = await asyncio.gather(*(ledgers.append([make_receipt(actor=a), make_receipt(actor=a)])
                                        for a in actors))
        for actor, batch in zip(actors, sealed):
            expected = {"app:pay": "payments", "app:search": "search"}.get(actor, "default")
            assert [r["ledger"] for r in batch] == [expected, expected]
            assert batch[1]["ledger_height"] == batch[0]["ledger_height"] + 1  # one request: one atomic write
        for name in names:
            count, failures = await verify_store(ledgers.ledger(name).store, keys)
            assert (count, failures) == (20, [])
            assert all(r["ledger"] == name for r in await ledgers.ledger(name).store.range(0, 20))
        probe = sealed[4][1]
        assert await ledgers.get_by_id(probe["receipt_id"]) == probe
        assert await ledgers.get_by_id("rcpt_" + "0" * 32) is None
        # a review step naming its case's ledger stays there, whoever writes it
        step = await ledgers.append([{**make_receipt(actor="app:search"), "ledger": "payments"}])
        assert step[0]["ledger"] == "payments" and step[0]["ledger_height"] == 20
    finally:
        await ledgers.close()
    if base_url.startswith("sqlite"):
        assert sorted(p.name for p in tmp_path.glob("ledger*.db")) == [
            "ledger.db", "ledger.payments.db", "ledger.search.db"]


async def test_mixed_batch_is_split_per_ledger_in_order(base_url: str) -> None:
    signer = Signer.generate()
    ledgers = Ledgers(base_url, "hash", ledger_names("hash", shards=3), lambda store: Ledger(store, signer), shards=3)
    try:
        batch = [make_receipt(request_id=f"req_mixed_{i}") for i in range(12)]
        ids = [r["receipt_id"] for r in batch]
        sealed = await ledgers.append(batch)
        assert [r["receipt_id"] for r in sealed] == ids
        assert [r["ledger"] for r in sealed] == [shard_of(f"req_mixed_{i}", 3) for i in range(12)]
        assert len({r["ledger"] for r in sealed}) == 3
        again = await ledgers.append([{k: v for k, v in r.items()} for r in batch])  # a replay: idempotent
        assert [r["ledger_height"] for r in again] == [r["ledger_height"] for r in sealed]
    finally:
        await ledgers.close()


async def test_none_partition_is_the_single_ledger(tmp_path: Path) -> None:
    signer = Signer.generate()
    url = sqlite_url(tmp_path / "ledger.db")
    ledgers = Ledgers(url, "none", ["default"], lambda store: Ledger(store, signer))
    try:
        sealed = await ledgers.append([make_receipt()])
        assert "ledger" not in sealed[0]
    finally:
        await ledgers.close()
    store = open_store(ledger_store_url(url, "default"))
    try:
        assert (await store.get_by_height(0)) == sealed[0]
    finally:
        await store.close()


def test_report_reads_one_ledger_or_all_and_verifies_each_chain(tmp_path: Path) -> None:
    """``sonate report --name`` / ``--all``: the receipts of the chosen ledgers, each LVP sample
    receipt checked against the receipt before it in its own ledger."""
    key_file = tmp_path / "keys" / "signing-key.json"
    signer = load_or_create_signer(key_file)
    url = sqlite_url(tmp_path / "ledger.db")
    names = ledger_names("team", teams=["payments", "search"])
    ledgers = Ledgers(url, "team", names, lambda store: Ledger(store, signer),
                      team_of={"app:pay": "payments", "app:search": "search"})
    counts = {"app:pay": 5, "app:search": 3, "app:other": 2}

    async def write() -> None:
        try:
            for actor, count in counts.items():
                for _ in range(count):
                    await ledgers.append([make_receipt(actor=actor)])
        finally:
            await ledgers.close()

    asyncio.run(write())

    def report(*choice: str) -> dict:
        out = tmp_path / "report.json"
        result = sonate("report", "--from", "2000-01-01", "--to", "2100-01-01",
                        "--ledger", url, "--policies", str(ROOT / "policies"), "--keys", str(key_file), "--no-progress",
                        "--out", str(out), *choice, timeout=300)
        assert result.returncode == 0, result.stderr
        return json.loads(out.read_text())

    every = report("--all")
    assert every["sources"]["ledgers"] == ["default", "payments", "search"]
    assert every["sources"]["receipts_scanned"] == 10
    assert every["disclosure"]["n_interactions"] == 10
    lvp = every["kpis"]["tis"]["components"]["lvp"]  # each receipt links to its own ledger's previous
    assert (lvp["successes"], lvp["n"]) == (10, 10)
    payments = report("--name", "payments")
    assert payments["sources"]["ledgers"] == ["payments"] and payments["sources"]["receipts_scanned"] == 5
    assert report()["sources"]["receipts_scanned"] == 2  # the default ledger alone, as before partitions


def test_ledger_commands_take_one_ledger_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sonate ledger reindex|checkpoint --name L`` work on ledger L's store, under its origin."""
    signer = Signer.generate()
    url = sqlite_url(tmp_path / "ledger.db")
    names = ledger_names("team", teams=["payments"])
    ledgers = Ledgers(url, "team", names, lambda store: Ledger(store, signer), team_of={"app:pay": "payments"})

    async def write_and_publish() -> str:
        try:
            for actor in ["app:pay"] * 5 + ["app:other"] * 2:
                await ledgers.append([make_receipt(actor=actor)])
        finally:
            await ledgers.close()
        store = open_store(ledger_store_url(url, "payments"), create=False)
        try:
            await publish_checkpoint(store, signer, ledger_origin(DEFAULT_ORIGIN, "payments"))
            return await store.latest_checkpoint()
        finally:
            await store.close()

    note = asyncio.run(write_and_publish())
    assert main(["ledger", "reindex", "--ledger", url, "--name", "payments"]) == EXIT_OK
    assert capsys.readouterr().out == "Merkle tree: 5 leaves (0 added)\n"
    assert main(["ledger", "reindex", "--ledger", url]) == EXIT_OK  # the default ledger: its own two
    assert capsys.readouterr().out == "Merkle tree: 2 leaves (0 added)\n"
    assert main(["ledger", "checkpoint", "--ledger", url, "--name", "payments"]) == EXIT_OK
    printed = capsys.readouterr().out
    assert printed == note and printed.startswith(DEFAULT_ORIGIN + "/payments\n5\n")
    assert main(["ledger", "checkpoint", "--ledger", url, "--name", "bad name"]) == EXIT_USAGE
    assert "bad ledger name" in capsys.readouterr().err
