"""Benchmark of issue 15's "A 12 KB prompt stalls every client": ``"a." * 6000 + "@"`` as the user
message, and small requests sent concurrently by another client.

Every text is sent behind a unique prefix (``Request N.``), so the scan cache never answers.
Prints, for the pathological prompt, the time until it is answered or refused (``--repeat``
times), and p50/p99 latency in milliseconds of small one-line requests sent (one at a time, by
another thread) while no pathological request runs ("idle") and while one does ("during").
Target (issue 15): pathological < 1 s; "during" close to "idle".

Two targets:
- default, in-process: the input guardrails as the proxy runs them (``build_engine`` on the
  config's policies; ``GuardrailEngine.screen_input`` in a thread pool of
  ``server.detector_threads`` threads), nothing else started;
- ``--url URL --key KEY``: a running proxy, ``POST /v1/chat/completions`` with ``--model``.

Usage: ``.venv/bin/python bench/pathological.py [--config config.yaml] [--repeat 5]``
or ``.venv/bin/python bench/pathological.py --url http://127.0.0.1:8080 --key sk-... --model stub``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
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


def in_process_target(config_path: Path):
    """A ``send(text) -> None`` running the proxy's input screen in its detector thread pool."""
    from proxy.config import load_config
    from proxy.evaluation.guardrails import build_engine
    from proxy.server.upstream import Upstream

    config = load_config(config_path)
    engine = build_engine(config.path(config.policies), Upstream(config).count_tokens)
    pool = ThreadPoolExecutor(config.server.detector_threads, thread_name_prefix="guardrails")
    threads = config.server.detector_threads
    barrier = threading.Barrier(threads)

    def warm() -> None:  # every pool thread screens once (builds its analyzer), none twice
        engine.screen_input(_messages(SMALL))
        barrier.wait()

    for future in [pool.submit(warm) for _ in range(threads)]:
        future.result()

    def send(text: str) -> None:
        pool.submit(engine.screen_input, _messages(text)).result()

    return send


def http_target(url: str, key: str, model: str):
    """A ``send(text) -> None`` posting one chat completion to a running proxy (any HTTP status counts)."""
    def send(text: str) -> None:
        body = json.dumps({"model": model, "messages": _messages(text)}).encode()
        request = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                response.read()
        except urllib.error.HTTPError as error:
            error.read()

    return send


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


def run(send, repeat: int, idle_count: int) -> None:
    """Idle small-request latencies, then ``repeat`` pathological requests with small ones alongside."""
    idle = [_timed(send, SMALL) for _ in range(idle_count)]
    busy = threading.Event()
    stop = threading.Event()
    during: list[float] = []

    def small_client() -> None:
        while not stop.is_set():
            started_busy = busy.is_set()
            latency = _timed(send, SMALL)
            if started_busy:
                during.append(latency)

    client = threading.Thread(target=small_client)
    client.start()
    pathological = []
    for _ in range(repeat):
        busy.set()
        pathological.append(_timed(send, PATHOLOGICAL))
        busy.clear()
        time.sleep(0.2)
    stop.set()
    client.join()
    print(f"pathological prompt ({len(PATHOLOGICAL)} chars): "
          + ", ".join(f"{t:.2f} s" for t in pathological) + f"  (max {max(pathological):.2f} s)")
    print(f"small requests idle:   {_percentiles(idle)}")
    print(f"small requests during: {_percentiles(during) if during else 'none sent'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml", help="in-process: the proxy config")
    parser.add_argument("--url", help="a running proxy's base URL (else in-process)")
    parser.add_argument("--key", help="API key for --url")
    parser.add_argument("--model", default="demo", help="model name for --url (default demo)")
    parser.add_argument("--repeat", type=int, default=5, help="pathological requests (default 5)")
    parser.add_argument("--idle", type=int, default=30, help="idle small requests (default 30)")
    args = parser.parse_args()
    if args.url and not args.key:
        parser.error("--url needs --key")
    send = http_target(args.url, args.key, args.model) if args.url else in_process_target(args.config)
    print(f"target: {args.url or 'in-process GuardrailEngine.screen_input'}")
    run(send, args.repeat, args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
