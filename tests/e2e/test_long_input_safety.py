"""End to end: a harmful request hidden after a few hundred words of harmless prose never reaches the provider.

The embedding model behind Safety's harm classifier reads 256 word pieces; the proxy judges a longer
text window by window (proxy.guardrails.detectors.windows). The real proxy, the official ``openai``
client and the stub provider (which records exactly what it received).
"""

from __future__ import annotations

import openai
import pytest

from tests.support.proxy import CLIENT_KEY
from tests.unit.guardrails.detectors.test_windows import ASK, PROSE, TECH

APOLOGY = "I'm sorry, but I can't help with that request."


@pytest.fixture(scope="module")
def client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_request_after_long_prose_is_refused_and_not_forwarded(client, upstream, stream):
    text = PROSE * 4 + ASK
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": text}], stream=stream)
    assert raw.headers["x-sonate-guardrail-action"] == "refuse"
    if stream:
        answer = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        answer = raw.parse().choices[0].message.content
    assert answer == APOLOGY
    assert upstream.received() == []


def test_long_harmless_prose_reaches_the_provider(client, upstream):
    completion = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": PROSE * 4}])
    assert completion.choices[0].message.content.startswith("Stub answer:")
    (sent,) = upstream.received()  # forwarded (Privacy may mask a name in it), not refused
    assert sent["messages"][-1]["content"].count("lavender, sage and thyme") == 4


def test_long_ordinary_technical_text_reaches_the_provider(client, upstream):
    raw = client.chat.completions.with_raw_response.create(model="stub", messages=[{"role": "user", "content": TECH}])
    assert raw.headers["x-sonate-guardrail-action"] in ("allow", "mask")  # Privacy may mask a word
    assert raw.parse().choices[0].message.content.startswith("Stub answer:")
    (sent,) = upstream.received()
    for phrase in ("kill the process with SIGTERM", "instead of forking the chain.", "The attack surface"):
        assert phrase in sent["messages"][-1]["content"]
