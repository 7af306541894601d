"""A passed-through stream driven through proxy.server.flow.pipeline.Gateway: fake detectors
(tests/support/detectors.py) in the real GuardrailEngine, the real Upstream (litellm) against the
stub provider over HTTP, a real SQLite ledger signed with a fresh key, real Metrics.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from proxy.config import Config
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.schema import HoldBack
from proxy.primitives.canonical import json_hash
from proxy.receipts import Ledger, Signer, open_store
from proxy.server.errors import Caller
from proxy.server.flow.pipeline import Gateway
from proxy.server.flow.streaming import assemble_tool_calls
from proxy.server.flow.upstream import Upstream
from proxy.server.flow.wire import ChatCompletionRequest
from proxy.server.telemetry.metrics import Metrics
from tests.support.detectors import COMPLIANCE, CONTINUITY, PRIVACY, SAFETY, FakeApology, FakeDetectors, count_words
from tests.support.ledger import sqlite_url
from tests.support.stub_upstream import Reply, StubUpstream

CALLER = Caller("alice", "client")
INPUT_PRIVACY = PRIVACY.model_copy(update={"stages": ["input"]})


def gateway_for(tmp_path: Path, stub: StubUpstream, policies: list[Any]) -> Gateway:
    config = Config(
        model_list=[{"model_name": "stub", "litellm_params": {"model": "openai/stub-model", "api_base": stub.url,
                                                              "api_key": "sk-stub"}}],
        auth={"keys": [{"key": "sk-test-client-0001-padded-to-32-chars", "actor": "alice"}]},
        ledger={"url": sqlite_url(tmp_path / "ledger.db")},
    )
    engine = GuardrailEngine(policies, count_tokens=count_words, registry=FakeDetectors().registry,
                             apology_detector=FakeApology())
    return Gateway(config, engine, Upstream(config), Ledger(open_store(config.ledger_url), Signer.generate()),
                   Metrics())


@pytest.fixture
async def make(tmp_path: Path, upstream: StubUpstream) -> AsyncIterator[Any]:
    made: list[Gateway] = []

    def build(hold: HoldBack = HoldBack(),  # noqa: B008
              privacy: Any = INPUT_PRIVACY, safety: list[Any] | None = None) -> Gateway:
        safety = safety or [SAFETY.model_copy(update={"hold_back": hold})]
        made.append(gateway_for(tmp_path / str(len(made)), upstream, [*safety, privacy, COMPLIANCE, CONTINUITY]))
        return made[-1]

    yield build
    for gateway in made:
        await gateway.ledger.store.close()


async def stream(gateway: Gateway, content: str, **extra: Any) -> tuple[Any, list[Any], list[dict[str, Any]]]:
    """(result, the events as parsed JSON or "[DONE]", the receipts stored when [DONE] was sent)."""
    raw = {"model": "stub", "messages": [{"role": "user", "content": content}], "stream": True, **extra}
    result = await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
    events, at_done = [], []
    async for event in result.events.events():
        data = event.decode().removeprefix("data: ").strip()
        if data == "[DONE]":
            head = await gateway.ledger.store.head()
            at_done = await gateway.ledger.store.range(0, head.height + 1)
        events.append(data if data == "[DONE]" else json.loads(data))
    return result, events, at_done


def text_of(events: list[Any]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if isinstance(e, dict) and e.get("choices"))


def finish_of(events: list[Any]) -> str:
    return [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e.get("choices")][-1]


async def test_allowed_stream_passes_chunks_and_appends_the_receipt_before_done(make, upstream):
    gateway = make()
    result, events, at_done = await stream(gateway, "What is 2 + 2?")
    assert text_of(events) == "Stub answer: What is 2 + 2?" and finish_of(events) == "stop"
    assert len([e for e in events if isinstance(e, dict) and e["choices"][0]["delta"].get("content")]) > 3
    assert events[-1] == "[DONE]" and result.action == "allow"
    (receipt,) = at_done
    assert receipt["receipt_id"] == result.receipt_id and receipt["guardrail_action"] == "allow"
    assert receipt["evidence"]["stream"] == {"ended": "stop", "delivered_chars": len(text_of(events))}
    body = result.events.body()
    assert body["choices"][0]["message"]["content"] == text_of(events)
    assert receipt["outputs_hash"] == json_hash(body)


@pytest.mark.parametrize("hold", [HoldBack(), HoldBack(size=600)])
async def test_harm_split_across_chunks_stops_with_content_filter(make, upstream, hold):
    gateway = make(hold)
    upstream.queue(Reply(chunks=["Sure. ", "Here is how to ", "HA", "RM them. ", "Step two."]))
    result, events, at_done = await stream(gateway, "Tell me a story")
    text = text_of(events)
    assert finish_of(events) == "content_filter" and events[-1] == "[DONE]"
    assert "RM" not in text and "Step two" not in text  # the held-back text never leaves
    if hold.size == 0:
        assert text == "Sure. Here is how to HA"  # released at once, stopped at the window's end
    else:
        assert text == "Refused by policy."  # nothing had left: the apology, as without stream
    (receipt,) = at_done
    assert (receipt["policy_id"], receipt["guardrail_action"], receipt["evidence"]["stage"]) == (
        "safety", "refuse", "output")
    assert receipt["receipt_id"] == result.receipt_id
    assert receipt["outputs_hash"] == json_hash(result.events.body())
    assert result.events.body()["choices"][0]["message"]["content"] == text


async def test_by_default_a_short_harmful_answer_is_replaced_by_the_apology(make, upstream):
    gateway = make(safety=[SAFETY])  # Safety's default hold_back (24 tokens)
    upstream.queue(Reply(chunks=["Sure. ", "Here is how to ", "HA", "RM them. ", "Step two."]))
    result, events, at_done = await stream(gateway, "Tell me a story")
    assert text_of(events) == "Refused by policy." and finish_of(events) == "content_filter"


async def test_placeholder_split_across_chunks_is_restored(make, upstream):
    gateway = make()
    upstream.queue(Reply(chunks=["I will mail ", "<EMAIL_", "ADDRESS_1>", " today."]))
    _, events, _ = await stream(gateway, "Please mail ada@example.org")
    assert upstream.received()[0]["messages"][0]["content"] == "Please mail <EMAIL_ADDRESS_1>"
    assert text_of(events) == "I will mail ada@example.org today."
    assert all("<" not in (e["choices"][0]["delta"].get("content") or "") for e in events
               if isinstance(e, dict) and e.get("choices"))


async def test_privacy_on_output_masks_each_window_before_it_leaves(make, upstream):
    gateway = make(privacy=PRIVACY)
    upstream.queue(Reply(chunks=["Write to ", "bob@exam", "ple.com now. ", "Thanks"]))
    _, events, at_done = await stream(gateway, "Who do I write to?")
    assert text_of(events) == "Write to <EMAIL_ADDRESS_1> now. Thanks"
    assert [r["guardrail_action"] for r in at_done] == ["mask"]


async def test_privacy_on_output_numbers_placeholders_across_windows(make, upstream):
    """One masker for the whole answer: two different e-mails in two windows get two placeholders,
    the same one again gets its first placeholder back."""
    gateway = make(privacy=PRIVACY)
    upstream.queue(Reply(chunks=["Write to ", "bob@example.com now. ", "Copy carol@example.org too. ",
                                 "Then bob@example.com again."]))
    _, events, at_done = await stream(gateway, "Who do I write to?")
    assert text_of(events) == ("Write to <EMAIL_ADDRESS_1> now. Copy <EMAIL_ADDRESS_2> too. "
                               "Then <EMAIL_ADDRESS_1> again.")
    assert [r["guardrail_action"] for r in at_done] == ["mask"]


TOXICITY_ONLY = SAFETY.model_copy(update={"id": "safety.toxicity", "apology": "Rude.",
                                          "thresholds": {"toxicity": Decimal("0.5")}})
HARM_ONLY = SAFETY.model_copy(update={"id": "safety.harm", "apology": "Harmful.",
                                      "thresholds": {"harmful_intent": Decimal("0.7")}})


@pytest.mark.parametrize("order", [[TOXICITY_ONLY, HARM_ONLY], [HARM_ONLY, TOXICITY_ONLY]],
                         ids=["tox-first", "harm-first"])
async def test_every_output_safety_policy_screens_a_stream_in_either_order(make, upstream, order):
    """With two output Safety policies the stream refuses what the JSON path refuses, whichever
    policy comes first in the configuration (the second one is not skipped)."""
    answer = ["Sure. ", "Here is HARM for you. ", "Done."]
    gateway = make(safety=order)
    upstream.queue(Reply(chunks=answer))
    _, events, at_done = await stream(gateway, "Tell me a story")
    assert finish_of(events) == "content_filter" and "HARM" not in text_of(events)
    assert [(r["policy_id"], r["guardrail_action"]) for r in at_done] == [("safety.harm", "refuse")]
    upstream.queue(Reply(text="".join(answer)))
    raw = {"model": "stub", "messages": [{"role": "user", "content": "Tell me a story"}]}
    whole = await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
    assert whole.body["choices"][0]["message"]["content"] == "Harmful."
    assert whole.body["choices"][0]["finish_reason"] == "content_filter"


async def test_tool_call_deltas_and_usage_pass_through(make, upstream):
    gateway = make()
    calls = [[{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}],
             [{"index": 0, "function": {"arguments": "{\"city\": "}}], [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]]
    upstream.queue(Reply(chunks=[], tool_calls=calls, finish_reason="tool_calls"))
    _, events, at_done = await stream(gateway, "Weather?", stream_options={"include_usage": True})
    sent = [e["choices"][0]["delta"]["tool_calls"] for e in events if isinstance(e, dict) and e.get("choices")
            and "tool_calls" in e["choices"][0]["delta"]]
    assert len(sent) == len(calls)
    for got, want in zip(sent, calls):
        assert {k: v for k, v in got[0].items() if k != "type"} == {k: v for k, v in want[0].items() if k != "type"}
    assert finish_of(events) == "tool_calls"
    usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
    assert len(usage) == 1 and usage[0]["choices"] == [] and usage[0]["usage"]["prompt_tokens"] == 1
    assert assemble_tool_calls([c[0] for c in calls])[0]["function"] == {"name": "lookup", "arguments": "{\"city\": \"Oslo\"}"}
    assert at_done[0]["guardrail_action"] == "allow"


async def test_input_refusal_still_streams_the_apology_without_calling_the_model(make, upstream):
    gateway = make()
    raw = {"model": "stub", "messages": [{"role": "user", "content": "BAD things"}], "stream": True}
    result = await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
    assert result.events is None and upstream.received() == []
    assert result.body["choices"][0]["finish_reason"] == "content_filter"
