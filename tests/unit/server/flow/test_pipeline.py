"""proxy.server.flow.pipeline.Gateway driven directly: fake detectors (tests/support/detectors.py) in the
real GuardrailEngine, the real Upstream (litellm) against the stub provider over HTTP, a real
SQLite ledger signed with a fresh key, and real Metrics. No HTTP server of our own is involved.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from proxy.config import Config
from proxy.guardrails.engine import GuardrailEngine
from proxy.receipts import GENESIS_PREV_HASH, Ledger, Signer, entry_hash, open_store, verify_chain
from proxy.server.errors import Caller
from proxy.server.flow.pipeline import ChatResult, Gateway
from proxy.server.flow.upstream import Upstream
from proxy.server.flow.wire import ChatCompletionRequest
from proxy.server.telemetry.metrics import Metrics
from tests.support.detectors import POLICIES, FakeApology, FakeDetectors, count_words
from tests.support.ledger import sqlite_url
from tests.support.stub_upstream import Reply, StubUpstream

CALLER = Caller("alice", "client")


class Rig:
    """A Gateway and everything behind it; ``chat`` sends one user message (or a message list)."""

    def __init__(self, gateway: Gateway, stub: StubUpstream, signer: Signer) -> None:
        self.gateway, self.stub, self.signer = gateway, stub, signer
        self.store = gateway.ledger.store

    async def chat(self, content: str | list[dict[str, Any]], **extra: Any) -> ChatResult:
        messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
        raw = {"model": "stub", "messages": messages, **extra}
        result = await self.gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
        if result.events is not None:  # a passed-through stream: send it (its receipts are appended on the way)
            sent = [json.loads(e[6:]) async for e in result.events.events() if e.startswith(b"data: {")]
            result.body = result.events.body()
            result.chunks = [d["choices"][0]["delta"]["content"] for d in sent
                             if d["choices"] and d["choices"][0]["delta"].get("content")]
        return result

    async def receipts(self) -> list[dict[str, Any]]:
        """Every receipt in the ledger, by height."""
        head = await self.store.head()
        return [] if head is None else await self.store.range(0, head.height + 1)

    def metric(self, name: str, **labels: str) -> float:
        return self.gateway.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def rig(tmp_path: Path, upstream: StubUpstream) -> AsyncIterator[Rig]:
    config = Config(
        model_list=[{"model_name": "stub", "litellm_params": {"model": "openai/stub-model", "api_base": upstream.url,
                                                              "api_key": "sk-stub"}}],
        auth={"keys": [{"key": "sk-test-client-0001-padded-to-32-chars", "actor": "alice"}]},
        ledger={"url": sqlite_url(tmp_path / "ledger.db")},
    )
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=FakeDetectors().registry,
                             apology_detector=FakeApology())
    signer = Signer.generate()
    store = open_store(config.ledger_url)
    try:
        gateway = Gateway(config, engine, Upstream(config), Ledger(store, signer), Metrics())
        yield Rig(gateway, upstream, signer)
    finally:
        await store.close()


def content(result: ChatResult) -> str:
    return result.body["choices"][0]["message"]["content"]


def finish_reason(result: ChatResult) -> str:
    return result.body["choices"][0]["finish_reason"]


async def test_allow_forwards_unchanged_and_streams_the_providers_chunks(rig):
    result = await rig.chat("What is 2 + 2?", stream=True)
    assert [m["content"] for m in rig.stub.received()[0]["messages"]] == ["What is 2 + 2?"]
    assert result.action == "allow" and content(result) == "Stub answer: What is 2 + 2?"
    assert "".join(result.chunks) == content(result)  # window by window: PRIVACY here screens outputs too
    (receipt,) = await rig.receipts()
    assert (receipt["policy_id"], receipt["guardrail_action"]) == ("matrix", "allow")
    assert receipt["receipt_id"] == result.receipt_id


async def test_privacy_runs_beside_the_other_detectors_only_while_no_other_request_is_in_progress(rig, monkeypatch):
    questions = ("first question", "second question")
    seen: dict[str, dict[str, Any]] = {q: {"judged": threading.Event()} for q in questions}
    for policy_id in ("safety", "privacy"):
        fake = rig.gateway.runtime.current().default.engine.detectors[policy_id]

        def spy(texts, _detect=fake.detect, _id=policy_id):
            record = seen.get(texts[0])
            if record is not None:
                record[_id] = threading.current_thread().name
                if _id == "safety":
                    record["judged"].set()
                else:  # a side thread, had one been started, gets to run Safety meanwhile
                    record["judged"].wait(2)
            return _detect(texts)
        monkeypatch.setattr(fake, "detect", spy)
    rig.stub.queue(Reply(text="a slow answer", delay=1.0))
    first = asyncio.create_task(rig.chat(questions[0]))
    while not rig.stub.received():  # the first request is at the provider: still in progress
        await asyncio.sleep(0.01)
    await rig.chat(questions[1])
    await first
    alone, under_load = seen[questions[0]], seen[questions[1]]
    assert alone["safety"] != alone["privacy"]  # alone: Safety in a side thread beside Privacy
    assert under_load["safety"] == under_load["privacy"]  # another request in progress: one thread
    assert rig.gateway.in_progress == 0


async def test_mask_forwards_placeholders_and_restores_them_in_the_answer(rig):
    result = await rig.chat("Please mail ada@example.org", stream=True)
    (sent,) = rig.stub.received()
    assert sent["messages"][0]["content"] == "Please mail <EMAIL_ADDRESS_1>"
    assert content(result) == "Stub answer: Please mail ada@example.org"
    assert "".join(result.chunks) == content(result)  # restored chunk by chunk
    (receipt,) = await rig.receipts()
    assert (receipt["policy_id"], receipt["guardrail_action"], result.action) == ("privacy", "mask", "mask")
    assert "ada@example.org" not in str(receipt)


async def test_input_refusal_never_calls_the_provider(rig):
    result = await rig.chat("BAD things")
    assert rig.stub.received() == []
    assert (content(result), finish_reason(result), result.action) == ("Refused by policy.", "content_filter",
                                                                      "refuse")
    (receipt,) = await rig.receipts()
    assert (receipt["policy_id"], receipt["guardrail_action"]) == ("safety", "refuse")
    assert receipt["evidence"]["stage"] == "input" and receipt["evidence"]["categories"] == ["toxicity"]


async def test_escalation_opens_a_case_and_never_calls_the_provider(rig):
    result = await rig.chat("Can you diagnose my rash?")
    assert rig.stub.received() == []
    case_id = result.headers["x-sonate-escalation-id"]
    assert result.action == "escalate" and content(result) == f"Routed (health) as {case_id}."
    case = await rig.gateway.escalations.get(case_id)
    assert (case["status"], case["receipt_id"], case["actor"], case["domain"]) == (
        "pending", result.receipt_id, "alice", "health")
    assert rig.metric("sonate_escalations_pending") == 1.0
    (receipt,) = await rig.receipts()
    assert receipt["guardrail_action"] == "escalate" and receipt["evidence"]["escalation_id"] == case_id


async def test_output_refusal_replaces_the_answer_with_content_filter(rig):
    rig.stub.queue(Reply(text="Step one to HARM them is ..."))
    result = await rig.chat("Tell me a story")
    assert len(rig.stub.received()) == 1
    assert (content(result), finish_reason(result), result.chunks) == ("Refused by policy.", "content_filter", [])
    (receipt,) = await rig.receipts()
    assert (receipt["policy_id"], receipt["guardrail_action"]) == ("safety", "refuse")
    assert receipt["evidence"]["stage"] == "output"


async def test_model_apology_is_marked_on_the_receipt(rig):
    rig.stub.queue(Reply(text="Sorry, I cannot help."))
    result = await rig.chat("Tell me a story")
    assert content(result) == "Sorry, I cannot help." and result.action == "allow"
    (receipt,) = await rig.receipts()
    assert receipt["evidence"].get("model_apology") is True  # FAR-A counts it


async def test_continuity_summarizes_before_the_model_call(rig):
    rig.stub.queue(Reply(text="the earlier talk"), Reply(text="final"))
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * 5}
             for i in range(5)]
    result = await rig.chat(turns)
    summarizer_call, model_call = rig.stub.received()
    assert summarizer_call["messages"][0]["content"] == "Summarize please."
    assert model_call["messages"][0]["content"] == "Summary of the earlier conversation: the earlier talk"
    assert model_call["messages"][1:] == turns[-2:]
    assert result.headers["x-sonate-continuity"] == "summarized" and content(result) == "final"
    (receipt,) = await rig.receipts()
    assert (receipt["policy_id"], receipt["guardrail_action"]) == ("continuity", "summarize")


async def test_one_receipt_per_decision_appended_and_chained(rig):
    allowed = await rig.chat("Hello")
    both = await rig.chat("Can you diagnose ada@example.org?")  # mask + escalate: two decisions
    refused = await rig.chat("BAD")
    receipts = await rig.receipts()
    assert [(r["request_id"], r["guardrail_action"]) for r in receipts] == [
        (allowed.headers["x-sonate-request-id"], "allow"),
        (both.headers["x-sonate-request-id"], "mask"), (both.headers["x-sonate-request-id"], "escalate"),
        (refused.headers["x-sonate-request-id"], "refuse")]
    assert [r["receipt_id"] for r in receipts[2:]] == [both.receipt_id, refused.receipt_id]
    assert verify_chain(receipts, {rig.signer.key_id: rig.signer.public_key}) == []
    assert [r["prev_hash"] for r in receipts] == [GENESIS_PREV_HASH, *(entry_hash(r) for r in receipts[:-1])]
    assert [r["ledger_height"] for r in receipts] == [0, 1, 2, 3]
    assert rig.metric("sonate_receipts_written_total", action="mask", ledger="default") == 1.0


async def test_a_resent_history_hashes_as_the_whole_request_does(rig):
    """``inputs_hash`` of each turn of a conversation is json_hash of the request as received, also
    when its history's canonical bytes come from the gateway's cache (turns 2 and 3)."""
    from proxy.primitives.canonical import json_hash

    history: list[dict[str, Any]] = []
    for turn, extra in enumerate(({}, {"temperature": 0.5, "top_p": 0.25, "metadata": {"é": "x"}}, {"user": "u-1"})):
        history.append({"role": "user", "content": f"Turn {turn}: what is 2 + 2? ✓"})
        result = await rig.chat(list(history), **extra)
        receipt = (await rig.receipts())[-1]
        assert receipt["inputs_hash"] == json_hash({"model": "stub", "messages": history, **extra})
        history.append(result.body["choices"][0]["message"])
    cache = rig.gateway.canonical_messages
    # hits: none in turn 1, its question in turn 2, turn 2's three messages in turn 3; misses: turn 1's
    # question, then each turn's new answer and new question
    assert (cache.hits, cache.misses) == (0 + 1 + 3, 1 + 2 + 2)
