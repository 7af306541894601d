"""The gateway benchmark of the hot path: one command, one side-by-side table.

Three targets in front of the same stub OpenAI-compatible provider (started here in its own
process: a fixed short answer, or with ``stream: true`` 40 content chunks 20 ms apart):

- **direct**: the stub itself;
- **litellm**: LiteLLM proxy (``litellm[proxy]==LITELLM_VERSION``, installed by this script into
  its own throw-away virtualenv under ``--cache``; one worker, no guardrails, no database;
  a master key, as it refuses to start without one). Skipped with a printed note when it cannot be installed or started
  (``--no-litellm`` skips it on purpose);
- **sonate**: this proxy, ``python -m proxy serve`` on a temporary config (the shipped policies:
  the full guardrails matrix; a SQLite ledger in a temporary directory; the stub as model
  ``stub``; per-key rate limits off) through tests/support/proxy.py, the tests' launcher;
- **baseline** (``--baseline CHECKOUT``): this proxy as another checkout has it (a ``git worktree``
  of an earlier commit), to measure a change in the same rounds;
- **bare** (``--bare``): this proxy with no policy at all, the gateway alone (authentication,
  parsing, the litellm call, receipts, the ledger): the difference to ``sonate`` is what the
  guardrails cost;
- **sonate-wN** (``--workers N``, default 2; ``--workers 1`` leaves it out): the same with
  ``server.workers: N`` (a supervisor and N serving processes on the port, proxy.server.admission.workers),
  c=1, c=32 and streams only; its RSS is the sum over the supervisor and its workers.

Measured per target, every request with a fresh prompt (a unique prefix, so no scan cache or
embedding cache answers):

- c=1: ``--requests`` sequential chat completions, p50/p99 latency (ms);
- c=32: ``--seconds`` of 32 concurrent clients, throughput (req/s) and p50/p99;
- the CPU time each proxy (all its processes) used per request at c=1 and at c=32 (user +
  system, from /proc): on a machine this small the load generator and the stub share the same
  cores with the proxy, so at c=32 all three compete for them;
  both split into ``--rounds`` interleaved rounds with every target up at once (round *r*:
  each target's share of requests, then of seconds, in rotated order), so a slow stretch of a
  shared machine weighs on every target alike; the ratios are also given per round;
- stream: ``--streams`` sequential streamed completions: time to the first content chunk (TTFT)
  and to ``data: [DONE]`` (total), medians;
- sonate only, the large-input case: small requests sent one at a time while another client
  sends, back to back, a 12 KB pathological prompt (``"a." * 6000 + "@"``), then a
  150 KB prompt of prose (screened: within the default budget), then a 1 MB one (over the default
  ``server.limits.max_screen_chars``: refused with 413); small requests' p50/p99 during vs idle
  (``--requests / 2`` sequential ones just before), and the large requests' latency and status;
- multi-turn (LiteLLM, sonate, and the gateway alone with ``--bare``): ``--conversations`` chat
  conversations of ``--turns`` turns, each turn a fresh user message sent with the whole history
  before it (the stub's answers as assistant turns), as a chat app resends it; p50 latency at
  turn 1, at the middle turn and at the last, over the conversations (turn-major order: every
  conversation's turn t, then t + 1), and the last turn's over the first's;
- sonate only: seconds from spawn to ``/readyz`` 200, and the resident set size (RSS, MB; the
  process and its children, from /proc) after start and after each phase (c=1, c=32, streams,
  each large input, and ``--settle`` quiet seconds after the last);
- sonate and sonate-wN: the proportional set size after start (PSS, MB, /proc/PID/smaps_rollup:
  a page shared by k processes counts 1/k in each, where RSS counts it in each), of all the
  processes and of each worker, and again after c=1, c=32 and the streams (what the traffic made
  the workers copy of the pages they share); sonate-wN's ready time is until every worker
  answered ``/readyz``.

Prints a Markdown table (with the ratios of the performance targets) and writes every
figure as JSON (``--out``). Latency is measured by an aiohttp client in this process; the stub
and each proxy run in their own processes, so all share the machine's CPUs: quote the load
average (printed) with the figures.

Usage: ``.venv/bin/python bench/gateway.py [--quick] [--no-litellm] [--out var/bench/gateway.json]``
(``--quick``: fewer requests, for checking that the script works; about a minute.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LITELLM_VERSION = "1.106.2"
LITELLM_KEY = "sk-bench-" + "0" * 32  # LiteLLM refuses to start without a master key (it checks it like ours)
STREAM_CHUNKS, STREAM_GAP = 40, 0.020
SETTLE_S = 5.0  # quiet seconds before the "settled" RSS reading (a timed-out large screen stops at a pause point)
ANSWER = "The capital of Portugal is Lisbon, a city on the Tagus estuary."
SMALL = "What is the capital of Portugal?"
PATHOLOGICAL = "a." * 6000 + "@"  # the 12 KB pathological prompt
_PROSE = ("The committee met on Tuesday to review the quarterly figures, and after a long discussion "
          "about shipping costs it agreed to revisit the supplier contracts before the summer. ")
LARGE = (_PROSE * (1_000_000 // len(_PROSE) + 1))[:1_000_000]  # 1 MB of ordinary prose
MEDIUM = LARGE[:150_000]  # within the default screening budget (server.limits.max_screen_chars 200,000)


# ---------------------------------------------------------------- the stub provider (own process)

def serve_stub(port: int) -> None:
    """Serve the stub provider on 127.0.0.1:``port`` until killed (``--stub PORT``)."""
    from aiohttp import web

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        cid, created, model = "chatcmpl-stub-" + uuid.uuid4().hex[:12], int(time.time()), body.get("model", "stub")
        usage = {"prompt_tokens": 8, "completion_tokens": STREAM_CHUNKS, "total_tokens": 8 + STREAM_CHUNKS}
        if not body.get("stream"):
            return web.json_response({
                "id": cid, "object": "chat.completion", "created": created, "model": model, "usage": usage,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}

        async def send(choices: list, **extra: Any) -> None:
            await response.write(f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode())

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for i in range(STREAM_CHUNKS):
            await send([{"index": 0, "delta": {"content": f"word{i} "}, "finish_reason": None}])
            await asyncio.sleep(STREAM_GAP)
        await send([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

    app = web.Application(client_max_size=4 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# ---------------------------------------------------------------- processes

def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, process: subprocess.Popen, timeout: float) -> float:
    """Poll ``GET url`` until 200; returns the seconds waited. RuntimeError if ``process`` exits or on timeout."""
    import urllib.request

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s")


def wait_workers(url: str, workers: int, process: subprocess.Popen, timeout: float) -> float:
    """Poll ``GET url/readyz`` on new connections until ``workers`` distinct workers answered 200
    (``x-sonate-worker``); returns the seconds waited. RuntimeError if ``process`` exits or on timeout."""
    import urllib.request

    seen: set[str] = set()
    started = time.monotonic()
    while len(seen) < workers:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only workers {sorted(seen)} ready after {timeout:.0f} s")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                if response.status == 200:
                    seen.add(response.headers.get("x-sonate-worker", ""))
        except OSError:
            time.sleep(0.05)
    return time.monotonic() - started


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def rss_mb(pid: int) -> float:
    """Resident set size in MB (2^20 bytes) of ``pid`` plus all its descendants, from /proc."""
    total = 0
    for current in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in (Path("/proc") / str(current) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def pss_mb(pid: int) -> float:
    """Proportional set size in MB of ``pid`` alone, from /proc/PID/smaps_rollup: each page it maps
    divided by the number of processes that map it (RSS counts a shared page in each, so the RSS of
    workers forked from one supervisor adds their shared models up once per process); 0 when gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        for line in (Path("/proc") / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pss_by_process(pid: int) -> dict[str, Any]:
    """PSS in MB of ``pid`` and its descendants: ``total``, ``first`` (``pid`` itself: the proxy,
    or the supervisor of ``server.workers`` > 1) and ``children`` (the workers', in pid order)."""
    tree = process_tree(pid)
    children = [pss_mb(child) for child in sorted(tree[1:])]
    first = pss_mb(pid)
    return {"total": first + sum(children), "first": first, "children": children}


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) used so far by ``pid`` and its live descendants,
    from /proc/PID/stat (``utime`` and ``stime``, proc(5))."""
    ticks = 0
    for current in process_tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (Path("/proc") / str(current) / "stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen) -> None:
    """Terminate ``process`` (SIGTERM, then SIGKILL after 10 s)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Target:
    """One thing to measure: base URL (``.../v1``), bearer key, model name, and its process (if any)."""

    name: str
    v1: str
    key: str
    model: str
    process: subprocess.Popen | None = None
    info: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def stub_process():
    """The stub provider in its own process; yields its ``/v1`` base URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--stub", str(port)], cwd=ROOT)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", process, 30)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(process)


def litellm_venv(cache: Path) -> Path | None:
    """The ``litellm`` executable of a virtualenv holding ``litellm[proxy]==LITELLM_VERSION`` (created
    under ``cache`` on first use with the registry's ordinary client, pip), or None with a printed note."""
    venv = cache / f"litellm-{LITELLM_VERSION}"
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"installing litellm[proxy]=={LITELLM_VERSION} into {venv} (once) ...", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    python = shutil.which("python3") or sys.executable
    log = cache / f"litellm-{LITELLM_VERSION}-install.log"
    cache.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        ok = subprocess.run([python, "-m", "venv", str(venv)], stdout=out, stderr=out).returncode == 0 and \
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
                           stdout=out, stderr=out).returncode == 0
    if not ok or not exe.exists():
        print(f"NOTE: LiteLLM proxy skipped: could not install litellm[proxy]=={LITELLM_VERSION} (see {log})")
        return None
    return exe


@contextlib.contextmanager
def litellm_target(stub_v1: str, cache: Path, workdir: Path):
    """LiteLLM proxy over the stub (one worker, no guardrails, no database); yields a Target or None."""
    exe = litellm_venv(cache)
    if exe is None:
        yield None
        return
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(json.dumps({"model_list": [{"model_name": "stub", "litellm_params": {
        "model": "openai/stub-model", "api_base": stub_v1, "api_key": "stub-secret"}}],
        "litellm_settings": {"telemetry": False}, "general_settings": {"master_key": LITELLM_KEY}}))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "LITELLM_MASTER_KEY")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR", NO_DOCS="True")
    log = workdir / "litellm.log"
    process = subprocess.Popen([str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                                "--num_workers", "1", "--telemetry", "False"],
                               cwd=workdir, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        ready = wait_http(f"http://127.0.0.1:{port}/health/liveliness", process, 180)
    except RuntimeError as error:
        tail = "\n    ".join(log.read_text(errors="replace").splitlines()[-12:])
        print(f"NOTE: LiteLLM proxy skipped: {error}; the end of its log:\n    {tail}")
        stop(process)
        yield None
        return
    try:
        yield Target("litellm", f"http://127.0.0.1:{port}/v1", LITELLM_KEY, "stub", process,
                     {"version": LITELLM_VERSION, "ready_s": ready, "rss_start_mb": rss_mb(process.pid)})
    finally:
        stop(process)


@contextlib.contextmanager
def sonate_target(stub_v1: str, workdir: Path, policies: Path | None = None, workers: int = 1,
                  baseline: Path | None = None, bare: bool = False):
    """This proxy (full matrix: the shipped policies, or a copy of ``policies``; SQLite ledger; rate
    limits off; ``server.workers: workers``) over the stub; yields a Target named ``sonate`` (one
    worker) or ``sonate-wN``. ``baseline``: run the checkout at that path instead (its own code
    and policies, this interpreter's packages), named ``baseline``. ``bare``: no policy at all (an
    empty policies folder: authentication, parsing, the litellm call, receipts and the ledger
    only), named ``bare``."""
    from tests.support.proxy import CLIENT_KEY, ROOT as PROXY_ROOT, spawn_proxy, write_config

    if baseline is not None:
        policies = baseline / "policies"
    if bare:
        policies = workdir / "no-policies"
        policies.mkdir()
    port = free_port()
    ledger = f"sqlite:///{workdir / 'ledger.db'}"
    server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 2 << 20, "upstream_timeout_seconds": 60,
              "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0}, "workers": workers}
    if policies is not None:
        shutil.copytree(policies, workdir / "policies")
        policies = workdir / "policies"
    config = write_config(workdir, stub_v1, ledger, port, policies, overrides={"server": server})
    proxy = spawn_proxy(config, ledger, workdir / "keys" / "signing-key.json", port, baseline or PROXY_ROOT)
    try:
        try:
            ready = wait_http(f"{proxy.url}/readyz", proxy.process, 300)
        except RuntimeError as error:
            raise RuntimeError(f"this proxy did not start ({error}); the end of its log:\n"
                               + "\n".join(proxy.log().splitlines()[-30:])) from None
        name = ("baseline" if baseline is not None else "bare" if bare
                else "sonate" if workers == 1 else f"sonate-w{workers}")
        if workers > 1:  # /readyz answered by one worker: wait for the others too
            ready += wait_workers(proxy.url, workers, proxy.process, 300)
        time.sleep(SETTLE_S / 5)  # start-up's last allocations settled before the memory readings
        pss = pss_by_process(proxy.process.pid)
        info = {"ready_s": ready, "rss_start_mb": rss_mb(proxy.process.pid), "log": str(proxy.log_path),
                "workers": workers, "pss_start_mb": pss["total"],
                "pss_workers_start_mb": pss["children"] if workers > 1 else [pss["first"]]}
        if baseline is not None:
            info["commit"] = _commit(baseline)
        yield Target(name, proxy.v1, CLIENT_KEY, "stub", proxy.process, info)
    finally:
        stop(proxy.process)


def _commit(checkout: Path) -> str:
    """The short commit id of ``checkout`` (with ``+changes`` when its tree differs), or "?"."""
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return commit + ("+changes" if dirty else "")


# ---------------------------------------------------------------- load

_counter = iter(range(10**9))


def fresh(text: str) -> str:
    """``text`` behind a prefix never sent before (no cache answers it)."""
    return f"Request {next(_counter)} ({uuid.uuid4().hex[:8]}). {text}"


def pct(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1, nearest rank) of ``values`` in milliseconds (seconds in), None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(latencies: list[float], errors: int, seconds: float | None = None) -> dict[str, Any]:
    """p50/p99 in ms, n, errors, and ``seconds`` with req/s over them when given."""
    out = {"p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99), "n": len(latencies), "errors": errors}
    if seconds:
        out["seconds"], out["req_per_s"] = seconds, len(latencies) / seconds
    return out


async def chat(session, target: Target, text: str, history: list[dict[str, str]] | None = None) -> tuple[float, int]:
    """One non-streamed completion of ``text`` (after the messages of ``history``): (seconds, HTTP status)."""
    body = {"model": target.model, "messages": [*(history or []), {"role": "user", "content": text}]}
    started = time.perf_counter()
    async with session.post(target.v1 + "/chat/completions", json=body,
                            headers={"Authorization": f"Bearer {target.key}"}) as response:
        await response.read()
        return time.perf_counter() - started, response.status


async def sequential(session, target: Target, count: int, text: str = SMALL,
                     latencies: list[float] | None = None) -> dict[str, Any]:
    """``count`` completions one after another (c=1); each success's seconds also appended to ``latencies``."""
    latencies = [] if latencies is None else latencies
    mark, errors = len(latencies), 0
    for _ in range(count):
        seconds, status = await chat(session, target, fresh(text))
        latencies.append(seconds) if status == 200 else None
        errors += status != 200
    return summary(latencies[mark:], errors)


async def multi_turn(session, target: Target, conversations: int, turns: int) -> dict[str, Any]:
    """``conversations`` conversations of ``turns`` turns sent turn-major, every turn with the whole
    history: p50 (ms) at turn 1, ``turns // 2`` and ``turns``, their ratio, errors."""
    histories: list[list[dict[str, str]]] = [[] for _ in range(conversations)]
    latencies: dict[int, list[float]] = {t: [] for t in range(1, turns + 1)}
    errors = 0
    for turn in range(1, turns + 1):
        for history in histories:
            text = fresh(f"Turn {turn}: {SMALL}")
            seconds, status = await chat(session, target, text, history)
            latencies[turn].append(seconds) if status == 200 else None
            errors += status != 200
            history += [{"role": "user", "content": text}, {"role": "assistant", "content": ANSWER}]
    middle = max(1, turns // 2)
    out = {"turns": turns, "conversations": conversations, "errors": errors,
           "turn_1_p50_ms": pct(latencies[1], 0.5), "turn_mid": middle,
           "turn_mid_p50_ms": pct(latencies[middle], 0.5), "turn_last_p50_ms": pct(latencies[turns], 0.5)}
    out["last_over_first"] = _div(out["turn_last_p50_ms"], out["turn_1_p50_ms"])
    return out


async def concurrent(session, target: Target, clients: int, seconds: float,
                     latencies: list[float] | None = None) -> dict[str, Any]:
    """``clients`` loops sending completions back to back for ``seconds``; throughput and latency
    (each success's seconds also appended to ``latencies``)."""
    latencies = [] if latencies is None else latencies
    mark, errors = len(latencies), [0]
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < deadline:
            took, status = await chat(session, target, fresh(SMALL))
            latencies.append(took) if status == 200 else None
            errors[0] += status != 200

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return summary(latencies[mark:], errors[0], time.perf_counter() - started)


async def streams(session, target: Target, count: int) -> dict[str, Any]:
    """``count`` streamed completions one after another: TTFT (first non-empty content delta) and total."""
    ttft, total, errors = [], [], 0
    for _ in range(count):
        body = {"model": target.model, "stream": True, "messages": [{"role": "user", "content": fresh(SMALL)}]}
        started, first = time.perf_counter(), None
        async with session.post(target.v1 + "/chat/completions", json=body,
                                headers={"Authorization": f"Bearer {target.key}"}) as response:
            if response.status != 200:
                await response.read()
                errors += 1
                continue
            async for raw in response.content:
                line = raw.strip()
                if first is None and line.startswith(b"data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        first = time.perf_counter() - started
        if first is not None:
            ttft.append(first)
            total.append(time.perf_counter() - started)
        else:
            errors += 1
    return {"ttft_p50_ms": pct(ttft, 0.5), "ttft_p99_ms": pct(ttft, 0.99), "total_p50_ms": pct(total, 0.5),
            "n": len(ttft), "errors": errors}


async def large_input(session, target: Target, text: str, repeat: int) -> dict[str, Any]:
    """Small requests one at a time while another client sends ``text`` ``repeat`` times back to back."""
    large, statuses, small, small_errors = [], {}, [], 0
    done = asyncio.Event()

    async def attacker() -> None:
        for _ in range(repeat):
            took, status = await chat(session, target, fresh(text))
            large.append(took)
            statuses[str(status)] = statuses.get(str(status), 0) + 1
        done.set()

    async def small_client() -> None:
        nonlocal small_errors
        await asyncio.sleep(0.05)  # let the large request start first
        while not done.is_set():
            took, status = await chat(session, target, fresh(SMALL))
            small.append(took) if status == 200 else None
            small_errors += status != 200

    await asyncio.gather(attacker(), small_client())
    return {"chars": len(text), "large_s": [round(t, 3) for t in large], "large_status": statuses,
            "small": summary(small, small_errors)}


def _session():
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64), timeout=aiohttp.ClientTimeout(total=600))


async def interleaved(targets: list[Target], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """c=1 and c=32 on every target in ``args.rounds`` interleaved rounds, all targets up at once.

    Round *r* gives each target, in an order rotated by *r*, ``requests / rounds`` sequential
    requests, then each ``seconds / rounds`` of 32 concurrent clients. A slow minute of a shared
    machine (this one's speed drifts by a quarter within the hour) then falls on every target
    alike instead of on whichever was measured in it, so the per-round ratios (:func:`ratios`)
    compare like with like. Per target: ``c1``/``c32`` summaries over the pooled requests of all
    rounds, with each round's p50 (``rounds_p50_ms``) and throughput (``rounds_req_per_s``), and
    its RSS after each phase.
    """
    out: dict[str, dict[str, Any]] = {t.name: {**t.info} for t in targets}
    per_round = max(1, args.requests // args.rounds)
    async with _session() as session:
        for target in targets:
            await sequential(session, target, 5)  # warm-up: connections, first-call costs
            out[target.name]["rss_phases_mb"] = {"start": target.info.get("rss_start_mb")}
        for phase, per_block in (("c1", "p50_ms"), ("c32", "req_per_s")):
            pooled: dict[str, list[float]] = {t.name: [] for t in targets}
            blocks: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
            cpu = {t.name: 0.0 for t in targets}  # the target's CPU seconds (all its processes) in this phase
            for r in range(args.rounds):
                print(f"  {phase} round {r + 1}/{args.rounds} ...", flush=True)
                for target in targets[r % len(targets):] + targets[:r % len(targets)]:
                    before = cpu_seconds(target.process.pid) if target.process is not None else None
                    blocks[target.name].append(
                        await sequential(session, target, per_round, latencies=pooled[target.name]) if phase == "c1"
                        else await concurrent(session, target, 32, args.seconds / args.rounds,
                                              latencies=pooled[target.name]))
                    if before is not None:
                        cpu[target.name] += cpu_seconds(target.process.pid) - before
            for target in targets:
                done = blocks[target.name]
                result = out[target.name]
                result[phase] = {**summary(pooled[target.name], sum(b["errors"] for b in done),
                                           sum(b.get("seconds", 0.0) for b in done) or None),
                                 f"rounds_{per_block}": [b.get(per_block) for b in done]}
                answered = result[phase]["n"] + result[phase]["errors"]
                if target.process is not None and answered:
                    result[phase]["cpu_ms_per_request"] = 1000 * cpu[target.name] / answered
                if target.process is not None:  # RSS (all processes) after each phase: where memory grows
                    result["rss_phases_mb"][phase] = result["rss_after_mb"] = rss_mb(target.process.pid)
    return out


async def measure(target: Target, args: argparse.Namespace, results: dict[str, Any]) -> dict[str, Any]:
    """The remaining cases for one target, after :func:`interleaved` filled ``results``."""
    async with _session() as session:
        phases = results["rss_phases_mb"]

        def rss_after(phase: str) -> None:  # RSS (all processes) after each phase: where memory grows
            if target.process is not None:
                phases[phase] = results["rss_after_mb"] = rss_mb(target.process.pid)

        if args.turns and target.name in ("litellm", "sonate", "bare"):
            print(f"  {target.name}: {args.conversations} conversations of {args.turns} turns ...", flush=True)
            results["multi_turn"] = await multi_turn(session, target, args.conversations, args.turns)
        if args.multi_turn_only:
            return results
        print(f"  {target.name}: streams ...", flush=True)
        results["stream"] = await streams(session, target, args.streams)
        rss_after("stream")
        if target.process is not None:  # what the traffic copied of the pages workers share (copy-on-write)
            pss = pss_by_process(target.process.pid)
            results["pss_stream_mb"] = pss["total"]
            results["pss_workers_stream_mb"] = pss["children"] if pss["children"] else [pss["first"]]
        if target.name in ("sonate", "baseline"):
            results["idle"] = await sequential(session, target, args.requests // 2)
            for name, text in (("large_12k", PATHOLOGICAL), ("large_150k", MEDIUM), ("large_1m", LARGE)):
                print(f"  {target.name}: {name} ...", flush=True)
                results[name] = await large_input(session, target, text, args.large_repeat)
                rss_after(name)  # after the large inputs too
            # a large screen answered 503 guardrail_timeout is still stopping in its lane: RSS once it has
            after_load = results.get("rss_after_mb")
            await asyncio.sleep(args.settle)
            rss_after("settled")
            results["settle_s"] = args.settle
            results["rss_after_mb"] = after_load
    return results


# ---------------------------------------------------------------- report

def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f} ms"


def table(results: dict[str, dict[str, Any]]) -> str:
    """The Markdown table: one column per measured target."""
    names = [n for n in ("direct", "litellm", "sonate", "baseline", "bare") if n in results]
    names += sorted(n for n in results if n.startswith("sonate-w"))
    heads = {"direct": "direct to stub", "litellm": f"LiteLLM proxy {LITELLM_VERSION} (no guardrails)",
             "sonate": "this proxy (full matrix)",
             "baseline": f"this proxy at {results.get('baseline', {}).get('commit', '?')} (baseline)",
             "bare": "this proxy, no policies (gateway alone)",
             **{n: f"this proxy, {n[len('sonate-w'):]} workers" for n in names if n.startswith("sonate-w")}}
    get = lambda n, *path: _dig(results.get(n, {}), path)  # noqa: E731
    rows = [
        ("p50 latency, c=1 (p99)", lambda n: f"{_ms(get(n, 'c1', 'p50_ms'), 2)} ({_ms(get(n, 'c1', 'p99_ms'))})"),
        ("p50 overhead over direct, c=1", lambda n: _ms(_sub(get(n, 'c1', 'p50_ms'), get('direct', 'c1', 'p50_ms')), 2)),
        ("throughput, c=32 (p50 / p99)", lambda n: f"{get(n, 'c32', 'req_per_s') or 0:,.0f} req/s "
                                                   f"({_ms(get(n, 'c32', 'p50_ms'))} / {_ms(get(n, 'c32', 'p99_ms'))})"),
        (f"stream TTFT p50 ({STREAM_CHUNKS} chunks, {STREAM_GAP * 1000:.0f} ms apart)",
         lambda n: _ms(get(n, 'stream', 'ttft_p50_ms'))),
        ("stream total p50", lambda n: _ms(get(n, 'stream', 'total_p50_ms'))),
        ("CPU per request, c=1 / c=32 (all processes)",
         lambda n: "" if get(n, 'c1', 'cpu_ms_per_request') is None else
         f"{get(n, 'c1', 'cpu_ms_per_request'):.1f} ms / {get(n, 'c32', 'cpu_ms_per_request') or 0:.1f} ms"),
        ("errors (c=1 / c=32 / stream)", lambda n: f"{get(n, 'c1', 'errors')} / {get(n, 'c32', 'errors')} / "
                                                   f"{get(n, 'stream', 'errors')}"),
        ("RSS after start / after the load (all processes)",
         lambda n: "" if get(n, 'rss_start_mb') is None else
         f"{get(n, 'rss_start_mb'):.0f} MB / {get(n, 'rss_after_mb') or 0:.0f} MB"),
        ("RSS by phase: start / c=1 / c=32 / streams / 12 KB / 150 KB / 1 MB / settled",
         lambda n: " / ".join(f"{v:.0f}" for v in (get(n, 'rss_phases_mb') or {}).values() if v is not None)
         + (" MB" if get(n, 'rss_phases_mb', 'start') is not None else "")),
        ("PSS after start: all processes (each worker)",
         lambda n: "" if get(n, 'pss_start_mb') is None else
         f"{get(n, 'pss_start_mb'):.0f} MB ({' + '.join(f'{v:.0f}' for v in get(n, 'pss_workers_start_mb') or [])})"),
        ("PSS after c=1, c=32 and streams: all processes (each worker)",
         lambda n: "" if get(n, 'pss_stream_mb') is None else
         f"{get(n, 'pss_stream_mb'):.0f} MB ({' + '.join(f'{v:.0f}' for v in get(n, 'pss_workers_stream_mb') or [])})"),
        ("ready after start", lambda n: "" if get(n, 'ready_s') is None else f"{get(n, 'ready_s'):.1f} s"),
        ("multi-turn p50: turn 1 / middle / last (last ÷ first)",
         lambda n: "" if get(n, 'multi_turn') is None else
         f"{_ms(get(n, 'multi_turn', 'turn_1_p50_ms'))} / {_ms(get(n, 'multi_turn', 'turn_mid_p50_ms'))} / "
         f"{_ms(get(n, 'multi_turn', 'turn_last_p50_ms'))} ({get(n, 'multi_turn', 'last_over_first'):.2f}×; "
         f"turns 1 / {get(n, 'multi_turn', 'turn_mid')} / {get(n, 'multi_turn', 'turns')}, "
         f"{get(n, 'multi_turn', 'conversations')} conversations)"),
    ]
    lines = ["| measure | " + " | ".join(heads[n] for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(n) for n in names) + " |" for label, cell in rows]
    large = [n for n in ("sonate", "baseline") if n in results]  # the targets the large inputs were sent to

    def cells(render) -> str:
        return " | ".join(render(results[n]) if n in large else "" for n in names)

    def small(case: dict[str, Any] | None) -> str:
        if not case:
            return ""
        s = case["small"]
        return (f"{_ms(s['p50_ms'])} / {_ms(s['p99_ms'])} (n={s['n']}; "
                f"{', '.join(f'{t:.2f} s' for t in case['large_s'])}; {case['large_status']})")

    if large:
        lines.append("| small requests idle, p50 / p99 | " + cells(
            lambda r: f"{_ms(_dig(r, ('idle', 'p50_ms')))} / {_ms(_dig(r, ('idle', 'p99_ms')))}") + " |")
        for key, label in (("large_12k", "12 KB pathological"), ("large_150k", "150 KB prose"),
                           ("large_1m", "1 MB prose")):
            if any(key in results[n] for n in large):
                lines.append(f"| small p50 / p99 while a {label} prompt is screened (its time, status) | "
                             + cells(lambda r: small(r.get(key))) + " |")
    return "\n".join(lines)


def ratios(results: dict[str, dict[str, Any]]) -> list[str]:
    """The comparisons the performance targets name, as sentences."""
    out = []
    d, lite, s = (results.get(n, {}) for n in ("direct", "litellm", "sonate"))
    over = lambda r: _sub(_dig(r, ("c1", "p50_ms")), _dig(d, ("c1", "p50_ms")))  # noqa: E731
    for name in ("sonate", "bare", "litellm"):
        turns = _dig(results.get(name, {}), ("multi_turn",))
        if turns:
            out.append(f"{name}, multi-turn: turn {turns['turns']} / turn 1 p50 = {turns['last_over_first']:.2f}x "
                       f"({_ms(turns['turn_1_p50_ms'])} → {_ms(turns['turn_last_p50_ms'])}; goal <= 1.3x and no "
                       f"worse than LiteLLM's)")
    if not _dig(s, ("c1",)):  # the multi-turn case alone
        return out
    if s and lite:
        rounds_c1, rounds_c32 = round_ratios(d, lite, s)
        out.append(f"p50 overhead at c=1: this proxy {over(s):.2f} ms vs LiteLLM {over(lite):.2f} ms "
                   f"= {_div(over(s), over(lite)):.2f}x; per interleaved round {_listed(rounds_c1)} "
                   f"(goal: below LiteLLM's, ideally <= 5 ms)")
        out.append(f"c=32 throughput: this proxy / LiteLLM = "
                   f"{_div(_dig(s, ('c32', 'req_per_s')), _dig(lite, ('c32', 'req_per_s'))):.2f}x; per interleaved "
                   f"round {_listed(rounds_c32)} (goal >= 1x, ideally 3x)")
        cpu_s, cpu_lite = (_dig(r, ("c32", "cpu_ms_per_request")) for r in (s, lite))
        if cpu_s and cpu_lite:
            out.append(f"CPU per request at c=32 (all processes): this proxy {cpu_s:.1f} ms vs LiteLLM "
                       f"{cpu_lite:.1f} ms = {cpu_s / cpu_lite:.2f}x (the load generator and the stub use the same CPUs)")
    def compared(label: str, target: dict[str, Any], reference: dict[str, Any], what: str) -> str:
        rounds_c1, rounds_c32 = round_ratios(d, reference, target)
        throughput = _div(_dig(target, ("c32", "req_per_s")), _dig(reference, ("c32", "req_per_s")))
        return (f"{label}: p50 overhead at c=1 {over(target):.2f} ms vs {over(reference):.2f} ms, per interleaved "
                f"round {_listed(rounds_c1)}; c=32 throughput {throughput:.2f}x, per round {_listed(rounds_c32)}{what}")

    base, bare = results.get("baseline"), results.get("bare")
    if s and base:
        out.append(compared(f"this proxy vs its baseline {base.get('commit', '?')}", s, base, ""))
    if s and bare and lite:
        out.append(compared("this proxy with no policies vs LiteLLM", bare, lite,
                            f"; the full matrix adds {_sub(over(s), over(bare)) or 0:.2f} ms at c=1"))
    for name in sorted(n for n in results if n.startswith("sonate-w")):
        w = results[name]
        if lite:
            out.append(f"{name}: p50 overhead at c=1 {over(w) or 0:.2f} ms vs LiteLLM {over(lite) or 0:.2f} ms; "
                       f"c=32 throughput / LiteLLM = "
                       f"{_div(_dig(w, ('c32', 'req_per_s')), _dig(lite, ('c32', 'req_per_s'))):.2f}x")
        if s:
            out.append(f"{name}: c=32 throughput / one worker = "
                       f"{_div(_dig(w, ('c32', 'req_per_s')), _dig(s, ('c32', 'req_per_s'))):.2f}x; RSS after start "
                       f"{w.get('rss_start_mb', 0):.0f} MB for {w.get('workers')} workers and the supervisor")
            one, many = sum(s.get("pss_workers_start_mb") or []), sum(w.get("pss_workers_start_mb") or [])
            out.append(f"{name}: PSS after start of the {w.get('workers')} workers {many:.0f} MB = "
                       f"{_div(many, one):.2f}x one worker's {one:.0f} MB (goal <= 1.3x); all processes "
                       f"(the supervisor included) {w.get('pss_start_mb', 0):.0f} MB; ready {w.get('ready_s', 0):.1f} s")
            one, many = sum(s.get("pss_workers_stream_mb") or []), sum(w.get("pss_workers_stream_mb") or [])
            out.append(f"{name}: PSS after the load (c=1, c=32, streams) of the workers {many:.0f} MB = "
                       f"{_div(many, one):.2f}x one worker's {one:.0f} MB")
    if s and d:
        out.append(f"stream TTFT overhead over direct: "
                   f"{_sub(_dig(s, ('stream', 'ttft_p50_ms')), _dig(d, ('stream', 'ttft_p50_ms'))) or 0:.1f} ms "
                   f"(goal <= 25 ms, ideally <= 5 ms)")
        out.append(f"p99 at c=1: {_ms(_dig(s, ('c1', 'p99_ms')))} (goal < 100 ms)")
        idle = _dig(s, ("idle", "p99_ms"))
        for key in ("large_12k", "large_150k", "large_1m"):
            during = _dig(s, (key, "small", "p99_ms"))
            if idle and during:
                out.append(f"{key}: small requests' p99 during / idle = {during / idle:.2f}x (goal <= 2x)")
        out.append(f"RSS after start {s.get('rss_start_mb', 0):.0f} MB, after the load (large inputs included) "
                   f"{s.get('rss_after_mb', 0):.0f} MB, {_dig(s, ('rss_phases_mb', 'settled')) or 0:.0f} MB after "
                   f"a {s.get('settle_s', 0):g} s pause (goal <= 600), ready {s.get('ready_s', 0):.1f} s (goal <= 8 s)")
    return out


def round_ratios(direct: dict[str, Any], reference: dict[str, Any],
                 sonate: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Per interleaved round (:func:`interleaved`): this proxy's c=1 p50 overhead over direct
    divided by ``reference``'s (LiteLLM's, or a baseline checkout's), and its c=32 throughput
    divided by the reference's (rounds where a figure is missing or the reference's overhead is
    not positive are left out)."""
    p50s = (_dig(x, ("c1", "rounds_p50_ms")) or [] for x in (direct, reference, sonate))
    c1 = [(s - d) / (r - d) for d, r, s in zip(*p50s) if None not in (d, r, s) and r > d]
    c32 = [s / r for r, s in zip(*(_dig(x, ("c32", "rounds_req_per_s")) or [] for x in (reference, sonate))) if r and s]
    return c1, c32


def _listed(values: list[float]) -> str:
    """``median M (a, b, ...)`` of ratios, or "–" when there are none."""
    if not values:
        return "–"
    return f"median {statistics.median(values):.2f}x ({', '.join(f'{v:.2f}' for v in values)})"


def _dig(value: Any, path: tuple) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _div(a: float | None, b: float | None) -> float:
    return float("nan") if not a or not b else a / b


def machine() -> dict[str, Any]:
    """What the figures ran on: CPUs, load average, Python, platform."""
    return {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "python": platform.python_version(),
            "platform": platform.platform(), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the stub and every target (one after another, each idle while the next starts),
    measure c=1 and c=32 interleaved (:func:`interleaved`), then the rest target by target, stop."""
    with contextlib.ExitStack() as stack:
        stub_v1 = stack.enter_context(stub_process())
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sonate-gateway-bench-")))
        targets = [Target("direct", stub_v1, "none", "stub-model")]
        if not args.no_litellm:
            print("starting litellm ...", flush=True)
            (work / "litellm").mkdir()
            target = stack.enter_context(litellm_target(stub_v1, args.cache, work / "litellm"))
            if target is not None:
                targets.append(target)
        print("starting sonate ...", flush=True)
        (work / "sonate").mkdir()
        targets.append(stack.enter_context(sonate_target(stub_v1, work / "sonate", args.policies)))
        if args.baseline is not None:
            print(f"starting this proxy at {args.baseline} ...", flush=True)
            (work / "baseline").mkdir()
            targets.append(stack.enter_context(sonate_target(stub_v1, work / "baseline", baseline=args.baseline)))
        if args.bare:
            print("starting this proxy with no policies ...", flush=True)
            (work / "bare").mkdir()
            targets.append(stack.enter_context(sonate_target(stub_v1, work / "bare", bare=True)))
        if args.workers > 1:
            print(f"starting sonate, {args.workers} workers ...", flush=True)
            (work / "sonate-workers").mkdir()
            targets.append(stack.enter_context(sonate_target(stub_v1, work / "sonate-workers", args.policies,
                                                             args.workers)))
        if args.multi_turn_only:
            results: dict[str, dict[str, Any]] = {t.name: {"rss_phases_mb": {}} for t in targets}
        else:
            print(f"c=1 and c=32, {args.rounds} interleaved rounds ...", flush=True)
            results = await interleaved(targets, args)
        for target in targets:
            print(f"{target.name} ...", flush=True)
            results[target.name] = await measure(target, args, results[target.name])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=200, help="c=1 requests per target (default 200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="c=32 duration per target (default 10 s)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds the c=1 requests and c=32 seconds are split into (default 5)")
    parser.add_argument("--streams", type=int, default=15, help="streamed requests per target (default 15)")
    parser.add_argument("--large-repeat", type=int, default=3, help="large prompts per large case (default 3)")
    parser.add_argument("--settle", type=float, default=SETTLE_S,
                        help=f"seconds of quiet before the last RSS reading (default {SETTLE_S:g})")
    parser.add_argument("--quick", action="store_true", help="a short run (checks the script, figures are rough)")
    parser.add_argument("--policies", type=Path, help="this proxy's policies folder (default: the shipped policies/)")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM proxy column")
    parser.add_argument("--bare", action="store_true",
                        help="also measure this proxy with no policies (the gateway alone: what the guardrails "
                             "cost is the difference), interleaved")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also measure this proxy as it is in another checkout (e.g. a `git worktree` of an "
                             "earlier commit; its own code and policies, this environment's packages), interleaved")
    parser.add_argument("--workers", type=int, default=2,
                        help="also measure this proxy with server.workers: N (default 2; 1: leave the column out)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sonate-bench",
                        help="where the LiteLLM virtualenv is kept (default ~/.cache/sonate-bench)")
    parser.add_argument("--conversations", type=int, default=8, help="multi-turn conversations (default 8)")
    parser.add_argument("--turns", type=int, default=50, help="turns per multi-turn conversation (default 50; 0: skip)")
    parser.add_argument("--multi-turn-only", action="store_true",
                        help="measure the multi-turn case alone (no c=1, c=32, streams or large inputs)")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench" / "gateway.json", help="JSON results")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "proxy" / "__main__.py").is_file():
        parser.error(f"--baseline {args.baseline}: not a checkout of this repository (no proxy/__main__.py)")
    if args.stub:
        serve_stub(args.stub)
        return 0
    if args.quick:
        args.requests, args.seconds, args.streams, args.large_repeat, args.rounds = 40, 3.0, 4, 1, 2
        args.conversations, args.turns = 2, min(args.turns, 10)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    info = machine()
    results = asyncio.run(run(args))
    info["loadavg_end"] = os.getloadavg()
    report = {"machine": info, "results": results, "ratios": ratios(results)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"\n{info['cpus']} CPUs, Python {info['python']}, load average at start "
          f"{', '.join(f'{x:.2f}' for x in info['loadavg_start'])}, at end "
          f"{', '.join(f'{x:.2f}' for x in info['loadavg_end'])}\n")
    print(table(results))
    print()
    for line in report["ratios"]:
        print("- " + line)
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
