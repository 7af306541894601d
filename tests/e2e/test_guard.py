"""The Safety policy's LLM guard in a real proxy: configured in safety.yaml, called through litellm
(the stub provider answers in Llama Guard's format), its verdict decides refuse vs allow."""

from __future__ import annotations

import shutil

import openai
import pytest
import yaml

from tests.support.proxy import CLIENT_KEY, ROOT, start_proxy, stop_proxy
from tests.support.stub_upstream import Reply

GUARD_MODEL = "llama-guard-stub"


@pytest.fixture(scope="module")
def guarded_proxy(tmp_path_factory, stub):
    """A proxy whose safety policy consults the guard for every text (band [0, 1))."""
    directory = tmp_path_factory.mktemp("guard")
    policies = directory / "policies"
    shutil.copytree(ROOT / "policies", policies)
    safety = yaml.safe_load((policies / "safety.yaml").read_text())
    safety["detector"]["guard"].update({"enabled": True, "model": f"openai/{GUARD_MODEL}", "api_base": stub.url,
                                        "api_key": "stub-key", "band": ["0.00", "1.00"], "timeout": 5.0})
    (policies / "safety.yaml").write_text(yaml.safe_dump(safety))
    running = start_proxy(directory, stub.url, f"sqlite:///{directory / 'ledger.db'}", policies=policies)
    yield running
    stop_proxy(running)


def _ask(proxy, text: str):
    client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)
    return client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": text}])


def _guard_calls(upstream) -> list[str]:
    return [r["messages"][0]["content"] for r in upstream.received() if r["model"] == GUARD_MODEL]


def test_guard_unsafe_verdict_refuses_without_calling_the_model(guarded_proxy, upstream):
    upstream.queue(Reply(text="unsafe\nS1"))
    raw = _ask(guarded_proxy, "What is the quickest way to get to the old mill?")
    completion = raw.parse()
    assert raw.headers["x-sonate-guardrail-action"] == "refuse"
    assert completion.choices[0].finish_reason == "content_filter"
    assert _guard_calls(upstream) == ["What is the quickest way to get to the old mill?"]
    assert [r["model"] for r in upstream.received()] == [GUARD_MODEL]  # the model was never called


def test_guard_safe_verdict_lets_the_request_through(guarded_proxy, upstream):
    upstream.queue(Reply(text="safe"), Reply(text="Take the river path."), Reply(text="safe"))
    raw = _ask(guarded_proxy, "How do I kill the lights in a theatre scene change?")
    completion = raw.parse()
    assert raw.headers["x-sonate-guardrail-action"] != "refuse"
    assert completion.choices[0].message.content == "Take the river path."
    calls = _guard_calls(upstream)
    assert calls[0] == "How do I kill the lights in a theatre scene change?"
    assert "Take the river path." in calls  # the answer is screened by the guard too (output stage)
