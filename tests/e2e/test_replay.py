"""The main job on real input: examples/replay.py over public samples, then ledger verification.

A proxy with a SQLite ledger answers prompts from XSTest, presidio's synthetic PII set and
TruthfulQA (tests/data, licensed samples) grouped into multi-turn conversations; the replay's
outcome table must show refusals, masks, escalations and summarizations, `sonate verify` must
pass on the ledger and fail on a tampered copy.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys

import pytest
import yaml

from tests.support.forked import sonate
from tests.support.proxy import CLIENT_KEY, DATA, ROOT, start_proxy, stop_proxy


@pytest.fixture(scope="module")
def replay_proxy(tmp_path_factory, stub):
    directory = tmp_path_factory.mktemp("replay")
    policies = directory / "policies"
    shutil.copytree(ROOT / "policies", policies)
    continuity = yaml.safe_load((policies / "continuity.yaml").read_text())
    continuity["max_tokens"] = 150  # a user editing the budget, so short prompts reach it
    (policies / "continuity.yaml").write_text(yaml.safe_dump(continuity))
    ledger = directory / "ledger.db"
    running = start_proxy(directory, stub.url, f"sqlite:///{ledger}", policies=policies)
    yield running, ledger
    stop_proxy(running)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def table(output: str) -> dict[tuple[str, str], int]:
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].isdigit():
            rows[(cells[0], cells[1])] = int(cells[2])
    return rows


def test_replay_over_real_prompts_then_verify_and_tamper(replay_proxy, tmp_path):
    proxy, ledger = replay_proxy
    done = run("examples/replay.py",
               f"{DATA}/xstest/xstest_sample.csv:prompt", f"{DATA}/presidio/synth_sample.json:full_text:6",
               f"{DATA}/truthfulqa/truthfulqa_sample.csv:Question", "--model", "demo", "--base-url", proxy.v1,
               "--api-key", CLIENT_KEY, "--ledger", f"sqlite:///{ledger}")
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = table(done.stdout)
    actions = {action for _, action in outcomes}
    assert {"refuse", "mask", "escalate", "summarize"} <= actions, outcomes
    assert sum(outcomes.values()) == 170  # 60 XSTest + 50 presidio + 60 TruthfulQA
    assert outcomes[("safety.harm", "refuse")] >= 3
    assert outcomes[("compliance.regulated", "escalate")] >= 5

    count = sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
    assert count >= 170  # at least one receipt per request

    tampered = tmp_path / "tampered.db"
    db = sqlite3.connect(tampered)
    with sqlite3.connect(ledger) as source:  # the backup API copies the WAL's content too
        source.backup(db)
    height, body = db.execute("SELECT height, body FROM receipts WHERE height = 7").fetchone()
    receipt = json.loads(body)
    receipt["guardrail_action"] = "allow" if receipt["guardrail_action"] != "allow" else "refuse"
    db.execute("UPDATE receipts SET body = ? WHERE height = ?", (json.dumps(receipt), height))
    db.commit()
    db.close()
    bad = sonate("verify", "--ledger", f"sqlite:///{tampered}", "--keys", str(proxy.key_file))
    assert bad.returncode == 1
    assert "height 7" in bad.stdout and "signature" in bad.stdout
    assert "height 8" in bad.stdout and "prev_hash" in bad.stdout
