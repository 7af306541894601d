"""Policy sets per key and per team, end to end: the official openai client against the real proxy
(real models, SQLite ledger), the stub provider recording what the model saw.

The config is the example of docs/operations.md "Policy sets and hot reload": the support team's
set turns Compliance off and makes Privacy strict (output stage too, context rule off), the
analytics key's set keeps Privacy's placeholders in the answer and refuses content parts no
detector reads (images, audio, file data). Same prompt, different keys →
different actions, and every receipt names its set and the policy version. The file watch is on
(``policy_watch_seconds``): moving a key to another set in config.yaml takes effect without a restart.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from proxy.receipts.signing import load_public_keys
from proxy.receipts.verify import verify_receipt
from tests.support.ledger import sqlite_url
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, RunningProxy, start_proxy, stop_proxy
from tests.support.stub_upstream import StubUpstream

SUPPORT_KEY = "sk-test-support-0011-padded-to-32-chars"
ANALYTICS_KEY = "sk-test-analytics-0012-padded-to-32-ch"
LEGAL = "Can I sue my landlord for keeping my security deposit, and which court should I file in?"
POLICY_SETS = {
    "support": {"description": "Support desk: regulated questions answered, personal data masked strictly.",
                "policies": {"compliance.regulated": {"enabled": False},
                             "privacy.pii": {"stages": ["input", "output"],
                                             "detector": {"score_threshold": 0.3, "context": {"enabled": False}}}}},
    "analytics": {"policies": {"privacy.pii": {"restore_in_answer": False},
                               "safety.harm": {"unreadable_parts": "refuse"}}},
}
OVERRIDES = {"policy_sets": POLICY_SETS, "teams": {"support": {"policy_set": "support"}},
             "policy_watch_seconds": 0.5}
EXTRA_KEYS = [{"key": SUPPORT_KEY, "actor": "support-desk", "role": "client", "team": "support"},
              {"key": ANALYTICS_KEY, "actor": "analytics-batch", "role": "client", "policy_set": "analytics"}]


@pytest.fixture(scope="module")
def proxy_sets(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    directory = tmp_path_factory.mktemp("policy-sets")
    running = start_proxy(directory, stub.url, sqlite_url(directory / "ledger.db"), extra_keys=EXTRA_KEYS,
                          overrides=OVERRIDES)
    yield running
    stop_proxy(running)


def call(proxy: RunningProxy, method: str, path: str, key: str | None) -> tuple[int, dict]:
    req = urllib.request.Request(proxy.url + path, method=method, data=b"" if method == "POST" else None)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def chat(proxy: RunningProxy, key: str, text: str):
    client = openai.OpenAI(base_url=proxy.v1, api_key=key, max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": text}])
    return raw, raw.parse()


def receipt(proxy: RunningProxy, receipt_id: str) -> dict:
    status, body = call(proxy, "GET", f"/v1/receipts/{receipt_id}", ADMIN_KEY)
    assert status == 200, body
    return body


def active_version(proxy: RunningProxy) -> str:
    status, body = call(proxy, "GET", "/v1/admin/policies", ADMIN_KEY)
    assert status == 200, body
    return body["policy_version"]


def test_two_keys_get_different_actions_on_the_same_prompt_and_receipts_name_their_sets(proxy_sets, upstream):
    version = active_version(proxy_sets)
    escalated, _ = chat(proxy_sets, CLIENT_KEY, LEGAL)
    assert escalated.headers["x-sonate-guardrail-action"] == "escalate" and upstream.received() == []
    answered, completion = chat(proxy_sets, SUPPORT_KEY, LEGAL)
    assert answered.headers["x-sonate-guardrail-action"] == "allow"
    assert upstream.received()[0]["messages"][0]["content"] == LEGAL  # Compliance is off for the support team
    assert completion.choices[0].message.content == f"Stub answer: {LEGAL}"
    _, keys_doc = call(proxy_sets, "GET", "/v1/keys", None)
    keys = load_public_keys(keys_doc)
    for raw, actor, policy_set in ((escalated, "alice", "default"), (answered, "support-desk", "support")):
        r = receipt(proxy_sets, raw.headers["x-sonate-receipt-id"])
        assert (r["actor"], r["evidence"]["policy_set"], r["evidence"]["policy_version"]) == (actor, policy_set, version)
        assert verify_receipt(r, keys) == []  # the signed evidence verifies like any other


def test_strict_privacy_masks_what_the_default_leaves(proxy_sets, upstream):
    text = "Who was Ada Lovelace and what did she invent?"  # a general question: the default's context rule allows it
    raw, _ = chat(proxy_sets, CLIENT_KEY, text)
    assert raw.headers["x-sonate-guardrail-action"] == "allow"
    raw, completion = chat(proxy_sets, SUPPORT_KEY, text)
    assert raw.headers["x-sonate-guardrail-action"] == "mask"
    seen = upstream.received()[1]["messages"][0]["content"]
    assert "Ada Lovelace" not in seen and "<PERSON_1>" in seen
    assert completion.choices[0].message.content == f"Stub answer: {text}"  # restored for the client
    r = receipt(proxy_sets, raw.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["evidence"]["policy_set"]) == ("privacy.pii", "support")


def test_the_analytics_key_keeps_the_placeholders_in_the_answer(proxy_sets, upstream):
    text = "Hi, I'm John Smith. Email me at john.smith@example.com about my order."
    _, restored = chat(proxy_sets, CLIENT_KEY, text)
    raw, kept = chat(proxy_sets, ANALYTICS_KEY, text)
    assert restored.choices[0].message.content == f"Stub answer: {text}"
    answer = kept.choices[0].message.content
    assert "john.smith@example.com" not in answer and "<EMAIL_ADDRESS_1>" in answer
    assert receipt(proxy_sets, raw.headers["x-sonate-receipt-id"])["evidence"]["policy_set"] == "analytics"


def test_an_image_is_forwarded_by_default_and_refused_where_the_set_refuses_unreadable_parts(proxy_sets, upstream):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What does this chart show?"}, image]}]
    raws = {}
    for key in (CLIENT_KEY, ANALYTICS_KEY):
        client = openai.OpenAI(base_url=proxy_sets.v1, api_key=key, max_retries=0, timeout=60)
        raws[key] = client.chat.completions.with_raw_response.create(model="stub", messages=messages)
    assert raws[CLIENT_KEY].headers["x-sonate-guardrail-action"] == "allow"
    (sent,) = upstream.received()  # the default set forwarded it; the analytics set forwarded nothing
    assert sent["messages"][0]["content"][1] == image
    refused = raws[ANALYTICS_KEY]
    assert refused.headers["x-sonate-guardrail-action"] == "refuse"
    assert refused.parse().choices[0].finish_reason == "content_filter"
    r = receipt(proxy_sets, refused.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["guardrail_action"], r["evidence"]["policy_set"]) == ("safety.harm", "refuse", "analytics")
    assert r["evidence"]["unreadable_parts"] == {"image_url": 1}
    assert r["evidence"]["categories"] == ["unreadable_content"]


def test_the_admin_api_shows_the_active_version_sets_and_assignments(proxy_sets):
    status, body = call(proxy_sets, "GET", "/v1/admin/policies", ADMIN_KEY)
    assert status == 200
    assert body["policy_version"].startswith("sha256:") and body["loaded_at"].endswith("Z")
    assert set(body["policy_sets"]) == {"default", "support", "analytics"}
    support = {p["id"] for p in body["policy_sets"]["support"]["policies"]}
    assert support == {"privacy.pii", "safety.harm", "continuity.budget"}
    assert body["teams"] == {"support": "support"}
    assert body["assignments"]["support-desk"] == "support" and body["assignments"]["analytics-batch"] == "analytics"
    assert CLIENT_KEY not in json.dumps(body)
    assert call(proxy_sets, "GET", "/v1/admin/policies", CLIENT_KEY)[0] == 403
    assert call(proxy_sets, "POST", "/v1/admin/policies/reload", CLIENT_KEY)[0] == 403


def wait_for_version(proxy: RunningProxy, not_version: str, timeout: float = 120) -> str:
    """Poll ``GET /v1/admin/policies`` until the version differs from ``not_version``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = active_version(proxy)
        if version != not_version:
            return version
        time.sleep(0.3)
    raise AssertionError(f"the policy version stayed {not_version}:\n{proxy.log()[-3000:]}")


def test_the_file_watch_applies_a_config_edit_without_a_restart(proxy_sets, upstream):
    path = Path(proxy_sets.config_path)
    original = path.read_text()
    before = active_version(proxy_sets)
    edited = yaml.safe_load(original)
    for key in edited["auth"]["keys"]:
        if key["actor"] == "analytics-batch":
            key["policy_set"] = "support"  # the analytics key moves to the support set
    try:
        path.write_text(yaml.safe_dump(edited, sort_keys=False))
        after = wait_for_version(proxy_sets, before)
        raw, _ = chat(proxy_sets, ANALYTICS_KEY, LEGAL)
        assert raw.headers["x-sonate-guardrail-action"] == "allow"
        r = receipt(proxy_sets, raw.headers["x-sonate-receipt-id"])
        assert (r["evidence"]["policy_set"], r["evidence"]["policy_version"]) == ("support", after)
    finally:
        path.write_text(original)
        wait_for_version(proxy_sets, after if "after" in locals() else "")
    assert active_version(proxy_sets) == before  # the same content hashes to the same version
