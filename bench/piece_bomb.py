"""Benchmark of "a small request stalls every client": requests that are small in bytes
but hold many screened pieces (JSON numbers or short strings in a passed-through field, a tool
schema ``enum``), against a real proxy over the stub provider.

Shapes (each with a unique marker and unique values, so no scan cache answers it):

- ``numbers``: chat, ``"x_list": [0, 1, ..., N-1]`` beside one ``"hi"`` message (N = ``--numbers``);
- ``strings``: chat, ``"x_strings": ["w0", "w1", ...]`` (``--strings`` short strings);
- ``enum``: ``POST /v1/messages`` with one tool whose ``input_schema`` has an ``enum`` of ``--enum``
  numbers.

For each shape: the HTTP status and seconds until the answer (``--repeat`` times, one at a time),
the proxy process's RSS before and after (``/proc/PID/status`` VmRSS), and p50/p99 of one-line
requests sent by another client meanwhile. With ``--attackers 2`` two clients send the shape at
once. Target: every shape answered or refused in under 3 s, RSS growth under 100 MB,
one-line requests meanwhile close to idle.

Usage: ``.venv/bin/python bench/piece_bomb.py [--shapes numbers,strings,enum] [--repeat 3]``
(starts ``python -m proxy serve`` itself, shipped policies and ``server.limits``, per-key rate
limits off, a SQLite ledger in a temporary directory; ``--limits KEY=VALUE`` overrides a setting).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.pathological import served_proxy  # noqa: E402

SMALL = "What is the capital of Portugal?"
_counter = iter(range(10**9))


def _body(shape: str, args: argparse.Namespace) -> tuple[str, dict]:
    """(route, JSON body) of one request of ``shape``, unique by a marker."""
    n = next(_counter)
    marker, base = f"Request {n}. hi", n * 1_000_000  # values unique per request too: no cached result
    if shape == "numbers":
        return "/v1/chat/completions", {"model": "stub", "messages": [{"role": "user", "content": marker}],
                                        "x_list": list(range(base, base + args.numbers))}
    if shape == "strings":
        return "/v1/chat/completions", {"model": "stub", "messages": [{"role": "user", "content": marker}],
                                        "x_strings": [f"w{base + i}" for i in range(args.strings)]}
    if shape == "enum":
        tool = {"name": "pick", "description": "Pick a number.",
                "input_schema": {"type": "object", "properties": {"n": {"type": "integer",
                                                                        "enum": list(range(base, base + args.enum))}}}}
        return "/v1/messages", {"model": "stub", "max_tokens": 64, "tools": [tool],
                                "messages": [{"role": "user", "content": marker}]}
    return "/v1/chat/completions", {"model": "stub", "messages": [{"role": "user", "content": f"{marker} {SMALL}"}]}


def _post(url: str, key: str, route: str, body: dict) -> tuple[int, float, str]:
    """(status, seconds, error code or "") of one POST."""
    request = urllib.request.Request(url + route, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
            return response.status, time.perf_counter() - started, ""
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            code = json.loads(payload)["error"].get("code") or json.loads(payload)["error"].get("type", "")
        except (ValueError, KeyError, TypeError, AttributeError):
            code = ""
        return error.code, time.perf_counter() - started, str(code)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentiles(values: list[float]) -> str:
    if not values:
        return "none sent"
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms (n={len(ms)})"


def run_shape(url: str, key: str, pid: int, shape: str, args: argparse.Namespace) -> None:
    """Send ``shape`` ``args.repeat`` times (``args.attackers`` at once) with a one-line client alongside."""
    stop, during, results = threading.Event(), [], []

    def small_client() -> None:
        while not stop.is_set():
            status, seconds, _ = _post(url, key, *_body("small", args))
            during.append(seconds)

    def attacker() -> None:
        for _ in range(args.repeat):
            results.append(_post(url, key, *_body(shape, args)))

    before = _rss_mb(pid)
    client = threading.Thread(target=small_client)
    client.start()
    attackers = [threading.Thread(target=attacker) for _ in range(args.attackers)]
    for thread in attackers:
        thread.start()
    for thread in attackers:
        thread.join()
    stop.set()
    client.join()
    after = _rss_mb(pid)
    answers = ", ".join(f"{status}{' ' + code if code else ''} {seconds:.2f} s" for status, seconds, code in results)
    print(f"{shape}: {answers}")
    print(f"  RSS {before:.0f} -> {after:.0f} MB ({after - before:+.0f}); one-line requests meanwhile: "
          f"{_percentiles(during)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="numbers,strings,enum")
    parser.add_argument("--numbers", type=int, default=20_000)
    parser.add_argument("--strings", type=int, default=3_000)
    parser.add_argument("--enum", type=int, default=12_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--attackers", type=int, default=1)
    parser.add_argument("--idle", type=int, default=20, help="one-line requests measured idle first")
    parser.add_argument("--limits", action="append", default=[], metavar="KEY=VALUE",
                        help="a server.limits override (repeatable), e.g. screen_timeout_seconds=30")
    args = parser.parse_args()
    limits = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.limits)}
    with served_proxy(lane=True, limits=limits) as (url, key, pid):
        for _ in range(3):
            _post(url, key, *_body("small", args))  # warm-up
        idle = [_post(url, key, *_body("small", args))[1] for _ in range(args.idle)]
        print(f"one-line requests idle: {_percentiles(idle)}; proxy RSS {_rss_mb(pid):.0f} MB")
        for shape in args.shapes.split(","):
            run_shape(url, key, pid, shape, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
