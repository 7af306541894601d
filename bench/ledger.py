"""Ledger benchmark: append throughput/latency (group commit) and Merkle proof cost at 10^6 entries.

    .venv/bin/python bench/ledger.py [--redis URL (default: its own redis-server)] [--seconds 8]
        [--writers 1,4] [--concurrency 1,8] [--stores redis,sqlite] [--aof] [--no-verify]
        [--entries 1000000] [--samples 300] [--skip-appends] [--skip-proofs]
    .venv/bin/python bench/ledger.py --cluster [--seconds 8] [--writers 4] [--concurrency 8]

1. **Appends**: 1 and 4 writer *processes* (each a real :class:`proxy.receipts.Ledger` with
   its own store connection), each running ``--concurrency`` tasks that append one-receipt
   batches in a loop (the concurrent requests of one gateway process), for ``--seconds``.
   Every append seals (chain link + Ed25519), and writes the receipts with their Merkle
   nodes in one atomic compare-and-set; a process's concurrent appends are sealed and
   written together (group commit, :mod:`proxy.receipts.chain`). Reports receipts appended
   per second (all writers together), p50/p99 latency of one ``Ledger.append`` call (queueing
   included), the mean receipts per atomic write and the compare-and-sets lost per write
   (each a wasted re-seal), against Redis and SQLite (WAL, ``synchronous=FULL``). Each receipt is fresh (new receipt_id, request_id and hashes) but
   built from a template outside the timed call: building receipts is the pipeline's cost.
   Afterwards the whole chain is verified (``verify_store``: every signature and link) and
   the Merkle tree checked (``verify_tree``) unless ``--no-verify``.
2. **Proofs at 10^6 entries**: the tree of ``--entries`` synthetic leaves is built in
   memory with :func:`proxy.primitives.merkle.extend` (2·10^6 SHA-256) and its ~2·10^6
   nodes are bulk-inserted straight into the store's node layout (SQLite: one
   ``executemany`` into ``tree_nodes``; Redis: one 2 MiB string per 65,536 nodes of a
   level, pipelined ``SET``) with the tree size set — no receipts are written, since a
   proof reads only nodes. Then inclusion and consistency proofs for random indexes/sizes
   are generated through :mod:`proxy.receipts.tree` (the code the HTTP API runs) and
   verified with :mod:`proxy.primitives.merkle`; reports hashes per proof, JSON bytes, and
   p50/p99 generation and verification time.

3. **Several ledgers on a Redis Cluster** (``--cluster``, replaces 1 and 2): a Redis Cluster of
   three masters of its own (tests/support/redis_cluster.py). ``--writers`` processes (largest
   value) with ``--concurrency`` tasks each (largest value) append one-receipt batches through
   :class:`proxy.receipts.ledgers.Ledgers` (``ledger.partition: hash``) for ``--seconds``: first
   with 1 ledger (one hash tag: one slot, one master), then with 3 ledgers whose tags
   ``{sonate:shard-0..2}`` fall on the three masters. Reports receipts/s, the writers' CPU and
   each master's CPU (``/proc/<pid>/stat``) per receipt, and the busiest master's receipts per
   CPU-second: the ceiling of one shard (one core) that a deployment multiplies by its shards.
   Every ledger is verified afterwards (chain and tree).

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

from proxy.receipts import Ledger, Signer, json_hash, new_receipt, open_store, verify_store  # noqa: E402
from proxy.primitives import merkle  # noqa: E402
from proxy.receipts.proofs import consistency_proof_doc, inclusion_proof_doc  # noqa: E402
from proxy.receipts.tree import consistency_proof, inclusion_proof, tree_root, verify_tree  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402  (the one way this repo starts a Redis)

_TEMPLATE = new_receipt(
    request_id="req_template", actor="bench", intent="general",
    inputs_hash=json_hash({"m": "template"}), outputs_hash=json_hash({"c": "ok"}),
    policy_id="safety.harm", guardrail_action="allow",
    evidence={"scores": {"harm": "0.0132"}, "detector": {"name": "minilm-lr", "version": "1"}},
    model="demo", provider="demo", stratum={"lang": "en"})


def _receipt() -> dict:
    """A fresh receipt (new receipt_id, request_id, inputs_hash) from the template, as ``new_receipt`` shapes it."""
    token = uuid.uuid4().hex
    return {**_TEMPLATE, "receipt_id": "rcpt_" + token, "request_id": "req_" + token[:12],
            "inputs_hash": "sha256:" + hashlib.sha256(token.encode()).hexdigest()}


def _writer(url: str, seed: bytes, concurrency: int, seconds: float, ready: "mp.Queue", go: "mp.Event",
            queue: "mp.Queue") -> None:
    async def loop(ledger: Ledger, end: float, latencies: list[float]) -> None:
        while time.perf_counter() < end:
            receipt = _receipt()
            t0 = time.perf_counter()
            await ledger.append([receipt])
            latencies.append(time.perf_counter() - t0)

    async def run() -> tuple[list[float], int, int]:
        store = open_store(url)
        ledger = Ledger(store, Signer(seed), max_attempts=10_000)
        await store.ping()
        await store.head()
        ready.put(os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        latencies: list[float] = []
        end = time.perf_counter() + seconds
        await asyncio.gather(*(loop(ledger, end, latencies) for _ in range(concurrency)))
        await store.close()
        return latencies, ledger.writes, ledger.lost_races

    queue.put(asyncio.run(run()))


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cluster_writer(url: str, shards: int, seed: bytes, concurrency: int, seconds: float, ready: "mp.Queue",
                    go: "mp.Event", queue: "mp.Queue") -> None:
    from proxy.receipts.ledgers import Ledgers, ledger_names

    async def loop(ledgers: Ledgers, end: float, count: list[int]) -> None:
        while time.perf_counter() < end:
            await ledgers.append([_receipt()])
            count[0] += 1

    async def run() -> tuple[int, float, int, int]:
        ledgers = Ledgers(url, "hash", ledger_names("hash", shards=shards),
                          lambda store: Ledger(store, Signer(seed), max_attempts=10_000), shards=shards)
        for ledger in ledgers.ledgers.values():
            await ledger.store.ping()
            await ledger.store.head()
        ready.put(os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        count = [0]
        cpu0 = time.process_time()
        end = time.perf_counter() + seconds
        await asyncio.gather(*(loop(ledgers, end, count) for _ in range(concurrency)))
        cpu = time.process_time() - cpu0
        writes = sum(ledger.writes for ledger in ledgers.ledgers.values())
        lost = sum(ledger.lost_races for ledger in ledgers.ledgers.values())
        await ledgers.close()
        return count[0], cpu, writes, lost

    queue.put(asyncio.run(run()))


async def _check_ledgers(url: str, shards: int, count: int, public_keys: dict[str, bytes]) -> dict[str, int]:
    """Verify every shard ledger (chain and tree); assert they hold ``count`` receipts together."""
    from proxy.receipts.ledgers import ledger_store_url

    sizes = {}
    for i in range(shards):
        name = f"shard-{i}"
        store = open_store(ledger_store_url(url, name))
        try:
            verified, failures = await verify_store(store, public_keys, ledger=name)
            assert failures == [], failures[:3]
            assert (await verify_tree(store, public_keys))[1] == []
            sizes[name] = verified
        finally:
            await store.close()
    assert sum(sizes.values()) == count, (sizes, count)
    return sizes


def bench_cluster(cluster, shards: int, writers: int, concurrency: int, seconds: float) -> dict:
    """One ``--cluster`` run: ``writers`` processes append over ``shards`` ledgers (see the module docstring)."""
    import redis

    while True:  # a namespace whose shard tags fall on as many masters as there are shards
        namespace = f"bench-{uuid.uuid4().hex[:8]}"
        if len({cluster.master_of(f"{{{namespace}:shard-{i}}}:head") for i in range(shards)}) == min(shards, 3):
            break
    url = cluster.url + f"&namespace={namespace}"
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    ready: mp.Queue = ctx.Queue()
    go = ctx.Event()
    seed = os.urandom(32)
    procs = [ctx.Process(target=_cluster_writer, args=(url, shards, seed, concurrency, seconds, ready, go, queue))
             for _ in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    pids = {port: proc.pid for port, proc in zip(cluster.ports, cluster.processes)}
    cpu0 = {port: _cpu_seconds(pid) for port, pid in pids.items()}
    go.set()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    cpu = {port: _cpu_seconds(pid) - cpu0[port] for port, pid in pids.items()}
    for p in procs:
        p.join()
    count = sum(r[0] for r in results)
    writer_cpu = sum(r[1] for r in results)
    writes, lost = sum(r[2] for r in results), sum(r[3] for r in results)
    signer = Signer(seed)
    sizes = asyncio.run(_check_ledgers(url, shards, count, {signer.key_id: signer.public_key}))
    on_master: dict[int, int] = {}
    for name, size in sizes.items():
        port = cluster.master_of(f"{{{namespace}:{name}}}:head")
        on_master[port] = on_master.get(port, 0) + size
    busiest = max(on_master, key=lambda port: cpu[port])
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    keys = list(client.scan_iter(match=f"{{{namespace}*", count=1000))
    for key in keys:
        client.delete(key)
    client.close()
    return {"ledgers": shards, "masters": len(on_master), "receipts": count, "per_s": count / seconds,
            "writer_cpu_us": writer_cpu / count * 1e6, "redis_cpu_us": sum(cpu.values()) / count * 1e6,
            "busiest_cpu_share": cpu[busiest] / seconds,
            "per_shard_ceiling": on_master[busiest] / max(cpu[busiest], 1e-9),
            "per_write": count / max(writes, 1), "lost_per_write": lost / max(writes, 1)}


def _drop_namespace(redis_url: str, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match="{" + namespace + "}:*", count=1000))
    for lo in range(0, len(keys), 1000):
        client.delete(*keys[lo:lo + 1000])
    client.close()


async def _check_ledger(url: str, count: int, public_keys: dict[str, bytes], verify: bool) -> str:
    """Assert the ledger holds exactly ``count`` receipts and a whole tree; with ``verify``, verify them all."""
    store = open_store(url)
    try:
        size = await store.tree_size()
        head = await store.head()
        assert head is not None and size == head.height + 1 == count, (size, head, count)
        if not verify:
            return "not verified"
        verified, failures = await verify_store(store, public_keys)
        assert verified == count and failures == [], (verified, failures[:3])
        assert await verify_tree(store, public_keys) == (count, [])
        return "chain+tree verified"
    finally:
        await store.close()


def bench_appends(kind: str, url: str, writers: int, concurrency: int, seconds: float, verify: bool) -> dict:
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    ready: mp.Queue = ctx.Queue()
    go = ctx.Event()
    seed = os.urandom(32)
    procs = [ctx.Process(target=_writer, args=(url, seed, concurrency, seconds, ready, go, queue))
             for _ in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:  # every process imported, connected and read the head: start together
        ready.get(timeout=120)
    go.set()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r[0])
    groups = sum(r[1] for r in results)
    lost = sum(r[2] for r in results)
    count = len(latencies)
    q = statistics.quantiles(latencies, n=100)
    signer = Signer(seed)
    checked = asyncio.run(_check_ledger(url, count, {signer.key_id: signer.public_key}, verify))
    return {"store": kind, "writers": writers, "concurrency": concurrency, "receipts": count,
            "per_s": count / seconds, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000,
            "per_write": count / max(groups, 1), "lost_per_write": lost / max(groups, 1), "checked": checked}


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
    parser.add_argument("--writers", default="1,4", help="writer process counts, comma-separated")
    parser.add_argument("--concurrency", default="1,8",
                        help="concurrent appending tasks per writer process, comma-separated")
    parser.add_argument("--stores", default="redis,sqlite", help="stores to measure: redis, sqlite")
    parser.add_argument("--no-verify", action="store_true", help="skip verifying every appended receipt")
    parser.add_argument("--aof", action="store_true",
                        help="own redis-server with the append-only file, appendfsync always (default: none)")
    parser.add_argument("--entries", type=int, default=1_000_000, help="tree size for the proof benchmark")
    parser.add_argument("--samples", type=int, default=300, help="proofs generated per kind")
    parser.add_argument("--skip-appends", action="store_true")
    parser.add_argument("--skip-proofs", action="store_true")
    parser.add_argument("--cluster", action="store_true",
                        help="several ledgers on a Redis Cluster of its own: 1 ledger vs 3 ledgers on 3 masters")
    args = parser.parse_args()
    if args.cluster:
        run_cluster(args)
        return
    stores = [kind for kind in args.stores.split(",") if kind]
    if not set(stores) <= {"redis", "sqlite"}:
        parser.error("--stores takes redis and/or sqlite")
    tmp = Path(tempfile.mkdtemp(prefix="sonate-bench-"))
    own_redis = None
    if args.redis is None and "redis" in stores:  # never assume a system service: start one on a free port
        own_redis = RedisServer(tmp / "redis", aof=args.aof).start()
        args.redis = own_redis.url
        persistence = "AOF, appendfsync always" if args.aof else "no persistence"
        print(f"Redis: a redis-server of its own at {args.redis} ({persistence})")
    namespaces: list[str] = []

    def url(kind: str, tag: str) -> str:
        if kind == "sqlite":
            return "sqlite:///" + str(tmp / f"{tag}.db")
        namespace = f"bench-{tag}-{uuid.uuid4().hex[:8]}"
        namespaces.append(namespace)
        return f"{args.redis}?namespace={namespace}"

    try:
        if not args.skip_appends:
            print(f"Appends ({args.seconds:g} s per run; one receipt per append call; concurrent calls of a "
                  "process are sealed and written together with their Merkle nodes in one atomic write)")
            print(f"{'store':8} {'writers':>7} {'tasks/w':>7} {'receipts':>9} {'receipts/s':>11} {'p50 ms':>8} "
                  f"{'p99 ms':>8} {'rcpt/write':>10} {'lost/write':>10}  check")
            for kind in stores:
                for writers in [int(x) for x in args.writers.split(",")]:
                    for concurrency in [int(x) for x in args.concurrency.split(",")]:
                        row = bench_appends(kind, url(kind, f"append{writers}x{concurrency}"), writers, concurrency,
                                            args.seconds, not args.no_verify)
                        print(f"{row['store']:8} {row['writers']:>7} {row['concurrency']:>7} {row['receipts']:>9} "
                              f"{row['per_s']:>11.0f} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} "
                              f"{row['per_write']:>10.1f} {row['lost_per_write']:>10.2f}  {row['checked']}", flush=True)
        if not args.skip_proofs:
            print(f"\nProofs at {args.entries:,} entries ({args.samples} random proofs each; "
                  "generation reads stored nodes through proxy.receipts.tree)")
            print(f"{'store':8} {'proof':12} {'hashes':>7} {'JSON B':>7} {'gen p50 ms':>11} {'gen p99 ms':>11} "
                  f"{'verify p50 us':>14} {'build s':>8} {'load s':>7}")
            for kind in stores:
                for row in asyncio.run(bench_proofs(kind, url(kind, "proofs"), args.entries, args.samples)):
                    print(f"{row['store']:8} {row['proof']:12} {row['hashes_max']:>7} {row['json_bytes_max']:>7} "
                          f"{row['gen_p50_ms']:>11.2f} {row['gen_p99_ms']:>11.2f} {row['verify_p50_us']:>14.1f} "
                          f"{row['build_s']:>8.1f} {row['load_s']:>7.1f}", flush=True)
    finally:
        for namespace in namespaces:
            _drop_namespace(args.redis, namespace)
        if own_redis is not None:
            own_redis.stop()


def run_cluster(args: argparse.Namespace) -> None:
    """``--cluster``: start a three-master Redis Cluster, run 1 then 3 ledgers, print one row each."""
    from tests.support.redis_cluster import RedisCluster

    writers = max(int(x) for x in args.writers.split(","))
    concurrency = max(int(x) for x in args.concurrency.split(","))
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="sonate-bench-cluster-"))).start()
    try:
        print(f"Redis Cluster of 3 masters (no replicas, no persistence) on ports {cluster.ports}; "
              f"{writers} writer processes x {concurrency} tasks, {args.seconds:g} s per run, "
              f"{os.cpu_count()} CPU cores on this machine (writers and masters share them)")
        print(f"{'ledgers':>7} {'masters':>7} {'receipts':>9} {'receipts/s':>11} {'writer CPU us/rcpt':>18} "
              f"{'redis CPU us/rcpt':>17} {'busiest master CPU':>18} {'rcpt per shard-CPU-s':>20} "
              f"{'rcpt/write':>10} {'lost/write':>10}")
        for shards in (1, 3):
            row = bench_cluster(cluster, shards, writers, concurrency, args.seconds)
            print(f"{row['ledgers']:>7} {row['masters']:>7} {row['receipts']:>9} {row['per_s']:>11.0f} "
                  f"{row['writer_cpu_us']:>18.0f} {row['redis_cpu_us']:>17.1f} "
                  f"{row['busiest_cpu_share']:>17.0%} {row['per_shard_ceiling']:>20.0f} "
                  f"{row['per_write']:>10.1f} {row['lost_per_write']:>10.2f}", flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
