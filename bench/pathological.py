"""Benchmark of a 12 KB pathological prompt that must not stall other clients: ``"a." * 6000 + "@"`` as the user
message, and small requests sent concurrently by another client.

Every text is sent behind a unique prefix (``Request N.``), so the scan cache never answers.
Prints, for the pathological prompt, the time until it is answered or refused (``--repeat``
times), and p50/p99 latency in milliseconds of small one-line requests sent (one at a time, by
another thread) while no pathological request runs ("idle") and while one does ("during").
Target: pathological < 1 s; "during" close to "idle".

Two targets:
- default, in-process: the input guardrails as the proxy runs them (``build_engine`` on the
  config's policies; ``GuardrailEngine.screen_input`` in a thread pool of
  ``server.detector_threads`` threads, large inputs in the large-input lane's pool unless
  ``--no-lane``), nothing else started;
- ``--url URL --key KEY``: a running proxy, ``POST /v1/chat/completions`` with ``--model``;
- ``--serve``: starts one itself (``python -m proxy serve`` through tests/support/proxy.py, the
  shipped policies, a SQLite ledger in a temporary directory, the stub provider of
  tests/support/stub_upstream.py as model ``stub``) and runs the ``--url`` client against it.
  Per-key rate limits are off there (the small client sends back to back; ``server.limits``
  otherwise as shipped); ``--no-lane`` also turns the large-input lane off, for comparison.

``--attackers N`` sends the pathological prompt from N clients at once: with the large-input lane
(``server.limits``) they queue on its thread while small requests keep the detector threads;
without it (``--no-lane``) they take every detector thread. Over HTTP, every answer that is not a
200 is counted and printed by status.

Usage: ``.venv/bin/python bench/pathological.py [--config config.yaml] [--repeat 5]``
or ``.venv/bin/python bench/pathological.py --url http://127.0.0.1:8080 --key sk-... --model stub``
or ``.venv/bin/python bench/pathological.py --serve [--no-lane]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy import offline  # noqa: E402,F401  (offline settings before model imports)

PATHOLOGICAL = "a." * 6000 + "@"
SMALL = "What is the capital of Portugal?"


def _messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _warmed_pool(engine, threads: int, name: str) -> ThreadPoolExecutor:
    """A pool of ``threads`` threads, each of which has screened once (built its analyzer)."""
    pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
    barrier = threading.Barrier(threads)

    def warm() -> None:
        engine.screen_input(_messages(SMALL))
        barrier.wait()

    for future in [pool.submit(warm) for _ in range(threads)]:
        future.result()
    return pool


def in_process_target(config_path: Path, lane: bool = True):
    """A ``send(text) -> None`` running the proxy's input screen in its detector thread pool, or (``lane``
    and ``server.limits.large_input_threads``) in the large-input lane's pool when the messages reach
    ``server.limits.large_input_chars`` (as :class:`proxy.server.admission.limits.ScreenLanes` chooses)."""
    from proxy.config import load_config
    from proxy.evaluation.guardrails import build_engine
    from proxy.server.admission.limits import text_chars
    from proxy.server.flow.upstream import Upstream

    config = load_config(config_path)
    limits = config.server.limits
    engine = build_engine(config.path(config.policies), Upstream(config).count_tokens)
    pool = _warmed_pool(engine, config.server.detector_threads, "guardrails")
    large = _warmed_pool(engine, limits.large_input_threads, "guardrails-large") \
        if lane and limits.large_input_threads else pool

    def send(text: str) -> None:
        messages = _messages(text)
        chosen = large if text_chars(messages) >= limits.large_input_chars else pool
        chosen.submit(engine.screen_input, messages).result()

    return send


#: HTTP statuses other than 200 seen by :func:`http_target`, by (text kind, status).
FAILURES: collections.Counter = collections.Counter()


def http_target(url: str, key: str, model: str):
    """A ``send(text) -> None`` posting one chat completion to a running proxy (a non-200 answer is
    timed too, and counted in :data:`FAILURES`)."""
    def send(text: str) -> None:
        body = json.dumps({"model": model, "messages": _messages(text)}).encode()
        request = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                response.read()
        except urllib.error.HTTPError as error:
            error.read()
            FAILURES["pathological" if PATHOLOGICAL in text else "small", error.code] += 1

    return send


@contextlib.contextmanager
def served_proxy(lane: bool, limits: dict | None = None):
    """A real proxy (``python -m proxy serve``) on a free port over the stub provider: yields its base URL,
    client key and process id. ``limits``: ``server.limits`` settings over the defaults here. The tests'
    launcher and stub (tests/support) do the starting; stopped on exit."""
    from tests.support.proxy import CLIENT_KEY, spawn_proxy, stop_proxy, wait_until_up, write_config
    from tests.support.redis_server import free_port
    from tests.support.stub_upstream import StubUpstream

    stub = StubUpstream().start()
    with tempfile.TemporaryDirectory(prefix="sonate-bench-") as tmp:
        directory, port = Path(tmp), free_port()
        ledger = f"sqlite:///{directory / 'ledger.db'}"
        limits = {"requests_per_second": 0, "max_concurrent_per_key": 0,
                  **({} if lane else {"large_input_threads": 0}), **(limits or {})}
        server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 1 << 20, "limits": limits}
        config = write_config(directory, stub.url, ledger, port, overrides={"server": server})
        proxy = wait_until_up(spawn_proxy(config, ledger, directory / "keys" / "signing-key.json", port),
                              "/readyz", timeout=300)
        try:
            yield proxy.url, CLIENT_KEY, proxy.process.pid
        finally:
            stop_proxy(proxy)
            stub.stop()


_counter = iter(range(10**9))


def _timed(send, text: str) -> float:
    """Seconds to send ``text`` behind a unique prefix (so no scan cache answers it)."""
    unique = f"Request {next(_counter)}. {text}"
    started = time.perf_counter()
    send(unique)
    return time.perf_counter() - started


def _percentiles(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):7.1f} ms  p99 {p99:7.1f} ms  (n={len(ms)})"


def run(send, repeat: int, idle_count: int, attackers: int = 1) -> None:
    """After a warm-up, idle small-request latencies, then ``attackers`` clients each sending ``repeat`` pathological
    requests (one at a time, 0.2 s apart) with a small-request client alongside; "during" counts the small
    requests that started while a pathological one was in flight."""
    for text in (SMALL, SMALL, PATHOLOGICAL, SMALL):  # warm-up (first-call costs), not measured
        _timed(send, text)
    FAILURES.clear()
    idle = [_timed(send, SMALL) for _ in range(idle_count)]
    lock, stop = threading.Lock(), threading.Event()
    in_flight = [0]
    during: list[float] = []
    pathological: list[float] = []

    def small_client() -> None:
        while not stop.is_set():
            started_busy = in_flight[0] > 0
            latency = _timed(send, SMALL)
            if started_busy:
                during.append(latency)

    def attacker() -> None:
        for _ in range(repeat):
            with lock:
                in_flight[0] += 1
            pathological.append(_timed(send, PATHOLOGICAL))
            with lock:
                in_flight[0] -= 1
            time.sleep(0.2)

    client = threading.Thread(target=small_client)
    client.start()
    senders = [threading.Thread(target=attacker) for _ in range(attackers)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    stop.set()
    client.join()
    print(f"pathological prompt ({len(PATHOLOGICAL)} chars, {attackers} concurrent client(s)): "
          + ", ".join(f"{t:.2f} s" for t in sorted(pathological)) + f"  (max {max(pathological):.2f} s)")
    print(f"small requests idle:   {_percentiles(idle)}")
    print(f"small requests during: {_percentiles(during) if during else 'none sent'}")
    if FAILURES:
        print("non-200 answers: " + ", ".join(f"{kind} {status}: {n}" for (kind, status), n in sorted(FAILURES.items())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml", help="in-process: the proxy config")
    parser.add_argument("--url", help="a running proxy's base URL (else in-process)")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--model", default="demo", help="model name for --url (default demo)")
    parser.add_argument("--serve", action="store_true", help="start a proxy over the stub provider and use it")
    parser.add_argument("--no-lane", action="store_true", help="without the large-input lane (--serve or in-process)")
    parser.add_argument("--repeat", type=int, default=5, help="pathological requests (default 5)")
    parser.add_argument("--idle", type=int, default=30, help="idle small requests (default 30)")
    parser.add_argument("--attackers", type=int, default=1,
                        help="concurrent clients sending the pathological prompt (default 1)")
    args = parser.parse_args()
    if args.url and not args.key:
        parser.error("--url needs --key")
    if args.serve:
        with served_proxy(lane=not args.no_lane) as (url, key, _pid):
            print(f"target: a proxy started here at {url} (model stub; large-input lane "
                  f"{'off' if args.no_lane else 'on'})")
            run(http_target(url, key, "stub"), args.repeat, args.idle, args.attackers)
        return 0
    send = (http_target(args.url, args.key, args.model) if args.url
            else in_process_target(args.config, not args.no_lane))
    print(f"target: {args.url or 'in-process GuardrailEngine.screen_input'}"
          + ("" if args.url else f" (large-input lane {'off' if args.no_lane else 'on'})"))
    run(send, args.repeat, args.idle, args.attackers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
