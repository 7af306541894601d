"""An escalation ends in an answer, through the real proxy and the real SDKs.

A regulated request escalated through chat completions, Responses or Messages is decided by an
admin (approve: the model answers the masked request; answer; edit a kept draft; reject with a
reason); the requester reads the outcome at ``GET /v1/escalations/{id}`` in its API's wire format,
with Privacy's placeholders restored only when it presents the key it received with the notice.
The store keeps placeholders only; every step is a receipt chained to the escalation receipt and
the ledger verifies. Only the provider is a stub.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from proxy.primitives.canonical import json_hash
from proxy.server.flow.review.sealed_mapping import KEY_HEADER, seal_mapping
from proxy.storage import open_store
from tests.support.forked import sonate
from tests.support.prompts import TOXIC
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, OTHER_KEY
from tests.support.stub_upstream import Reply

NAME, EMAIL = "John Smith", "john.smith@example.com"
LEGAL = (f"Can I sue my landlord for keeping my security deposit, and which court should I file in? "
         f"I am {NAME}, write to {EMAIL}.")


@pytest.fixture()
def client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


def call(proxy, method: str, path: str, body: dict | None = None, key: str = ADMIN_KEY,
         headers: dict | None = None) -> tuple[int, dict, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(proxy.url + path, data=data, method=method, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=90) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def resolve(proxy, case_id: str, body: dict) -> tuple[int, dict, dict]:
    return call(proxy, "POST", f"/v1/admin/escalations/{case_id}/resolve", body)


def outcome(client: openai.OpenAI, case_id: str, key: str | None = None, wait: int | None = None) -> dict:
    """The requester's view of its case, read with the openai SDK's own client."""
    query = f"?wait={wait}" if wait is not None else ""
    return client.get(f"/escalations/{case_id}{query}", cast_to=object,
                      options={"headers": {KEY_HEADER: key}} if key else {})


def stored(proxy, case_id: str) -> dict:
    """The case exactly as the store holds it (what an operator with database access reads)."""
    async def read() -> dict:
        store = open_store(proxy.ledger_url)
        try:
            return await store.get_item("escalations", case_id)
        finally:
            await store.close()
    return asyncio.run(read())


def receipt(proxy, receipt_id: str) -> dict:
    status, _, body = call(proxy, "GET", f"/v1/receipts/{receipt_id}")
    assert status == 200, body
    return body


def steps_of(proxy, case: dict) -> list[dict]:
    """The case's step receipts, checking each links to the one before it (the first to the
    escalation receipt)."""
    previous = case["receipt_id"]
    receipts = []
    for step in case["steps"]:
        r = receipt(proxy, step["receipt_id"])
        assert r["guardrail_action"] == "resolve" and r["evidence"]["step"] == step["step"]
        assert r["evidence"]["escalation_id"] == case["id"]
        assert r["evidence"]["escalation_receipt_id"] == case["receipt_id"]
        assert r["evidence"]["previous_receipt_id"] == previous
        previous = r["receipt_id"]
        receipts.append(r)
    return receipts


def assert_no_personal_data(value) -> None:
    text = json.dumps(value)
    assert NAME not in text and EMAIL not in text


def test_approve_answers_a_chat_escalation_restored_only_with_the_key(proxy, client, upstream) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id, key = raw.headers["x-sonate-escalation-id"], raw.headers[KEY_HEADER]
    assert raw.headers["x-sonate-guardrail-action"] == "escalate" and upstream.received() == []
    pending = outcome(client, case_id, key)
    assert pending["status"] == "pending" and pending["response"] is None
    assert_no_personal_data(stored(proxy, case_id))

    status, headers, case = resolve(proxy, case_id, {"decision": "approve", "note": "general information"})
    assert status == 200 and case["status"] == "resolved"
    sent = json.dumps(upstream.received()[-1]["messages"])
    assert "<PERSON_1>" in sent and "<EMAIL_ADDRESS_1>" in sent
    assert_no_personal_data(sent)

    restored = ChatCompletion.model_validate(outcome(client, case_id, key)["response"])
    answer = restored.choices[0].message.content
    assert answer.startswith("Stub answer: Can I sue my landlord") and NAME in answer and EMAIL in answer
    masked = ChatCompletion.model_validate(outcome(client, case_id)["response"]).choices[0].message.content
    assert "<PERSON_1>" in masked and "<EMAIL_ADDRESS_1>" in masked and NAME not in masked
    assert_no_personal_data(stored(proxy, case_id))

    kept = stored(proxy, case_id)
    receipts = steps_of(proxy, kept)
    assert [r["evidence"]["step"] for r in receipts] == ["approve", "model_call", "release"]
    assert receipts[1]["provider"] != "human" and headers["x-sonate-receipt-id"] == receipts[-1]["receipt_id"]
    assert receipts[1]["inputs_hash"] == json_hash({"messages": kept["messages"], "params": kept["params"]})
    assert receipts[1]["outputs_hash"] == receipts[2]["inputs_hash"] == receipts[2]["outputs_hash"] \
        == json_hash(kept["answer"])


def test_an_approved_answer_is_screened_by_the_output_policies(proxy, client, upstream) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id = raw.headers["x-sonate-escalation-id"]
    upstream.queue(Reply(text="".join(TOXIC)))
    status, _, case = resolve(proxy, case_id, {"decision": "approve"})
    assert status == 200 and case["status"] == "resolved"
    completion = ChatCompletion.model_validate(outcome(client, case_id)["response"])
    assert "idiot" not in completion.choices[0].message.content and completion.choices[0].finish_reason == "content_filter"
    model_call = steps_of(proxy, stored(proxy, case_id))[1]
    assert [d["action"] for d in model_call["evidence"]["output_decisions"]] == ["refuse"]


def test_a_wrong_key_is_refused_and_other_clients_do_not_see_the_case(proxy, client) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id = raw.headers["x-sonate-escalation-id"]
    for bad in (seal_mapping({})[0], "not a key!", "c2hvcnQ"):
        status, _, error = call(proxy, "GET", f"/v1/escalations/{case_id}", key=CLIENT_KEY, headers={KEY_HEADER: bad})
        assert status == 403 and error["error"]["code"] == "invalid_escalation_key"
    status, _, error = call(proxy, "GET", f"/v1/escalations/{case_id}", key=OTHER_KEY,
                            headers={KEY_HEADER: raw.headers[KEY_HEADER]})
    assert status == 404 and error["error"]["code"] == "not_found"


def test_reviewer_answers_a_responses_escalation(proxy, client, upstream) -> None:
    raw = client.responses.with_raw_response.create(model="stub", input=LEGAL)
    case_id, key = raw.headers["x-sonate-escalation-id"], raw.headers[KEY_HEADER]
    text = "Dear <PERSON_1>, a small-claims court hears deposit disputes; we also wrote to <EMAIL_ADDRESS_1>."
    status, _, case = resolve(proxy, case_id, {"decision": "answer", "content": text, "note": "standard reply"})
    assert status == 200 and case["status"] == "resolved" and upstream.received() == []

    response = Response.model_validate(outcome(client, case_id, key)["response"])
    assert response.output_text == text.replace("<PERSON_1>", NAME).replace("<EMAIL_ADDRESS_1>", EMAIL)
    assert Response.model_validate(outcome(client, case_id)["response"]).output_text == text
    receipts = steps_of(proxy, stored(proxy, case_id))
    assert [r["evidence"]["step"] for r in receipts] == ["answer", "release"]
    assert all(r["provider"] == "human" for r in receipts)


def test_reviewer_edits_the_model_draft_of_a_messages_escalation(proxy, upstream) -> None:
    anthropic_client = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=60)
    raw = anthropic_client.messages.with_raw_response.create(
        model="stub", max_tokens=64, messages=[{"role": "user", "content": LEGAL}])
    case_id, key = raw.headers["x-sonate-escalation-id"], raw.headers[KEY_HEADER]
    upstream.queue(Reply(text="Draft for <PERSON_1>: sue in the county court."))
    status, _, case = resolve(proxy, case_id, {"decision": "approve", "release": False})
    assert status == 200 and case["status"] == "drafted"
    assert case["draft"]["choices"][0]["message"]["content"] == "Draft for <PERSON_1>: sue in the county court."
    seen = call(proxy, "GET", f"/v1/escalations/{case_id}", key=CLIENT_KEY, headers={KEY_HEADER: key})[2]
    assert seen["status"] == "drafted" and seen["response"] is None and "draft" not in seen

    edited = "For <PERSON_1>: a small-claims court hears deposit disputes up to its limit."
    status, _, case = resolve(proxy, case_id, {"decision": "edit", "content": edited, "note": "court corrected"})
    assert status == 200 and case["status"] == "resolved"
    seen = call(proxy, "GET", f"/v1/escalations/{case_id}", key=CLIENT_KEY, headers={KEY_HEADER: key})[2]
    message = anthropic.types.Message.model_validate(seen["response"])
    assert message.content[0].text == edited.replace("<PERSON_1>", NAME) and message.stop_reason == "end_turn"
    receipts = steps_of(proxy, stored(proxy, case_id))
    assert [r["evidence"]["step"] for r in receipts] == ["approve", "model_call", "edit", "release"]
    assert_no_personal_data(stored(proxy, case_id))


def test_reject_gives_the_requester_the_reason_to_a_waiting_request(proxy, client) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id, key = raw.headers["x-sonate-escalation-id"], raw.headers[KEY_HEADER]
    waited: list[dict] = []
    waiter = threading.Thread(target=lambda: waited.append(outcome(client, case_id, key, wait=60)))
    waiter.start()
    reason = "We cannot advise on a pending lawsuit; please consult a lawyer."
    status, _, case = resolve(proxy, case_id, {"decision": "reject", "reason": reason, "note": "litigation"})
    waiter.join()
    assert status == 200 and case["status"] == "resolved" and case["resolution"]["reason"] == reason
    assert waited[0]["status"] == "resolved"
    completion = ChatCompletion.model_validate(waited[0]["response"])
    assert completion.choices[0].message.content == reason and completion.choices[0].finish_reason == "content_filter"
    receipts = steps_of(proxy, stored(proxy, case_id))
    assert [r["evidence"]["step"] for r in receipts] == ["reject"]


def test_a_failed_model_call_leaves_the_case_pending(proxy, client, upstream) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id = raw.headers["x-sonate-escalation-id"]
    upstream.queue(Reply(status=500))
    status, _, error = resolve(proxy, case_id, {"decision": "approve"})
    assert status >= 500 and "error" in error
    assert stored(proxy, case_id)["status"] == "pending" and stored(proxy, case_id)["steps"] == []
    status, _, case = resolve(proxy, case_id, {"decision": "approve"})
    assert status == 200 and case["status"] == "resolved"


@pytest.mark.parametrize(("body", "param"), [
    ({"decision": "forward"}, "decision"),
    ({"decision": "answer"}, "content"),
    ({"decision": "edit"}, "content"),
    ({"decision": "approve", "content": "x"}, "content"),
    ({"decision": "answer", "content": "x", "reason": "y"}, "reason"),
    ({"decision": "answer", "content": ""}, "content"),
    ({"decision": "approve", "release": "no"}, "release"),
    ({"decision": "approve", "extra": 1}, "extra"),
])
def test_bad_decisions_are_400_naming_the_field(proxy, client, body, param) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    status, _, error = resolve(proxy, raw.headers["x-sonate-escalation-id"], body)
    assert status == 400 and error["error"]["param"] == param, error


def test_decisions_out_of_turn_are_409_and_bad_waits_400(proxy, client) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id = raw.headers["x-sonate-escalation-id"]
    for body in ({"decision": "edit", "content": "x"}, {"decision": "release"}):
        status, _, error = resolve(proxy, case_id, body)
        assert status == 409 and error["error"]["code"] == "conflict"
    assert resolve(proxy, case_id, {"decision": "reject"})[0] == 200
    for body in ({"decision": "approve"}, {"decision": "reject"}, {"decision": "answer", "content": "x"}):
        assert resolve(proxy, case_id, body)[0] == 409
    reason = outcome(client, case_id)["response"]["choices"][0]["message"]["content"]
    assert reason == "A reviewer declined to answer this request."
    for wait in ("abc", "61", "-1", "nan", "%EF%BC%91"):  # (the last: a full-width 1)
        status, _, error = call(proxy, "GET", f"/v1/escalations/{case_id}?wait={wait}", key=CLIENT_KEY)
        assert status == 400 and error["error"]["param"] == "wait"
    assert resolve(proxy, "esc_unknown", {"decision": "approve"})[0] == 404
    assert call(proxy, "GET", "/v1/admin/escalations?status=drafted")[0] == 200
    assert call(proxy, "POST", f"/v1/admin/escalations/{case_id}/resolve", {"decision": "reject"},
                key=CLIENT_KEY)[0] == 403


def test_the_ledger_and_the_case_chain_verify_with_the_cli(proxy, client, upstream) -> None:
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": LEGAL}])
    case_id = raw.headers["x-sonate-escalation-id"]
    assert resolve(proxy, case_id, {"decision": "approve", "release": False})[0] == 200
    assert resolve(proxy, case_id, {"decision": "release"})[0] == 200
    verify = ["verify", "--ledger", proxy.ledger_url, "--keys-url", proxy.v1 + "/keys"]
    done = sonate(*verify, "--case", case_id, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    done = sonate(*verify, "--case", "esc_unknown", timeout=120)
    assert done.returncode == 1 and "case esc_unknown: case-escalation" in done.stdout
