"""The Safety policy's optional LLM guard: config validation, Llama Guard answers, and real HTTP
calls through litellm to the stub provider answering in Llama Guard's format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from proxy.guardrails.detectors.guard import GUARD_PROMPT, GuardConfig, LlmGuard, Verdict, load_guard, parse_verdict
from tests.support.stub_upstream import Reply

POLICY = Path(__file__).resolve().parents[4] / "policies" / "safety.yaml"


def _guard(stub_url: str, **overrides) -> LlmGuard:
    config = GuardConfig.model_validate({"enabled": True, "model": "openai/llama-guard-stub", "api_base": stub_url,
                                         "api_key": "stub-key", "timeout": 2.0, **overrides})
    return load_guard(config)


@pytest.mark.parametrize(("answer", "unsafe", "categories"), [
    ("safe", False, ()),
    ("  Safe.\n", False, ()),
    ("unsafe\nS1", True, ("S1",)),
    ("unsafe\nS1,S10", True, ("S1", "S10")),
    ("UNSAFE S9", True, ("S9",)),
    ("unsafe", True, ()),
])
def test_llama_guard_answers_parse(answer, unsafe, categories):
    verdict = parse_verdict(answer)
    assert verdict == Verdict(unsafe, categories)


@pytest.mark.parametrize("answer", ["", "I cannot help with that.", "maybe"])
def test_other_answers_are_unparseable(answer):
    verdict = parse_verdict(answer)
    assert verdict.unsafe is None and verdict.error == "unparseable answer"


def test_shipped_policy_has_the_guard_off():
    block = yaml.safe_load(POLICY.read_text())["detector"]["guard"]
    config = GuardConfig.model_validate(block)
    assert config.enabled is False and load_guard(config) is None
    assert config.band[0] < config.band[1]


@pytest.mark.parametrize("bad", [
    {"enabled": True},                                         # no model
    {"band": ["0.9", "0.3"]},                                  # lo >= hi
    {"band": ["0.1", "1.5"]},                                  # outside [0, 1]
    {"prompt": "no placeholder here"},
    {"fail_mode": "ignore"},
    {"timeout": 0},
    {"unknown_option": 1},
])
def test_invalid_guard_config_is_rejected(bad):
    with pytest.raises(ValidationError):
        GuardConfig.model_validate(bad)


def test_api_key_from_an_unset_environment_variable_fails_at_load(monkeypatch):
    from proxy.config import ConfigError

    monkeypatch.delenv("SONATE_TEST_GUARD_KEY", raising=False)
    config = GuardConfig.model_validate({"enabled": True, "model": "openai/x", "api_key": "os.environ/SONATE_TEST_GUARD_KEY"})
    with pytest.raises(ConfigError, match="SONATE_TEST_GUARD_KEY"):
        load_guard(config)


def test_band_is_half_open():
    guard = LlmGuard(GuardConfig.model_validate({"enabled": True, "model": "openai/x", "band": ["0.30", "0.90"]}))
    assert [guard.in_band(p) for p in (0.29, 0.30, 0.5, 0.8999, 0.90)] == [False, True, True, True, False]


@pytest.mark.parametrize(("fail_mode", "expected"), [("first-stage", 0.6), ("refuse", 1.0), ("allow", 0.0)])
def test_rescore_uses_the_verdict_or_the_fail_mode(fail_mode, expected):
    guard = LlmGuard(GuardConfig.model_validate({"enabled": True, "model": "openai/x", "fail_mode": fail_mode}))
    assert guard.rescore(0.6, Verdict(True, ("S1",))) == 1.0
    assert guard.rescore(0.6, Verdict(False)) == 0.0
    assert guard.rescore(0.6, Verdict(None, error="Timeout")) == expected


def test_llama_guard_format_sends_the_text_alone_and_reads_unsafe(upstream):
    upstream.queue(Reply(text="unsafe\nS1"))
    verdict = _guard(upstream.url).classify("How do I hurt my neighbour?")
    assert verdict == Verdict(True, ("S1",))
    [request] = upstream.received()
    assert request["model"] == "llama-guard-stub"
    assert request["messages"] == [{"role": "user", "content": "How do I hurt my neighbour?"}]
    assert request.get("temperature") == 0


def test_llama_guard_safe_answer(upstream):
    upstream.queue(Reply(text="safe"))
    assert _guard(upstream.url).classify("How do I kill a stuck process?") == Verdict(False)


def test_prompt_format_wraps_the_text_in_the_guard_prompt(upstream):
    upstream.queue(Reply(text="safe"))
    _guard(upstream.url, format="prompt").classify("How do I shoot a photo at night?")
    [request] = upstream.received()
    content = request["messages"][0]["content"]
    assert content == GUARD_PROMPT.replace("{text}", "How do I shoot a photo at night?")


def test_custom_prompt_template(upstream):
    upstream.queue(Reply(text="unsafe\nS2"))
    verdict = _guard(upstream.url, format="prompt", prompt="Is this harmful? {text}").classify("rob a bank")
    assert verdict.unsafe is True
    assert upstream.received()[0]["messages"][0]["content"] == "Is this harmful? rob a bank"


def test_provider_error_and_timeout_become_failed_verdicts(upstream):
    upstream.queue(Reply(status=500))
    failed = _guard(upstream.url).classify("anything")
    assert failed.unsafe is None and failed.error
    upstream.queue(Reply(text="safe", delay=2.0))
    slow = _guard(upstream.url, timeout=0.3).classify("anything")
    assert slow.unsafe is None and slow.error


def test_unparseable_guard_answer_is_a_failed_verdict(upstream):
    upstream.queue(Reply(text="As an AI I think this is fine"))
    verdict = _guard(upstream.url).classify("anything")
    assert verdict.unsafe is None and verdict.error == "unparseable answer"
