"""The input stage of ``POST /v1/embeddings`` (proxy.server.flow.embeddings.screen_embedding_inputs) over
the real engine with the fake detectors: Privacy masks each input, Safety judges only when on,
Compliance never routes an embeddings request."""

from __future__ import annotations

import pytest

from proxy.guardrails.engine import GuardrailEngine
from proxy.server.flow.embeddings import screen_embedding_inputs
from tests.support.detectors import POLICIES, PRIVACY, SAFETY, FakeApology, FakeDetectors, count_words


def engine_and_fakes() -> tuple[GuardrailEngine, FakeDetectors]:
    fakes = FakeDetectors()
    return GuardrailEngine(POLICIES, count_tokens=count_words, registry=fakes.registry,
                           apology_detector=FakeApology()), fakes


def test_each_input_is_masked_with_placeholders_numbered_over_the_request():
    engine, _ = engine_and_fakes()
    screen = screen_embedding_inputs(engine, ["mail ada@example.org", "plain text", "Ada Lovelace, ada@example.org"],
                                     safety=False)
    assert screen.action == "mask"
    assert screen.texts == ["mail <EMAIL_ADDRESS_1>", "plain text", "<PERSON_1>, <EMAIL_ADDRESS_1>"]
    (decision,) = screen.decisions
    assert (decision.policy_id, decision.action) == (PRIVACY.id, "mask")
    spans = decision.evidence["spans"]
    assert [(s["message"], s["field"], s["entity_type"]) for s in spans] == [
        (0, "input", "EMAIL_ADDRESS"), (2, "input", "PERSON"), (2, "input", "EMAIL_ADDRESS")]
    assert all("ada@example.org" not in str(s) for s in spans)


def test_nothing_personal_is_allowed_unchanged():
    engine, _ = engine_and_fakes()
    screen = screen_embedding_inputs(engine, ["plain text", "more text"], safety=False)
    assert (screen.action, screen.texts, screen.decisions) == ("allow", ["plain text", "more text"], [])


def test_safety_judges_only_when_switched_on():
    engine, fakes = engine_and_fakes()
    off = screen_embedding_inputs(engine, ["fine", "HARM here"], safety=False)
    assert off.action == "allow" and fakes.safety.calls == []
    fakes.pii.calls.clear()
    on = screen_embedding_inputs(engine, ["fine", "HARM here", "ada@example.org"], safety=True)
    assert on.action == "refuse" and [d.policy_id for d in on.decisions] == [SAFETY.id]
    assert "harmful_intent" in on.decisions[0].evidence["categories"]
    assert fakes.pii.calls == []  # a refused request is not masked: nothing leaves


def test_compliance_never_routes_an_embeddings_request():
    engine, fakes = engine_and_fakes()
    screen = screen_embedding_inputs(engine, ["please diagnose my rash"], safety=True)
    assert screen.action == "allow" and fakes.domain.calls == []


def test_user_and_passed_through_fields_are_masked_too():
    engine, _ = engine_and_fakes()
    params = {"user": "ada@example.org", "extra_body": {"input_type": "query", "tags": ["Ada Lovelace"]}}
    screen = screen_embedding_inputs(engine, ["write to ada@example.org"], safety=False, params=params)
    assert screen.texts == ["write to <EMAIL_ADDRESS_1>"]
    assert screen.params == {"user": "<EMAIL_ADDRESS_1>",
                             "extra_body": {"input_type": "query", "tags": ["<PERSON_1>"]}}
    spans = screen.decisions[0].evidence["spans"]
    assert [(s["message"], s["field"]) for s in spans] == [(0, "input"), (None, "user"), (None, "extra_body.tags.0")]


def test_a_provider_answer_without_vectors_is_a_502_not_a_500():
    from proxy.server.flow.upstream import UpstreamError, _check_vectors

    _check_vectors({"data": [{"embedding": [0.1, -2.0, 3]}]}, 1)  # numbers: accepted
    for body in ({"data": [{"embedding": "Hello!"}]}, {"data": []}, {}, {"data": [{"embedding": []}]},
                 {"data": [{"embedding": [0.1, float("nan")]}]}, {"data": [{"embedding": [True]}]},
                 {"data": [{"embedding": [0.1]}, {"embedding": [0.2]}]}):
        with pytest.raises(UpstreamError) as caught:
            _check_vectors(body, 1)
        assert caught.value.status == 502 and caught.value.code == "upstream_error"
