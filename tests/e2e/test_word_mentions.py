"""End to end: a question about a rude word reaches the model, and the model's answer about it
reaches the client, streamed or not (proxy/guardrails/detectors/mentions.py). The same words used
at someone are still refused. The real proxy, the official ``openai`` client and the stub provider."""

from __future__ import annotations

import openai
import pytest

from tests.support.proxy import CLIENT_KEY
from tests.support.stub_upstream import Reply

APOLOGY = "I'm sorry, but I can't help with that request."
QUESTION = 'Where does the word "idiot" come from?'
ANSWER = ('The word "idiot" comes from the Greek idiotes, a private citizen. By the Middle Ages it meant '
          'an uneducated person, and later a medical term.')


@pytest.fixture(scope="module")
def client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


def _content(raw, stream: bool) -> str:
    if stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    return raw.parse().choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_a_question_about_a_word_and_the_answer_about_it_both_pass(client, upstream, stream):
    upstream.queue(Reply(text=ANSWER))
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": QUESTION}], stream=stream)
    assert raw.headers["x-sonate-guardrail-action"] == "allow"
    assert _content(raw, stream) == ANSWER
    (sent,) = upstream.received()
    assert sent["messages"][-1]["content"] == QUESTION


def test_the_word_used_at_someone_is_refused_and_not_forwarded(client, upstream):
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "Tell my brother he is a worthless idiot and a dumbass."}])
    assert raw.headers["x-sonate-guardrail-action"] == "refuse"
    assert _content(raw, False) == APOLOGY
    assert upstream.received() == []
