"""A real `sonate witness` and a real proxy configured with it: each checkpoint gets a C2SP cosignature,
`sonate verify --witness-key` accepts it and refuses forgeries, and the witness refuses a rewound or
forked ledger's checkpoints (409 / 400 / 422) over HTTP, keeping its state across a restart."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from proxy.primitives import merkle
from proxy.receipts import Signer
from proxy.receipts.signing import load_or_create_signer
from proxy.tlog.checkpoint import (
    format_checkpoint,
    parse_checkpoint,
    parse_verifier_key,
    sign_checkpoint,
    verifier_key,
    verify_cosignatures,
)
from proxy.tlog.witness import format_add_checkpoint
from tests.support.forked import sonate
from tests.support.proxy import CLIENT_KEY, ROOT, start_proxy, stop_proxy
from tests.support.redis_server import free_port

ORIGIN = "sonate-trust-proxy/ledger"
NAME = "witness.test/w1"


class WitnessProcess:
    """`python -m proxy witness` on a free port; ``url`` is its submission prefix."""

    def __init__(self, directory: Path, log_vkey: str) -> None:
        self.directory, self.log_vkey = directory, log_vkey
        self.key_file, self.state = directory / "witness-key.json", directory / "witness-state.json"
        self.vkey = sonate("witness", "--name", NAME, "--key-file", str(self.key_file), "--print-key").stdout.strip()
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> "WitnessProcess":
        port = int(self.url.rsplit(":", 1)[1]) if self.url else free_port()  # a restart keeps the port
        self.url = f"http://127.0.0.1:{port}"
        log = (self.directory / "witness.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "witness", "--name", NAME, "--log", self.log_vkey, "--key-file",
             str(self.key_file), "--state", str(self.state), "--port", str(port)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.directory / "witness.log").read_text()
            try:
                if self.post("")[0] == 400:
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the witness did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    def post(self, body: str) -> tuple[int, str, str]:
        request = urllib.request.Request(self.url + "/add-checkpoint", data=body.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, stub):
    directory = tmp_path_factory.mktemp("witness")
    log_signer = load_or_create_signer(directory / "keys" / "signing-key.json")  # the key the proxy will use
    witness = WitnessProcess(directory, verifier_key(ORIGIN, log_signer.public_key)).start()
    ledger_url = "sqlite:///" + str(directory / "ledger.db")
    ledger = {"url": ledger_url, "checkpoint_every_entries": 1, "checkpoint_interval_seconds": 0.3,
              "witnesses": [{"url": witness.url, "key": witness.vkey, "timeout_seconds": 5}]}
    proxy = start_proxy(directory, stub.url, ledger_url, overrides={"ledger": ledger})
    yield proxy, witness, log_signer, directory
    stop_proxy(proxy)
    witness.stop()


def chat(proxy, text: str) -> None:
    client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0)
    client.chat.completions.create(model="demo", messages=[{"role": "user", "content": text}])


def current_size(proxy) -> int:
    """The latest checkpoint's tree size (waits up to 20 s for the first one)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(proxy.url + "/v1/ledger/checkpoint", timeout=5) as response:
                return parse_checkpoint(response.read().decode()).tree_size
        except urllib.error.HTTPError:
            time.sleep(0.2)
    raise AssertionError("no checkpoint published")


def cosigned_checkpoint(proxy, at_least: int, timeout: float = 20) -> str:
    """Poll GET /v1/ledger/checkpoint until it covers ``at_least`` leaves and carries the witness's line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(proxy.url + "/v1/ledger/checkpoint", timeout=5) as response:
                note = response.read().decode()
            if parse_checkpoint(note).tree_size >= at_least and f"\u2014 {NAME} " in note:
                return note
        except urllib.error.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no cosigned checkpoint of >= {at_least} leaves:\n{proxy.log()[-3000:]}")


def test_checkpoints_are_cosigned_and_verified(setup, tmp_path):
    proxy, witness, _, _ = setup
    chat(proxy, "Hello there.")
    first = cosigned_checkpoint(proxy, 1)
    chat(proxy, "Hello again.")
    chat(proxy, "And once more.")
    note = cosigned_checkpoint(proxy, parse_checkpoint(first).tree_size + 1)  # grew: a proof from the old size
    name, _, key = parse_verifier_key(witness.vkey)
    assert verify_cosignatures(note, {name: key}, 1) == []
    state = json.loads(witness.state.read_text())
    assert state["logs"][ORIGIN]["size"] >= parse_checkpoint(note).tree_size
    assert oct(witness.state.stat().st_mode & 0o777) == "0o600"

    saved = tmp_path / "checkpoint.txt"
    saved.write_text(note)
    keys_url = proxy.url + "/v1/keys"
    ok = sonate("verify", str(saved), "--keys-url", keys_url, "--witness-key", witness.vkey)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    ledger = sonate("verify", "--ledger", proxy.ledger_url, "--trusted-checkpoint", str(saved), "--keys-url",
                    keys_url, "--witness-key", witness.vkey)
    assert ledger.returncode == 0, ledger.stdout + ledger.stderr

    line = next(line for line in note.splitlines() if line.startswith(f"\u2014 {NAME} "))
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    blob[-1] ^= 1  # one bit of the signature
    forged = tmp_path / "forged.txt"
    forged.write_text(note.replace(line, f"\u2014 {NAME} " + base64.b64encode(bytes(blob)).decode()))
    bad = sonate("verify", str(forged), "--keys-url", keys_url, "--witness-key", witness.vkey)
    assert bad.returncode == 1 and "cosignature" in bad.stdout, bad.stdout + bad.stderr
    stripped = tmp_path / "stripped.txt"
    stripped.write_text(note.replace(line + "\n", ""))
    bare = sonate("verify", str(stripped), "--keys-url", keys_url, "--witness-key", witness.vkey)
    assert bare.returncode == 1 and "0 of the 1" in bare.stdout, bare.stdout + bare.stderr


def test_witness_refuses_a_rewound_or_forked_ledger(setup):
    """Checkpoints the proxy's own key signs, of a ledger rewound or rewritten, as a publisher would submit them."""
    proxy, witness, log_signer, _ = setup
    chat(proxy, "Hello before the rewrite.")
    chat(proxy, "Hello again before the rewrite.")
    time.sleep(1)  # the publisher's interval is 0.3 s
    size = parse_checkpoint(cosigned_checkpoint(proxy, current_size(proxy))).tree_size
    deadline = time.monotonic() + 10  # nothing is appended any more: the witness's state settles at `size`
    while json.loads(witness.state.read_text())["logs"][ORIGIN]["size"] != size and time.monotonic() < deadline:
        time.sleep(0.1)
    held = json.loads(witness.state.read_text())["logs"][ORIGIN]
    assert held["size"] == size >= 2

    def note(n: int, tag: bytes) -> str:
        leaves = [merkle.leaf_hash(tag + i.to_bytes(4, "big")) for i in range(n)]
        return sign_checkpoint(format_checkpoint(ORIGIN, n, merkle.root_of_leaves(leaves)), log_signer)

    # rewind (tail deleted): a smaller tree; the witness names its size, then refuses old > size
    status, content_type, text = witness.post(format_add_checkpoint(0, [], note(size - 1, b"rewound")))
    assert (status, content_type, text) == (409, "text/x.tlog.size", f"{size}\n")
    assert witness.post(format_add_checkpoint(size, [], note(size - 1, b"rewound")))[0] == 400
    # fork at the same size (history rewritten, nothing added)
    assert witness.post(format_add_checkpoint(size, [], note(size, b"forked")))[:2] == (409, "text/x.tlog.size")
    # fork at a larger size: no consistency proof from the witness's root exists
    forged_proof = [bytes([7]) * 32] * 3
    assert witness.post(format_add_checkpoint(size, forged_proof, note(size + 3, b"forked")))[0] == 422
    # a checkpoint not signed by the log's key
    impostor = sign_checkpoint(format_checkpoint(ORIGIN, size + 1, bytes(32)), Signer.generate())
    assert witness.post(format_add_checkpoint(size, [], impostor))[0] == 403
    # nothing of that moved the witness, and it remembers across a restart
    witness.stop()
    witness.start()
    assert json.loads(witness.state.read_text())["logs"][ORIGIN] == held
    assert witness.post(format_add_checkpoint(0, [], note(size, b"forked")))[:3] == (409, "text/x.tlog.size",
                                                                                      f"{size}\n")
