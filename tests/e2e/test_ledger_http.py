"""The transparency-log API of a real proxy over a SQLite ledger: background checkpoints, inclusion
and consistency proofs, offline bundles verified with no server (Python and `sonate verify`),
`sonate ledger bundle`, and OpenAI-format errors."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from proxy.receipts.bundle import verify_bundle
from proxy.receipts.proofs import verify_consistency_proof, verify_inclusion_proof
from proxy.receipts.signing import load_public_keys
from proxy.tlog.checkpoint import parse_checkpoint, verify_checkpoint
from tests.support.forked import sonate
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, OTHER_KEY, start_proxy, stop_proxy

ORIGIN = "sonate-trust-proxy/ledger"


@pytest.fixture(scope="module")
def sqlite_proxy(tmp_path_factory: pytest.TempPathFactory, stub):
    directory = tmp_path_factory.mktemp("ledger-http")
    url = "sqlite:///" + str(directory / "ledger.db")
    # the publisher's checkpoint a second after new entries, not the default 10 s the tests would wait for
    running = start_proxy(directory, stub.url, url, overrides={"ledger": {"url": url, "checkpoint_interval_seconds": 1}})
    yield running
    stop_proxy(running)


def get(proxy, path: str, key: str | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(proxy.url + path)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def get_json(proxy, path: str, key: str | None = None) -> dict:
    status, _, body = get(proxy, path, key)
    assert status == 200, body
    return json.loads(body)


def chat(proxy, text: str, key: str = CLIENT_KEY) -> str:
    client = openai.OpenAI(base_url=proxy.v1, api_key=key, max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(model="demo", messages=[{"role": "user", "content": text}])
    return raw.headers["x-sonate-receipt-id"]


@pytest.fixture(scope="module")
def keys(sqlite_proxy) -> dict[str, bytes]:
    return load_public_keys(get_json(sqlite_proxy, "/v1/keys"))


@pytest.fixture(scope="module")
def receipts(sqlite_proxy) -> list[dict]:
    ids = [chat(sqlite_proxy, f"What is {n} + {n}? Answer briefly.") for n in range(4)]
    return [get_json(sqlite_proxy, f"/v1/receipts/{rid}", CLIENT_KEY) for rid in ids]


def wait_for_checkpoint(proxy, size: int, timeout: float = 20.0) -> str:
    """The latest checkpoint once it covers ``size`` leaves (published by the background task)."""
    deadline = time.monotonic() + timeout
    while True:
        status, headers, body = get(proxy, "/v1/ledger/checkpoint")
        if status == 200 and parse_checkpoint(body.decode()).tree_size >= size:
            assert headers["Content-Type"].startswith("text/plain")
            return body.decode()
        assert time.monotonic() < deadline, f"no checkpoint covering {size} leaves: {status} {body[:200]!r}"
        time.sleep(0.3)


def settled_checkpoint(proxy, quiet: float = 2.5, timeout: float = 30.0) -> str:
    """The latest checkpoint once the publisher has caught up with the ledger: the same note for
    ``quiet`` seconds (more than two of the fixture's 1 s checkpoint intervals). A receipt of an
    earlier test can leave a newer checkpoint a second away; after this, a command reading the
    stored checkpoint and a GET of it see the same note."""
    deadline = time.monotonic() + timeout
    note, since = wait_for_checkpoint(proxy, 1), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the checkpoint kept changing"
        time.sleep(0.3)
        latest = get(proxy, "/v1/ledger/checkpoint")[2].decode()
        if latest != note:
            note, since = latest, time.monotonic()
    return note


def test_background_checkpoint_and_inclusion_proofs(sqlite_proxy, receipts, keys) -> None:
    top = max(r["ledger_height"] for r in receipts) + 1
    note = wait_for_checkpoint(sqlite_proxy, top)  # no bundle asked yet: the publisher did this
    assert verify_checkpoint(note, keys, ORIGIN) == []
    checkpoint = parse_checkpoint(note)
    status, headers, stored = get(sqlite_proxy, f"/v1/ledger/checkpoint?tree_size={checkpoint.tree_size}")
    assert status == 200 and stored.decode() == note and "immutable" in headers["Cache-Control"]
    for receipt in receipts:
        proof = get_json(sqlite_proxy, f"/v1/ledger/proof/inclusion?height={receipt['ledger_height']}")
        assert set(proof) == {"leaf_index", "tree_size", "leaf_hash", "hashes"}
        assert proof["tree_size"] == checkpoint.tree_size  # default: the latest checkpoint
        assert verify_inclusion_proof(proof, receipt, note, keys, ORIGIN) == []
        other = next(r for r in receipts if r["receipt_id"] != receipt["receipt_id"])
        assert [f.check for f in verify_inclusion_proof(proof, other, note, keys)] == ["inclusion"] * 3


def test_consistency_between_two_checkpoints(sqlite_proxy, receipts, keys) -> None:
    old = wait_for_checkpoint(sqlite_proxy, max(r["ledger_height"] for r in receipts) + 1)
    newer_id = chat(sqlite_proxy, "Name a prime number.")
    bundle = get_json(sqlite_proxy, f"/v1/receipts/{newer_id}?bundle=1", CLIENT_KEY)  # publishes on demand
    new = bundle["checkpoint"]
    first, second = parse_checkpoint(old).tree_size, parse_checkpoint(new).tree_size
    assert second > first
    proof = get_json(sqlite_proxy, f"/v1/ledger/proof/consistency?from={first}&to={second}")
    assert set(proof) == {"first", "second", "hashes"} and (proof["first"], proof["second"]) == (first, second)
    assert verify_consistency_proof(proof, old, new, keys, ORIGIN) == []
    assert get_json(sqlite_proxy, f"/v1/ledger/proof/consistency?from={first}")["second"] >= second
    assert [f.check for f in verify_consistency_proof(proof, new, old, keys)] == ["consistency"]
    tampered = {**proof, "hashes": proof["hashes"][::-1] if len(proof["hashes"]) > 1 else ["A" * 43 + "="]}
    assert [f.check for f in verify_consistency_proof(tampered, old, new, keys)] == ["consistency"]


def test_bundle_verifies_offline_and_with_sonate_verify(sqlite_proxy, receipts, keys, tmp_path: Path) -> None:
    receipt = receipts[1]
    bundle = get_json(sqlite_proxy, f"/v1/receipts/{receipt['receipt_id']}?bundle=1", CLIENT_KEY)
    assert set(bundle) == {"bundle_version", "receipt", "inclusion_proof", "checkpoint", "public_keys"}
    assert bundle["bundle_version"] == 1 and bundle["receipt"] == receipt
    assert bundle["inclusion_proof"]["leaf_index"] == receipt["ledger_height"]
    assert verify_bundle(bundle) == []
    assert verify_bundle(bundle, keys, ORIGIN) == []
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle))
    done = sonate("verify", str(path), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: 1 bundle" in done.stdout

    forged = json.loads(json.dumps(bundle))
    forged["receipt"]["guardrail_action"] = "refuse"
    forged["inclusion_proof"]["hashes"] = forged["inclusion_proof"]["hashes"][:-1]
    path.write_text(json.dumps(forged))
    done = sonate("verify", str(path), timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"height {receipt['ledger_height']} ({receipt['receipt_id']}): signature:" in done.stdout
    assert "inclusion proof (leaf" in done.stdout and ": inclusion:" in done.stdout
    # bundles are as private as receipts: another client gets a 404, a bad flag a 400
    assert get(sqlite_proxy, f"/v1/receipts/{receipt['receipt_id']}?bundle=1", OTHER_KEY)[0] == 404
    status, _, body = get(sqlite_proxy, f"/v1/receipts/{receipt['receipt_id']}?bundle=yes", CLIENT_KEY)
    assert status == 400 and json.loads(body)["error"]["param"] == "bundle"


def test_sonate_ledger_bundle_and_checkpoint_commands(sqlite_proxy, receipts, tmp_path: Path) -> None:
    out = tmp_path / "cli-bundle.json"
    config = str(sqlite_proxy.config_path)
    env = {**os.environ, "SONATE_TEST_ADMIN_KEY": ADMIN_KEY}  # the test config references it
    done = sonate("ledger", "bundle", receipts[2]["receipt_id"],
                  "--config", config, "-o", str(out), env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    bundle = json.loads(out.read_text())
    assert bundle["receipt"] == receipts[2] and verify_bundle(bundle) == []
    done = sonate("verify", str(out), "--keys-url",
                  sqlite_proxy.v1 + "/keys", "--origin", ORIGIN, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    note = settled_checkpoint(sqlite_proxy)
    done = sonate("ledger", "checkpoint", "--config", config, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout == note == get(sqlite_proxy, "/v1/ledger/checkpoint")[2].decode()
    done = sonate("ledger", "bundle", "rcpt_" + "0" * 32, "--config", config, env=env, timeout=120)
    assert done.returncode == 2 and "no receipt with id" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("path, status, param", [
    ("/v1/ledger/proof/inclusion", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=abc", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=-1", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=0&tree_size=0", 400, "tree_size"),
    ("/v1/ledger/proof/inclusion?height=0&tree_size=99999999", 400, "tree_size"),
    ("/v1/ledger/proof/inclusion?height=3&tree_size=3", 400, "height"),
    ("/v1/ledger/proof/consistency", 400, "from"),
    ("/v1/ledger/proof/consistency?from=0&to=2", 400, "from"),
    ("/v1/ledger/proof/consistency?from=3&to=2", 400, "from"),
    ("/v1/ledger/proof/consistency?from=1&to=99999999", 400, "to"),
    ("/v1/ledger/checkpoint?tree_size=x", 400, "tree_size"),
    ("/v1/ledger/checkpoint?tree_size=99999999", 404, "tree_size"),
    # non-ASCII digits: str.isdigit() accepts them, int() refuses "²" and "①" (was a 500) and reads "١" as 1
    ("/v1/ledger/proof/inclusion?height=%C2%B2", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=%D9%A1", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=0&tree_size=%E2%91%A0", 400, "tree_size"),
    ("/v1/ledger/proof/consistency?from=%C2%B3", 400, "from"),
    ("/v1/ledger/proof/consistency?from=1&to=%EF%BC%92", 400, "to"),
    ("/v1/ledger/checkpoint?tree_size=%C2%B9", 400, "tree_size"),
    ("/v1/ledger/proof/inclusion?height=%2B1", 400, "height"),
    ("/v1/ledger/proof/inclusion?height=1%0A", 400, "height"),
])
def test_bad_parameters_are_openai_errors(sqlite_proxy, receipts, path: str, status: int, param: str) -> None:
    got, headers, body = get(sqlite_proxy, path)  # public endpoints: no key needed
    assert got == status, body
    error = json.loads(body)["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"


def test_proofs_are_public_and_the_metrics_count_checkpoints(sqlite_proxy, receipts) -> None:
    wait_for_checkpoint(sqlite_proxy, 1)
    status, _, _ = get(sqlite_proxy, "/v1/ledger/proof/inclusion?height=0")
    assert status == 200
    assert get(sqlite_proxy, "/metrics")[0] == 401  # /metrics needs a key by default
    # This process's publisher counts the checkpoints it publishes; another test may have published
    # the current size already (a bundle request or `sonate ledger checkpoint`), so grow the tree
    # and wait for the publisher's own checkpoint of the new size.
    chat(sqlite_proxy, "One more question for a new tree size: what is 7 + 7?")
    deadline = time.monotonic() + 30
    while True:
        metrics = get(sqlite_proxy, "/metrics", ADMIN_KEY)[2].decode()
        published = [line for line in metrics.splitlines()
                     if line.startswith("sonate_ledger_checkpoints_published_total")]
        if published and float(published[0].split()[-1]) >= 1:
            break
        assert time.monotonic() < deadline, f"no checkpoint published by the proxy: {published}"
        time.sleep(0.5)
