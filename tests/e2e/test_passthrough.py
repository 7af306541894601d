"""Parameter pass-through, through the real proxy with the official openai client.

Fields the proxy does not interpret reach the provider unchanged (litellm's ``extra_body``):
``extra_body={"top_k": 40}`` (vLLM, Ollama, Together) and OpenAI fields newer than the proxy's
schema (``verbosity``, ``service_tier``, ``prompt_cache_key``). Fields the proxy interprets stay
validated (``n: 2`` is a 400). A field the operator forbids (``server.forbidden_params``) and a
field carrying free text (which the guardrails would not screen) get a 400 naming the field, and
the provider is not called. Only the provider is a stub; it records the JSON it received.
"""

from __future__ import annotations

import openai
import pytest

from tests.support.ledger import sqlite_url
from tests.support.proxy import (
    CLIENT_KEY,
    RunningProxy,
    serve_proxy,
    start_proxy,  # noqa: F401  (conftest marks a module importing a launcher `models`)
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import free_port
from tests.support.stub_upstream import StubUpstream

HELLO = [{"role": "user", "content": "What is the boiling point of water at sea level?"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    directory = tmp_path_factory.mktemp("passthrough")
    port = free_port()
    server = {"host": "127.0.0.1", "port": port, "forbidden_params": ["store"]}
    ledger = sqlite_url(directory / "ledger.db")
    config = write_config(directory, stub.url, ledger, port, overrides={"server": server})
    running = wait_until_up(serve_proxy(config, ledger, directory / "keys" / "signing-key.json", port),
                            "/readyz", timeout=180)
    yield running
    stop_proxy(running)


@pytest.fixture()
def client(gateway: RunningProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


def test_unknown_fields_reach_the_provider_unchanged(client, upstream):
    answer = client.chat.completions.create(
        model="stub", messages=HELLO, temperature=0.2, extra_body={"top_k": 40, "verbosity": "low",
                                                                    "service_tier": "auto",
                                                                    "prompt_cache_key": "team-42"})
    assert answer.choices[0].message.content.startswith("Stub answer:")
    (sent,) = upstream.received()
    assert (sent["top_k"], sent["verbosity"], sent["service_tier"], sent["prompt_cache_key"]) == (
        40, "low", "auto", "team-42")
    assert sent["temperature"] == 0.2


def test_fields_the_proxy_interprets_stay_validated(client, upstream):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="stub", messages=HELLO, n=2)
    assert caught.value.body["param"] == "n"
    assert upstream.received() == []


def test_a_forbidden_field_is_refused_by_name(client, upstream):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="stub", messages=HELLO, extra_body={"store": True})
    assert caught.value.body["param"] == "store"
    assert caught.value.body["code"] == "unsupported_parameter"
    assert "not allowed by this gateway" in caught.value.body["message"]
    assert upstream.received() == []


def test_free_text_in_an_unknown_field_is_refused_not_forwarded_unscreened(client, upstream):
    prediction = {"type": "content", "content": "My SSN is 078-05-1120 and I live at 12 Elm Street."}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="stub", messages=HELLO, extra_body={"prediction": prediction})
    assert caught.value.body["param"] == "prediction.content"
    assert upstream.received() == []


def test_personal_data_in_user_and_passed_through_fields_reaches_the_provider_masked(client, upstream):
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=HELLO, user="ada.lovelace@example.com",
        extra_body={"prompt_cache_key": "charles.babbage@example.org", "top_k": 40})
    assert raw.headers["x-sonate-guardrail-action"] == "mask"
    (sent,) = upstream.received()
    assert "ada.lovelace" not in str(sent) and sent.get("user") in (None, "<EMAIL_ADDRESS_1>")  # litellm 1.103.7
    # forwards no `user` to this OpenAI-compatible route; the proxy masks it either way
    assert sent["prompt_cache_key"] == "<EMAIL_ADDRESS_2>" and sent["top_k"] == 40
    receipt = client.get(f"/receipts/{raw.headers['x-sonate-receipt-id']}", cast_to=dict[str, object])
    fields = {span["field"] for span in receipt["evidence"]["spans"]}
    assert fields == {"user", "extra_body.prompt_cache_key"}
    assert "example.com" not in str(receipt) and "example.org" not in str(receipt)
