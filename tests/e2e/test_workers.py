"""``server.workers: 2``: a supervisor and two serving processes on one port (docs/operations.md "Workers").

Over the stub provider and a real Redis ledger: requests reach both workers (``x-sonate-worker``),
their receipts form one chain that ``sonate verify --ledger`` accepts, ``/metrics`` answered by
either worker shows the totals of both, and a worker killed with SIGKILL is restarted while its
counts stay in the totals; a Responses and a Messages conversation continue after a refusal
whichever worker answers (the refused turn is known by the proxy's reply the client sends back,
not by one process's memory). The workers are forks of the supervisor, which loaded the models:
their PSS sum stays under :data:`SHARED_PSS_BOUND` times one worker's RSS, and so it does once a
killed worker was forked again; a worker forked after a policy reload serves the reloaded files.
On a SQLite ledger: concurrent requests through both workers keep one
chain, and SIGTERM to the supervisor stops every worker gracefully (exit 0, nothing left running).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import anthropic
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.server.admission.workers import Supervisor, bind
from tests.support.forked import sonate
from tests.support.prompts import APOLOGY, HARMFUL
from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    ROOT,
    RunningProxy,
    fork_serve,
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import delete_redis_namespace, free_port, redis_namespace_url

pytestmark = pytest.mark.models  # starts proxies (two model-loading processes each)

CHAT = "/v1/chat/completions"
FOLLOW_UP = "Fine. What is the boiling point of water at sea level?"
#: The receipt evidence of a follow-up whose refused first turn (messages 0 and 1) was withheld.
WITHHELD = [{"messages": [0, 2], "verdict": "refuse", "signal": "reply"}]


def start_workers(directory: Path, stub_url: str, ledger_url: str, workers: int = 2) -> RunningProxy:
    """``sonate serve`` with ``server.workers: workers`` on a free port, once ``/readyz`` answers."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 65536, "upstream_timeout_seconds": 5,
              "workers": workers, "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0,
                                                   "screen_timeout_seconds": 0}}
    config = write_config(directory, stub_url, ledger_url, port, overrides={"server": server})
    return wait_until_up(fork_serve(config, ledger_url, directory / "keys" / "signing-key.json", port),
                         "/readyz", timeout=300)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, stub) -> RunningProxy:
    """Two workers over a fresh Redis namespace."""
    ledger_url = redis_namespace_url("workers")
    running = start_workers(tmp_path_factory.mktemp("workers"), stub.url, ledger_url)
    yield running
    stop_proxy(running)
    delete_redis_namespace(ledger_url)


def chat(proxy: RunningProxy, text: str) -> tuple[str, str]:
    """One completion on a new connection (a new client): (worker index, receipt id) from the headers."""
    with openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=120) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": text}])
        assert raw.parse().choices[0].message.content
        return raw.headers["x-sonate-worker"], raw.headers["x-sonate-receipt-id"]


def scrape(proxy: RunningProxy) -> tuple[str, bytes]:
    """``GET /metrics`` on a new connection: (worker index, body)."""
    request = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.headers["x-sonate-worker"], response.read()


def total(body: bytes, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    return sum(sample.value for family in text_string_to_metric_families(body.decode())
               for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def scrapes_of_both(proxy: RunningProxy) -> dict[str, bytes]:
    """One ``/metrics`` body from each worker (new connections until both answered)."""
    bodies: dict[str, bytes] = {}
    for _ in range(60):
        worker, body = scrape(proxy)
        bodies.setdefault(worker, body)
        if len(bodies) == 2:
            return bodies
    raise AssertionError(f"60 connections all reached worker(s) {sorted(bodies)}")


def worker_pids(supervisor: int) -> set[int]:
    """The live child processes of ``supervisor`` (from /proc)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == supervisor and fields[0] != "Z":
                pids.add(int(entry.name))
    return pids


def verify_ledger(proxy: RunningProxy) -> str:
    """``sonate verify --ledger`` with the keys the proxy publishes; its output (asserts exit 0)."""
    done = sonate("verify", "--ledger", proxy.ledger_url, "--keys-url", proxy.v1 + "/keys", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_requests_reach_both_workers_and_their_receipts_form_one_chain(served: RunningProxy) -> None:
    answers = [chat(served, f"Question {i}: what is the capital of Portugal?") for i in range(24)]
    assert {worker for worker, _ in answers} == {"0", "1"}
    receipt_ids = [receipt_id for _, receipt_id in answers]
    assert len(set(receipt_ids)) == len(receipt_ids)
    verify_ledger(served)
    # Either worker finds any receipt: one ledger behind both.
    for receipt_id in receipt_ids[:6]:
        request = urllib.request.Request(f"{served.v1}/receipts/{receipt_id}",
                                         headers={"Authorization": f"Bearer {CLIENT_KEY}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200


def test_metrics_from_either_worker_show_the_totals_of_both(served: RunningProxy) -> None:
    before = scrapes_of_both(served)
    base = {w: total(b, "sonate_requests_total", route=CHAT, result="ok") for w, b in before.items()}
    assert base["0"] == base["1"]
    workers = [chat(served, f"Count me {i}, please.")[0] for i in range(16)]
    after = scrapes_of_both(served)
    for body in after.values():
        assert total(body, "sonate_requests_total", route=CHAT, result="ok") == base["0"] + 16
        assert total(body, "sonate_request_duration_seconds_count") >= base["0"] + 16
        assert b"# HELP sonate_interactions_total Chat interactions answered" in body  # help texts kept
    assert set(workers) == {"0", "1"}


def test_metrics_text_passes_promtool(served: RunningProxy) -> None:
    chat(served, "Hello there")
    _, body = scrape(served)
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed (Debian package `prometheus`; `make test` installs it)")
    result = subprocess.run([exe, "check", "metrics"], input=body, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def on_both_workers(ask: Callable[[], tuple[str, Any]]) -> list[Any]:
    """``ask()`` (one request on a new connection → (worker index, result)) repeated until both
    workers answered; every result."""
    seen, results = set(), []
    for _ in range(60):
        worker, result = ask()
        seen.add(worker)
        results.append(result)
        if seen == {"0", "1"}:
            return results
    raise AssertionError(f"60 connections all reached worker(s) {sorted(seen)}")


def withheld_turns(proxy: RunningProxy, receipt_id: str) -> list[dict]:
    request = urllib.request.Request(f"{proxy.v1}/receipts/{receipt_id}",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["evidence"].get("withheld_turns")


def responses_client(proxy: RunningProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=120)


def messages_client(proxy: RunningProxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_conversation_continues_after_a_refusal_on_either_worker(served, upstream, stream) -> None:
    with responses_client(served) as client:
        if stream:
            with client.responses.stream(model="stub", input=HARMFUL) as events:
                first = events.get_final_response()
        else:
            first = client.responses.create(model="stub", input=HARMFUL)
    assert [(p.type, p.refusal) for p in first.output[0].content] == [("refusal", APOLOGY)]
    history: list[Any] = [{"role": "user", "content": HARMFUL}]
    history += first.output  # the SDK's way: the response's output items sent back as they are
    history.append({"role": "user", "content": FOLLOW_UP})

    def ask() -> tuple[str, tuple[str, str, str]]:
        with responses_client(served) as client:
            raw = client.responses.with_raw_response.create(model="stub", input=history)
            return raw.headers["x-sonate-worker"], (raw.headers["x-sonate-guardrail-action"], raw.parse().output_text,
                                                    raw.headers["x-sonate-receipt-id"])

    for action, text, receipt_id in on_both_workers(ask):
        assert (action, text) == ("allow", f"Stub answer: {FOLLOW_UP}")
        assert withheld_turns(served, receipt_id) == WITHHELD
    assert {json.dumps(sent["messages"]) for sent in upstream.received()} == {
        json.dumps([{"role": "user", "content": FOLLOW_UP}])}  # the refused turn never reached the provider


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_conversation_continues_after_a_refusal_on_either_worker(served, upstream, stream) -> None:
    harmful = [{"role": "user", "content": HARMFUL}]
    with messages_client(served) as client:
        if stream:
            with client.messages.stream(model="stub", max_tokens=64, messages=harmful) as events:
                first = events.get_final_message()
        else:
            first = client.messages.create(model="stub", max_tokens=64, messages=harmful)
    assert first.stop_reason == "refusal" and [(b.type, b.text) for b in first.content] == [("text", APOLOGY)]
    history = [*harmful, {"role": "assistant", "content": first.content}, {"role": "user", "content": FOLLOW_UP}]

    def ask() -> tuple[str, tuple[str, str, str, str]]:
        with messages_client(served) as client:
            raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=history)
            message = raw.parse()
            return raw.headers["x-sonate-worker"], (raw.headers["x-sonate-guardrail-action"], message.stop_reason,
                                                    message.content[0].text, raw.headers["x-sonate-receipt-id"])

    for action, reason, text, receipt_id in on_both_workers(ask):
        assert (action, reason, text) == ("allow", "end_turn", f"Stub answer: {FOLLOW_UP}")
        assert withheld_turns(served, receipt_id) == WITHHELD
    assert {json.dumps(sent["messages"]) for sent in upstream.received()} == {
        json.dumps([{"role": "user", "content": FOLLOW_UP}])}


def test_a_killed_worker_is_restarted_and_its_counts_stay(served: RunningProxy) -> None:
    chat(served, "Before the crash.")
    _, body = scrape(served)
    counted = total(body, "sonate_requests_total", route=CHAT, result="ok")
    pids = worker_pids(served.process.pid)
    assert len(pids) == 2
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while "exited with signal SIGKILL; restarting" not in served.log():
        assert time.monotonic() < deadline, served.log()[-3000:]
        time.sleep(0.2)
    while len(worker_pids(served.process.pid) - {victim}) < 2:
        assert time.monotonic() < deadline, "the worker was not restarted"
        time.sleep(0.2)
    assert served.process.poll() is None
    # Both workers answer again (the new one once it has loaded), and no count was lost.
    answered = {chat(served, f"After the crash {i}.")[0] for i in range(24)}
    assert answered == {"0", "1"}
    for body in scrapes_of_both(served).values():
        assert total(body, "sonate_requests_total", route=CHAT, result="ok") >= counted + 24
    verify_ledger(served)


def memory_mb(pid: int) -> dict[str, float]:
    """``Rss``, ``Pss``, ``Private_Clean``, ``Private_Dirty``... of ``pid`` in MB (/proc/PID/smaps_rollup)."""
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    return {line.split(":")[0]: int(line.split()[1]) / 1024 for line in lines}


#: Bound of the two workers' PSS sum, as a multiple of the largest worker's RSS (every page it maps:
#: about what one worker alone takes). The two workers fork from the supervisor after it loaded
#: the models, whose pages all three then share: measured 391 MB of PSS against 518 MB of RSS
#: after start (0.75x; 417 MB, 0.80x, after bench/gateway.py's load) on a 2-core machine; two
#: workers that each loaded their own models took 997 MB against 561 (1.78x).
SHARED_PSS_BOUND = 1.3


def test_workers_share_the_models_their_supervisor_loaded_and_a_dead_one_is_forked_again(served) -> None:
    on_both_workers(lambda: chat(served, "Which models do you share?"))
    supervisor = served.process.pid

    def check_sharing() -> set[int]:
        pids = worker_pids(supervisor)
        assert len(pids) == 2
        memory = [memory_mb(pid) for pid in pids]
        pss, rss = sum(m["Pss"] for m in memory), max(m["Rss"] for m in memory)
        assert pss <= SHARED_PSS_BOUND * rss, f"workers' PSS {pss:.0f} MB, a worker's RSS {rss:.0f} MB"
        return pids

    victim = min(check_sharing())
    os.kill(victim, signal.SIGKILL)
    killed, deadline = time.monotonic(), time.monotonic() + 120
    answered: set[str] = set()
    while answered != {"0", "1"} or victim in worker_pids(supervisor):
        assert time.monotonic() < deadline and served.process.poll() is None, served.log()[-3000:]
        with contextlib.suppress(OSError, openai.APIError):
            answered.add(chat(served, f"Still there {len(answered)}?")[0])
    replaced = time.monotonic() - killed  # the restart delay (1 s) and the new fork's start-up
    assert replaced < 60, replaced
    assert victim not in check_sharing()  # the new worker is a fork of the supervisor too


def policy_version(proxy: RunningProxy) -> tuple[str, str]:
    """``GET /v1/admin/policies`` on a new connection: (worker index, the policy version it serves)."""
    request = urllib.request.Request(proxy.v1 + "/admin/policies", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.headers["x-sonate-worker"], json.loads(response.read())["policy_version"]


def test_a_policy_reload_holds_in_a_worker_forked_after_it(served: RunningProxy) -> None:
    # A replacement worker is forked from the supervisor, which loaded the policies at start: it
    # must read the files again, not serve the version the supervisor holds.
    (first,) = set(on_both_workers(lambda: policy_version(served)))
    policy = served.config_path.parent / "policies" / "continuity.yaml"
    policy.write_text(policy.read_text().replace("description: ", "description: (edited) ", 1))
    os.kill(served.process.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while True:
        versions = set(on_both_workers(lambda: policy_version(served)))
        if len(versions) == 1 and versions != {first}:
            break
        assert time.monotonic() < deadline, versions
        time.sleep(0.5)
    (edited,) = versions
    victim = min(worker_pids(served.process.pid))
    os.kill(victim, signal.SIGKILL)
    while victim in worker_pids(served.process.pid) or len(worker_pids(served.process.pid)) < 2:
        assert time.monotonic() < deadline, served.log()[-3000:]
        time.sleep(0.2)
    assert set(on_both_workers(lambda: policy_version(served))) == {edited}


def test_sqlite_ledger_keeps_one_chain_and_sigterm_stops_every_worker(tmp_path: Path, stub) -> None:
    running = start_workers(tmp_path / "proxy", stub.url, f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: chat(running, f"Concurrent question {i}?"), range(32)))
        assert {worker for worker, _ in answers} == {"0", "1"}
        stdout = verify_ledger(running)
        assert "32" in stdout or "receipt" in stdout.lower()
        pids = worker_pids(running.process.pid)
        assert len(pids) == 2
    finally:
        running.process.send_signal(signal.SIGTERM)
        code = running.process.wait(120)
    assert code == 0, running.log()[-3000:]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()
                and (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z")]
    assert "all workers stopped" in running.log()


def test_a_bad_signing_key_stops_the_supervisor_with_exit_code_2_before_the_models_load(tmp_path: Path) -> None:
    server = {"host": "127.0.0.1", "port": free_port(), "workers": 2}
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", f"sqlite:///{tmp_path / 'ledger.db'}", server["port"],
                          overrides={"server": server})
    key_file = tmp_path / "keys" / "signing-key.json"
    key_file.parent.mkdir()
    key_file.write_text("not a key")
    key_file.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "sonate: cannot start:" in done.stderr and str(key_file) in done.stderr
    assert "models loaded" not in done.stderr and "worker 0 started" not in done.stderr


def test_supervisor_restarts_a_dying_worker_with_the_socket_and_metrics_dir(tmp_path: Path, caplog) -> None:
    # A forked worker that records what it inherited, then dies at once (exit 1): re-forked, same socket.
    socks = bind("127.0.0.1", 0, 1)
    runs_dir, partial = tmp_path / "runs", tmp_path / "partial"
    runs_dir.mkdir()
    partial.mkdir()

    def record_and_die(index: int, sock: socket.socket) -> int:  # in the forked worker
        os.fstat(sock.fileno())
        written = partial / str(os.getpid())
        written.write_text(json.dumps({"index": index, "port": sock.getsockname()[1],
                                       "metrics": os.environ["PROMETHEUS_MULTIPROC_DIR"]}))
        written.replace(runs_dir / written.name)  # whole or not at all: the stop below may kill it mid-write
        return 1

    supervisor = Supervisor(record_and_die, socks)

    def stop_after_two_runs() -> None:
        deadline = time.monotonic() + 120
        while len(list(runs_dir.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.stop()

    threading.Thread(target=stop_after_two_runs, daemon=True).start()
    with caplog.at_level("INFO", logger="sonate.workers"):
        try:
            assert supervisor.run() == 0
            port = socks[0].getsockname()[1]
        finally:
            socks[0].close()
    runs = [json.loads(path.read_text()) for path in runs_dir.iterdir()]
    assert len(runs) >= 2
    assert {run["index"] for run in runs} == {0} and {run["port"] for run in runs} == {port}
    assert len({run["metrics"] for run in runs}) == 1
    assert not Path(runs[0]["metrics"]).exists()  # the per-run directory is removed
    assert "exited with code 1; restarting in 1 s" in caplog.text


def test_a_worker_usage_error_stops_the_supervisor_with_exit_code_2() -> None:
    socks = bind("127.0.0.1", 0, 2)
    try:
        assert Supervisor(lambda index, sock: sys.exit(2), socks).run() == 2
    finally:
        for sock in socks:
            sock.close()


def test_sighup_to_the_supervisor_reaches_every_worker(tmp_path: Path) -> None:
    # Each forked worker marks itself ready, then records a SIGHUP (a real worker reloads its policies on it).
    def wait_for_hup(index: int, sock: socket.socket) -> int:  # in the forked worker
        signal.signal(signal.SIGHUP, lambda *_: (tmp_path / f"hup-{index}").write_text("1"))
        (tmp_path / f"ready-{index}").write_text("1")
        time.sleep(120)
        return 0

    socks = bind("127.0.0.1", 0, 2)
    supervisor = Supervisor(wait_for_hup, socks, grace_s=5)

    def hup_then_stop() -> None:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGHUP)  # the supervisor's own handler forwards it
        while len(list(tmp_path.glob("hup-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.stop()

    threading.Thread(target=hup_then_stop, daemon=True).start()
    try:
        assert supervisor.run() == 0
    finally:
        for sock in socks:
            sock.close()
    assert sorted(p.name for p in tmp_path.glob("hup-*")) == ["hup-0", "hup-1"]
