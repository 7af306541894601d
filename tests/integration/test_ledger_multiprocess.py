"""Many OS processes append to one ledger at once: the chain must stay whole.

docs/architecture.md, "Trust receipts": exactly one receipt per height, ever; no fork,
no gap. Four worker processes (``python -m tests.support.ledger``) each
append 100 batches of 1-3 receipts to the same Redis namespace / SQLite file,
sharing one signing key file they all try to create at the same moment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxy.receipts import load_public_keys, open_store, verify_store
from tests.support.ledger import REPO_ROOT, STORE_KINDS, ledger_url  # noqa: F401  (fixture)

WORKERS = 4
BATCHES = 100


def _start_workers(url: str, key_file: Path, sync_dir: Path) -> list[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return [
        subprocess.Popen([sys.executable, "-m", "tests.support.ledger", "worker", url, str(key_file), str(sync_dir),
                          str(i), str(BATCHES)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
        for i in range(WORKERS)
    ]


@pytest.mark.parametrize("ledger_url", STORE_KINDS, indirect=True)
async def test_processes_appending_concurrently_keep_one_chain(ledger_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "signing.json"
    workers = _start_workers(ledger_url, key_file, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < WORKERS:
            failed = [w for w in workers if w.poll() is not None]
            assert not failed, failed[0].communicate()[1]
            assert time.monotonic() < deadline, "workers did not get ready"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        results = []
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
            results.append(json.loads(out))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    # All processes raced to create the key file; they must all have ended up with one key.
    assert {r["key_id"] for r in results} == set(load_public_keys(key_file))
    batches = [batch for r in results for batch in r["batches"]]
    appended = [receipt_id for batch in batches for receipt_id in batch]
    assert len(batches) == WORKERS * BATCHES and len(set(appended)) == len(appended)

    store = open_store(ledger_url)
    try:
        count, failures = await verify_store(store, load_public_keys(key_file))
        assert failures == []
        assert count == len(appended)
        head = await store.head()
        assert head is not None and head.height == len(appended) - 1
        chain = await store.range(0, len(appended))
        # The Merkle tree, written by every process in the same compare-and-set batches, is whole.
        from proxy.receipts.tree import verify_tree

        assert await store.tree_size() == len(appended)
        assert await verify_tree(store, load_public_keys(key_file)) == (len(appended), [])
    finally:
        await store.close()

    height_of = {r["receipt_id"]: r["ledger_height"] for r in chain}
    assert set(height_of) == set(appended)
    for batch in batches:  # each batch is contiguous: appended atomically
        first = height_of[batch[0]]
        assert [height_of[i] for i in batch] == list(range(first, first + len(batch)))
    # The writers really interleaved (otherwise this test proves nothing about races).
    switches = sum(1 for a, b in zip(chain, chain[1:]) if a["actor"] != b["actor"])
    # (SQLite's file lock favours the last committer — it re-appends while the others back off in
    # the busy handler — so runs are long; a few switches per writer still prove real races.)
    assert switches >= WORKERS * 2, switches
