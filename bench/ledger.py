"""Ledger benchmark: append throughput/latency and Merkle proof cost at 10^6 entries.

    .venv/bin/python bench/ledger.py [--redis URL (default: its own redis-server)] [--seconds 8] [--entries 1000000] [--samples 300]

1. **Appends**: 1 and 4 writer *processes* (each a real :class:`proxy.receipts.Ledger` with
   its own store connection) append one-receipt batches — sealing, Ed25519 signing, the
   head compare-and-set and the Merkle nodes in the same atomic write — for ``--seconds``.
   Reports receipts appended per second (all writers together) and p50/p99 latency of one
   ``Ledger.append`` call, against Redis and SQLite (WAL, ``synchronous=FULL``).
2. **Proofs at 10^6 entries**: the tree of ``--entries`` synthetic leaves is built in
   memory with :func:`proxy.tlog.merkle.extend` (2·10^6 SHA-256) and its ~2·10^6
   nodes are bulk-inserted straight into the store's node layout (SQLite: one
   ``executemany`` into ``tree_nodes``; Redis: one 2 MiB string per 65,536 nodes of a
   level, pipelined ``SET``) with the tree size set — no receipts are written, since a
   proof reads only nodes. Then inclusion and consistency proofs for random indexes/sizes
   are generated through :mod:`proxy.tlog.tree` (the code the HTTP API runs) and
   verified with :mod:`proxy.tlog.merkle`; reports hashes per proof, JSON bytes, and
   p50/p99 generation and verification time.

Redis data goes to throw-away namespaces that are deleted afterwards; SQLite to a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.receipts import Ledger, Signer, json_hash, new_receipt, open_store  # noqa: E402
from proxy.tlog import merkle  # noqa: E402
from proxy.tlog.proofs import consistency_proof_doc, inclusion_proof_doc  # noqa: E402
from proxy.tlog.tree import consistency_proof, inclusion_proof, tree_root  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402  (the one way this repo starts a Redis)


def _receipt() -> dict:
    return new_receipt(
        request_id="req_" + uuid.uuid4().hex[:12], actor="bench", intent="general",
        inputs_hash=json_hash({"m": uuid.uuid4().hex}), outputs_hash=json_hash({"c": "ok"}),
        policy_id="safety.harm", guardrail_action="allow",
        evidence={"scores": {"harm": "0.0132"}, "detector": {"name": "minilm-lr", "version": "1"}},
        model="demo", provider="demo", stratum={"lang": "en"})


def _writer(url: str, seed: bytes, start_at: float, seconds: float, queue: "mp.Queue") -> None:
    async def run() -> list[float]:
        store = open_store(url)
        ledger = Ledger(store, Signer(seed), max_attempts=10_000)
        await store.ping()
        latencies = []
        while time.time() < start_at:
            await asyncio.sleep(0.001)
        end = start_at + seconds
        while time.time() < end:
            receipt = _receipt()
            t0 = time.perf_counter()
            await ledger.append([receipt])
            latencies.append(time.perf_counter() - t0)
        await store.close()
        return latencies

    queue.put(asyncio.run(run()))


def _drop_namespace(redis_url: str, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match="{" + namespace + "}:*", count=1000))
    for lo in range(0, len(keys), 1000):
        client.delete(*keys[lo:lo + 1000])
    client.close()


def bench_appends(kind: str, url: str, writers: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    seed = os.urandom(32)
    start_at = time.time() + 4.0  # let every process import and connect first
    procs = [ctx.Process(target=_writer, args=(url, seed, start_at, seconds, queue)) for _ in range(writers)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r)
    count = len(latencies)
    q = statistics.quantiles(latencies, n=100)

    async def check() -> int:
        store = open_store(url)
        try:
            size = await store.tree_size()
            head = await store.head()
            assert head is not None and size == head.height + 1 == count, (size, head, count)
            return size
        finally:
            await store.close()

    asyncio.run(check())
    return {"store": kind, "writers": writers, "receipts": count, "per_s": count / seconds,
            "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


async def _bulk_tree(kind: str, url: str, entries: int) -> tuple[dict, float, float]:
    t0 = time.perf_counter()
    leaves = [merkle.leaf_hash(hashlib.sha256(i.to_bytes(8, "big")).digest()) for i in range(entries)]
    nodes, _ = merkle.extend(0, [], leaves)
    built = time.perf_counter() - t0
    store = open_store(url)
    t0 = time.perf_counter()
    try:
        if kind == "sqlite":
            def load(conn):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT INTO tree_nodes (level, idx, hash) VALUES (?,?,?)",
                                 ((lv, ix, h) for (lv, ix), h in nodes.items()))
                conn.execute("INSERT OR REPLACE INTO ledger_meta (name, value) VALUES ('tree_size', ?)", (entries,))
                conn.commit()
            await store._run(load)
        else:
            chunks: dict[str, bytearray] = {}
            for node, digest in nodes.items():
                key, offset = store.node_location(node)
                buf = chunks.setdefault(key, bytearray())
                if len(buf) < offset + 32:
                    buf.extend(bytes(offset + 32 - len(buf)))
                buf[offset:offset + 32] = digest
            async with store._raw.pipeline(transaction=False) as pipe:
                for key, buf in chunks.items():
                    pipe.set(key, bytes(buf))
                pipe.set(store.key("tree", "size"), entries)
                await pipe.execute()
    finally:
        loaded = time.perf_counter() - t0
        await store.close()
    return nodes, built, loaded


async def bench_proofs(kind: str, url: str, entries: int, samples: int) -> list[dict]:
    nodes, built, loaded = await _bulk_tree(kind, url, entries)
    store = open_store(url)
    rng = random.Random(1)
    rows = []
    try:
        root = await tree_root(store, entries)
        assert root == merkle.root_from_frontier([nodes[n] for n in merkle.frontier_ids(entries)])
        gen, ver, sizes, hashes = [], [], [], []
        for _ in range(samples):
            index = rng.randrange(entries)
            t0 = time.perf_counter()
            path = await inclusion_proof(store, index, entries)
            gen.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert merkle.verify_inclusion_path(index, entries, nodes[(0, index)], path, root)
            ver.append(time.perf_counter() - t0)
            hashes.append(len(path))
            sizes.append(len(json.dumps(inclusion_proof_doc(index, entries, nodes[(0, index)], path))))
        rows.append(_proof_row(kind, "inclusion", entries, hashes, sizes, gen, ver, built, loaded, len(nodes)))
        gen, ver, sizes, hashes = [], [], [], []
        for _ in range(samples):
            first = rng.randrange(1, entries)
            first_root = merkle.root_from_frontier([nodes[n] for n in merkle.frontier_ids(first)])
            t0 = time.perf_counter()
            proof = await consistency_proof(store, first, entries)
            gen.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert merkle.verify_consistency_path(first, entries, first_root, root, proof)
            ver.append(time.perf_counter() - t0)
            hashes.append(len(proof))
            sizes.append(len(json.dumps(consistency_proof_doc(first, entries, proof))))
        rows.append(_proof_row(kind, "consistency", entries, hashes, sizes, gen, ver, built, loaded, len(nodes)))
    finally:
        await store.close()
    return rows


def _proof_row(kind, what, entries, hashes, sizes, gen, ver, built, loaded, node_count) -> dict:
    g, v = statistics.quantiles(gen, n=100), statistics.quantiles(ver, n=100)
    return {"store": kind, "proof": what, "entries": entries, "hashes_max": max(hashes),
            "hashes_mean": statistics.mean(hashes), "json_bytes_max": max(sizes),
            "gen_p50_ms": g[49] * 1000, "gen_p99_ms": g[98] * 1000,
            "verify_p50_us": v[49] * 1e6, "verify_p99_us": v[98] * 1e6,
            "build_s": built, "load_s": loaded, "nodes": node_count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=os.environ.get("SONATE_TEST_REDIS"),
                        help="a Redis to measure (default: a redis-server of its own on a free port)")
    parser.add_argument("--seconds", type=float, default=8.0, help="duration of each append run")
    parser.add_argument("--entries", type=int, default=1_000_000, help="tree size for the proof benchmark")
    parser.add_argument("--samples", type=int, default=300, help="proofs generated per kind")
    parser.add_argument("--skip-appends", action="store_true")
    parser.add_argument("--skip-proofs", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sonate-bench-"))
    own_redis = None
    if args.redis is None:  # never assume a system service: start one on a free port
        own_redis = RedisServer(tmp / "redis", aof=False).start()
        args.redis = own_redis.url
        print(f"Redis: a redis-server of its own at {args.redis} (no persistence)")
    namespaces: list[str] = []

    def url(kind: str, tag: str) -> str:
        if kind == "sqlite":
            return "sqlite:///" + str(tmp / f"{tag}.db")
        namespace = f"bench-{tag}-{uuid.uuid4().hex[:8]}"
        namespaces.append(namespace)
        return f"{args.redis}?namespace={namespace}"

    try:
        if not args.skip_appends:
            print(f"Appends ({args.seconds:g} s per run; one receipt per append; chain + Merkle nodes in one atomic write)")
            print(f"{'store':8} {'writers':>7} {'receipts':>9} {'receipts/s':>11} {'p50 ms':>8} {'p99 ms':>8}")
            for kind in ("redis", "sqlite"):
                for writers in (1, 4):
                    row = bench_appends(kind, url(kind, f"append{writers}"), writers, args.seconds)
                    print(f"{row['store']:8} {row['writers']:>7} {row['receipts']:>9} {row['per_s']:>11.0f} "
                          f"{row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}", flush=True)
        if not args.skip_proofs:
            print(f"\nProofs at {args.entries:,} entries ({args.samples} random proofs each; "
                  "generation reads stored nodes through proxy.tlog.tree)")
            print(f"{'store':8} {'proof':12} {'hashes':>7} {'JSON B':>7} {'gen p50 ms':>11} {'gen p99 ms':>11} "
                  f"{'verify p50 us':>14} {'build s':>8} {'load s':>7}")
            for kind in ("redis", "sqlite"):
                for row in asyncio.run(bench_proofs(kind, url(kind, "proofs"), args.entries, args.samples)):
                    print(f"{row['store']:8} {row['proof']:12} {row['hashes_max']:>7} {row['json_bytes_max']:>7} "
                          f"{row['gen_p50_ms']:>11.2f} {row['gen_p99_ms']:>11.2f} {row['verify_p50_us']:>14.1f} "
                          f"{row['build_s']:>8.1f} {row['load_s']:>7.1f}", flush=True)
    finally:
        for namespace in namespaces:
            _drop_namespace(args.redis, namespace)
        if own_redis is not None:
            own_redis.stop()


if __name__ == "__main__":
    main()
