"""Stream time to first token: direct to the stub provider vs through this proxy, per hold_back.

The stub provider and the stream measurement are bench/gateway.py's (the stub in its own
process: 40 content chunks 20 ms apart; TTFT = time to the first non-empty content delta,
total = time to ``data: [DONE]``, medians over ``--streams`` fresh prompts). This proxy runs
with the shipped policies (the full guardrails matrix, output Safety screening every window),
once per ``--hold`` value written into policies/safety.yaml's ``hold_back`` (docs/operations.md
"Streams"): ``0`` releases each chunk at once, ``"24 tokens"`` holds the newest 24 tokens back.

Usage: ``.venv/bin/python bench/stream.py [--streams 15] [--hold 0 --hold "24 tokens"] [--output-only] [--out FILE]``
(``--output-only``: each hold again with output Safety only and no input pass, isolating the stream path.)
Quote the load average it prints with the figures (2 CPUs shared by everything on the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import gateway as g  # noqa: E402  (bench/gateway.py: stub provider, launcher helpers, stream measure)


def policies_with_hold(hold: str, directory: Path, output_only: bool = False) -> Path:
    """A copy of policies/ whose output Safety policy has ``hold_back: <hold>``; ``output_only``:
    Safety screens outputs only and every other policy is disabled (no input pass: what is left
    of TTFT is the stream path itself, output guardrails on)."""
    shutil.copytree(ROOT / "policies", directory)
    safety = directory / "safety.yaml"
    text = safety.read_text()
    line = f"hold_back: {json.dumps(hold) if not hold.isdigit() else hold}"
    text, n = re.subn(r"(?m)^hold_back:.*$", line, text)
    text = text if n else text.rstrip("\n") + "\n" + line + "\n"
    if output_only:
        text = re.sub(r"(?m)^stages:.*$", "stages: [output]", text)
        for other in directory.glob("*.yaml"):
            if other != safety:
                other.write_text(re.sub(r"(?m)^enabled:.*\n", "", other.read_text()) + "enabled: false\n")
    safety.write_text(text)
    return directory


async def measure(target: g.Target, count: int, metrics_url: str | None = None) -> dict[str, Any]:
    """Stream TTFT/total of ``count`` streams after 2 warm-up ones; with ``metrics_url`` (this proxy)
    also the mean input-guardrail seconds of the measured streams (``sonate_guardrail_duration_seconds``
    {stage="input"}), the part of TTFT spent before the provider is called."""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await g.streams(session, target, 2)  # warm-up (first-call costs are not this figure)
        before = await _input_screen(session, metrics_url)
        result = await g.streams(session, target, count)
        after = await _input_screen(session, metrics_url)
    if before and after and after[1] > before[1]:
        result["input_screen_mean_ms"] = 1000 * (after[0] - before[0]) / (after[1] - before[1])
    return result


async def _input_screen(session: Any, metrics_url: str | None) -> tuple[float, float] | None:
    """(sum, count) of the input guardrail duration histogram, None without ``metrics_url``."""
    if metrics_url is None:
        return None
    from tests.support.faults import metric_value
    from tests.support.proxy import ADMIN_KEY

    async with session.get(metrics_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as response:
        text = await response.text()
    name, labels = "sonate_guardrail_duration_seconds", {"stage": "input"}
    return metric_value(text, name + "_sum", labels), metric_value(text, name + "_count", labels)


def sonate(stub_v1: str, workdir: Path, hold: str, count: int, output_only: bool = False) -> dict[str, Any]:
    """Start this proxy with ``hold`` (and ``output_only``, see :func:`policies_with_hold`) and
    measure ``count`` streams."""
    from tests.support.proxy import CLIENT_KEY, spawn_proxy, write_config

    port = g.free_port()
    ledger = f"sqlite:///{workdir / 'ledger.db'}"
    server = {"host": "127.0.0.1", "port": port, "upstream_timeout_seconds": 60,
              "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0}}
    config = write_config(workdir, stub_v1, ledger, port, policies_with_hold(hold, workdir / "policies", output_only),
                          overrides={"server": server})
    proxy = spawn_proxy(config, ledger, workdir / "keys" / "signing-key.json", port)
    try:
        try:
            g.wait_http(f"{proxy.url}/readyz", proxy.process, 300)
        except RuntimeError:
            print("\n".join(proxy.log().splitlines()[-15:]), file=sys.stderr)
            raise
        name = f"sonate{' output Safety only' if output_only else ''} hold_back={hold}"
        target = g.Target(name, proxy.v1, CLIENT_KEY, "stub")
        return asyncio.run(measure(target, count, proxy.url + "/metrics"))
    finally:
        g.stop(proxy.process)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=15, help="streamed requests per target (default 15)")
    parser.add_argument("--hold", action="append", help='hold_back values (default: 0 and "24 tokens")')
    parser.add_argument("--output-only", action="store_true",
                        help="also run each hold with output Safety only (no input pass)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    holds = args.hold or ["0", "24 tokens"]
    results: dict[str, Any] = {}
    with g.stub_process() as stub_v1, tempfile.TemporaryDirectory(prefix="sonate-bench-stream-") as tmp:
        results["direct"] = asyncio.run(measure(g.Target("direct", stub_v1, "x", "stub-model"), args.streams))
        runs = [(hold, False) for hold in holds] + [(hold, True) for hold in holds if args.output_only]
        for i, (hold, output_only) in enumerate(runs):
            print(f"sonate, hold_back {hold}{', output Safety only' if output_only else ''} ...", flush=True)
            result = sonate(stub_v1, Path(tmp) / str(i), hold, args.streams, output_only)
            results[f"sonate{' output Safety only' if output_only else ''} hold_back={hold}"] = result
    direct = results["direct"]["ttft_p50_ms"] or 0.0
    print(f"\nstream, {g.STREAM_CHUNKS} chunks {g.STREAM_GAP * 1000:.0f} ms apart, n={args.streams} per target; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| target | TTFT p50 (ms) | TTFT p99 (ms) | TTFT overhead p50 (ms) | of which input screen, mean (ms) "
          "| total p50 (ms) | errors |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        overhead = "" if name == "direct" or r["ttft_p50_ms"] is None else f"{r['ttft_p50_ms'] - direct:.1f}"
        print(f"| {name} | {_ms(r['ttft_p50_ms'])} | {_ms(r['ttft_p99_ms'])} | {overhead} | "
              f"{_ms(r.get('input_screen_mean_ms')) if name != 'direct' else ''} | {_ms(r['total_p50_ms'])} "
              f"| {r['errors']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
