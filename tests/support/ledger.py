"""Shared fixtures and helpers for the receipt/ledger tests (real SQLite, real Redis).

Imported by tests/integration/test_receipts.py, tests/integration/test_ledger_conformance.py and
tests/integration/test_ledger_multiprocess.py. Run as a script it is the worker process
of the multiprocess test: ``python tests/support/ledger.py worker URL KEYFILE DIR INDEX BATCHES``.
Redis is the test session's own server (tests/support/redis_server.py).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # when run as a worker script
    sys.path.insert(0, str(REPO_ROOT))

from proxy.receipts import Ledger, Signer, json_hash, load_or_create_signer, new_receipt, open_store  # noqa: E402
from proxy.storage.base import LedgerStore  # noqa: E402
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url  # noqa: E402

STORE_KINDS = ("sqlite", "redis")


def make_receipt(**overrides: Any) -> dict[str, Any]:
    """An unsealed receipt with realistic, unique content; keyword arguments override fields."""
    fields: dict[str, Any] = dict(
        request_id="req_" + uuid.uuid4().hex[:12],
        actor="app:tests",
        intent="general",
        inputs_hash=json_hash({"messages": [{"role": "user", "content": uuid.uuid4().hex}], "temperature": 0.2}),
        outputs_hash=json_hash({"choices": [{"message": {"content": "hi"}}]}),
        policy_id="safety.toxicity",
        guardrail_action="allow",
        evidence={"scores": {"toxicity": "0.0132"}, "detector": {"name": "profanity", "version": "1.2"}},
        model="gpt-4o-mini",
        provider="openai",
        stratum={"lang": "en", "cohort": "B"},
    )
    fields.update(overrides)
    return new_receipt(**fields)


def sqlite_url(path: Path) -> str:
    """``sqlite:////abs/path`` for an absolute path."""
    return "sqlite:///" + str(path.resolve())


@pytest.fixture(scope="session")
def signer() -> Signer:
    """One in-memory signing key for the session."""
    return Signer.generate()


@pytest.fixture(scope="session")
def keys(signer: Signer) -> dict[str, bytes]:
    """The trusted-key map for :func:`signer`."""
    return {signer.key_id: signer.public_key}


@pytest.fixture
async def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh ledger URL of the parametrized kind (``"sqlite"``/``"redis"``); Redis keys dropped afterwards."""
    if request.param == "sqlite":
        yield sqlite_url(tmp_path / "ledger.db")
        return
    url = redis_namespace_url("test")
    try:
        yield url
    finally:
        delete_redis_namespace(url)


@pytest.fixture
async def store(ledger_url: str) -> AsyncIterator[LedgerStore]:
    """An open store for ``ledger_url``, closed afterwards."""
    opened = open_store(ledger_url)
    try:
        yield opened
    finally:
        await opened.close()


# -- multiprocess worker --------------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[LedgerStore]:
    """An open SQLite ledger store at ``tmp_path / "ledger.db"``, closed after the test."""
    opened = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        yield opened
    finally:
        await opened.close()


async def _worker(url: str, key_file: str, sync_dir: Path, index: int, batches: int) -> dict[str, Any]:
    signer = load_or_create_signer(key_file)
    store = open_store(url)
    try:
        await store.ping()
        ledger = Ledger(store, signer)
        (sync_dir / f"ready-{index}").touch()
        deadline = time.monotonic() + 30
        while not (sync_dir / "go").exists():
            if time.monotonic() > deadline:
                raise SystemExit("start signal never came")
            await asyncio.sleep(0.002)
        rng = random.Random(index)
        appended = []
        for _ in range(batches):
            batch = [make_receipt(actor=f"worker-{index}") for _ in range(rng.randint(1, 3))]
            sealed = await ledger.append(batch)
            appended.append([r["receipt_id"] for r in sealed])
        return {"key_id": signer.key_id, "batches": appended}
    finally:
        await store.close()


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "worker":
        raise SystemExit(__doc__)
    _, _, url_arg, key_arg, dir_arg, index_arg, batches_arg = sys.argv
    print(json.dumps(asyncio.run(_worker(url_arg, key_arg, Path(dir_arg), int(index_arg), int(batches_arg)))))


def receipt_count(ledger_url: str) -> int:
    """Receipts in the SQLite ledger at ``ledger_url`` (``sqlite:///PATH``, as a test proxy's
    ``ledger_url``): its head's height + 1, 0 when empty."""
    from proxy.storage.sqlite import SQLiteStore

    async def count() -> int:
        store = SQLiteStore(Path(ledger_url[len("sqlite:///"):]))
        try:
            head = await store.head()
            return 0 if head is None else head.height + 1
        finally:
            await store.close()
    return asyncio.run(count())
