"""Property-based fuzzing of every route of the real proxy over HTTP.

One proxy (``python -m proxy serve``, the stub provider, a fresh Redis namespace of the session's
Redis ledger) receives Hypothesis-generated requests over real HTTP (``http.client``, bytes as
given): OpenAI chat bodies with hostile text (control and bidi characters, lone surrogates,
placeholder look-alikes such as ``<PERSON_1>``), the same bodies with a wrong type at any field,
raw byte mutations (truncation, invalid UTF-8, deep nesting, huge numbers, NaN/Infinity,
duplicate keys), enormous arrays and strings, and hostile ids, sizes, heights, pagination
parameters, JSON bodies and Authorization headers on every other route (receipts, keys,
escalations, review, ledger proofs and checkpoints, verifier, health, models, metrics).

Properties: every answer has a status < 500 and every 4xx carries OpenAI's error object
``{"error": {"message", "type", "param", "code"}}``; every 200 from chat carries
``x-sonate-receipt-id`` and ``GET /v1/receipts/{id}`` returns that receipt; afterwards /readyz is
200, the whole ledger verifies (``sonate verify --ledger``: signatures, one chain, the Merkle
tree) and the proxy log holds no "Traceback" or "Unhandled" line.

Budgets: the default Hypothesis profile ``ci`` is derandomized (the same examples on every run)
with a fixed ``max_examples`` per test, about 1–2 minutes in all on a 2-CPU machine. Set
``SONATE_FUZZ=long`` for the long mode (20× the examples, random seeds, a few tens of minutes):
``SONATE_FUZZ=long .venv/bin/python -m pytest -p no:randomly tests/e2e/test_fuzz.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.forked import sonate
from tests.support.fuzz import (
    RAW_SEGMENTS,
    Answer,
    auth_headers,
    chat_bodies,
    check_response,
    json_values,
    messages_bodies,
    mutated_bytes,
    path_segments,
    query_values,
    quote_segment,
    responses_bodies,
    send,
    texts,
    wrong_typed_bodies,
)
from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    OTHER_KEY,
    RunningProxy,
    serve_proxy,
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import delete_redis_namespace, free_port, redis_namespace_url

REVIEWER_KEY = "sk-test-reviewer-0004-padded-to-32-chars"
KEYS = [CLIENT_KEY, OTHER_KEY, ADMIN_KEY, REVIEWER_KEY]
LONG = os.environ.get("SONATE_FUZZ", "").lower() == "long"
_COMMON = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", derandomize=False, **_COMMON)
PROFILE = settings.get_profile("long" if LONG else "ci")


def budget(examples: int) -> settings:
    """The profile's settings with ``examples`` (×20 in the long mode) as max_examples."""
    return settings(PROFILE, max_examples=examples * (20 if LONG else 1))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory, stub) -> RunningProxy:
    """A proxy of its own (its log is this suite's alone) with a reviewer key and no rate limit."""
    directory = tmp_path_factory.mktemp("fuzz")
    ledger_url = redis_namespace_url("fuzz")
    port = free_port()
    config_path = write_config(directory, stub.url, ledger_url, port, extra_keys=[
        {"key": REVIEWER_KEY, "actor": "reviewer-ravi", "role": "reviewer"}])
    config = yaml.safe_load(config_path.read_text())
    config["server"]["limits"] = {"requests_per_second": 0, "max_concurrent_per_key": 0}
    config["review"] = {"sample_rate": 1.0}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    running = wait_until_up(serve_proxy(config_path, ledger_url, directory / "keys" / "signing-key.json", port),
                            "/readyz", timeout=180)
    try:
        yield running
        _final_checks(running)  # after every test of the module, whatever order pytest-randomly chose
    finally:
        stop_proxy(running)
        delete_redis_namespace(ledger_url)


@pytest.fixture(scope="module")
def known_ids(fuzzed: RunningProxy) -> dict[str, list[str]]:
    """Real receipt, escalation and review-item ids, so fuzzed requests also reach stored objects."""
    ids: dict[str, list[str]] = {"receipt": [], "escalation": [], "item": []}
    for text in ("Hello there", "What dose of ibuprofen should I take for my back pain?",
                 "My name is John Smith and my email is john.smith@example.com"):
        answer = _chat(fuzzed, json.dumps({"model": "stub", "messages": [{"role": "user", "content": text}]}).encode())
        assert answer.status == 200, answer.body
        ids["receipt"].append(answer.headers["x-sonate-receipt-id"])
        escalation = answer.headers.get("x-sonate-escalation-id")
        if escalation:
            ids["escalation"].append(escalation)
    cases = send(fuzzed.url, "GET", "/v1/admin/escalations?status=all", headers=_auth(ADMIN_KEY))
    ids["escalation"] += [case["id"] for case in cases.json()["data"]]
    items = send(fuzzed.url, "GET", "/v1/review/items?status=all", headers=_auth(ADMIN_KEY))
    ids["item"] += [item["id"] for item in items.json()["data"]]
    return ids


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _chat(proxy: RunningProxy, body: bytes, content_type: str = "application/json") -> Answer:
    return send(proxy.url, "POST", "/v1/chat/completions", body,
                {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": content_type})


def _check_chat(proxy: RunningProxy, answer: Answer, what: str) -> None:
    """The general properties, plus: a 200 (JSON or a stream ending in ``data: [DONE]`` without an
    error event) carries a receipt id whose receipt can be fetched."""
    check_response(answer, what)
    if answer.status != 200:
        return
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line for line in answer.body.decode().splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "data: [DONE]", f"{what}: stream ends {events[-2:]!r}"
        assert not any('"error"' in e[:20] for e in events), f"{what}: error event {events[-3:]!r}"
    _check_receipt(proxy, answer, what)


def _check_receipt(proxy: RunningProxy, answer: Answer, what: str) -> None:
    """A 200 carries a receipt id whose receipt can be fetched."""
    receipt_id = answer.headers.get("x-sonate-receipt-id")
    assert receipt_id, f"{what}: 200 without x-sonate-receipt-id"
    receipt = send(proxy.url, "GET", "/v1/receipts/" + quote_segment(receipt_id), headers=_auth(CLIENT_KEY))
    assert receipt.status in (200, 202), f"{what}: receipt {receipt_id}: {receipt.status} {receipt.body[:300]!r}"
    if receipt.status == 200:
        assert receipt.json()["receipt_id"] == receipt_id


# -- chat ---------------------------------------------------------------------------------------


@budget(250)
@given(body=chat_bodies)
def test_chat_bodies_never_5xx_and_every_200_has_its_receipt(fuzzed: RunningProxy, body: dict) -> None:
    _check_chat(fuzzed, _chat(fuzzed, json.dumps(body).encode()), f"body {body!r:.400}")


@budget(60)
@given(body=chat_bodies, usage=st.booleans())
def test_streamed_chat_never_5xx_and_ends_with_done_and_a_receipt(fuzzed: RunningProxy, body: dict,
                                                                  usage: bool) -> None:
    body = {**body, "stream": True, "stream_options": {"include_usage": usage}}
    _check_chat(fuzzed, _chat(fuzzed, json.dumps(body).encode()), f"stream {body!r:.400}")


@budget(200)
@given(body=wrong_typed_bodies())
def test_a_wrong_type_at_any_field_is_a_4xx_or_served(fuzzed: RunningProxy, body: dict) -> None:
    _check_chat(fuzzed, _chat(fuzzed, json.dumps(body).encode()), f"body {body!r:.400}")


@budget(200)
@given(raw=mutated_bytes(), content_type=st.sampled_from(["application/json", "application/json; charset=utf-8",
                                                          "text/plain", "application/x-www-form-urlencoded",
                                                          "application/json; charset=latin-1"]))
def test_raw_byte_mutations_never_5xx(fuzzed: RunningProxy, raw: bytes, content_type: str) -> None:
    _check_chat(fuzzed, _chat(fuzzed, raw, content_type), f"raw {raw[:300]!r} ({content_type})")


ENORMOUS = {
    "string_over_the_body_limit": lambda: {"model": "stub", "messages": [{"role": "user", "content": "a" * 70_000}]},
    "ten_thousand_messages": lambda: {"model": "stub", "messages": [{"role": "user", "content": ""}] * 10_000},
    "fifty_thousand_content_parts": lambda: {"model": "stub", "messages": [
        {"role": "user", "content": [{"type": "text", "text": ""}] * 5_000}]},
    "huge_stop_list": lambda: {"model": "stub", "messages": [{"role": "user", "content": "hi"}], "stop": ["x"] * 20_000},
    "huge_metadata": lambda: {"model": "stub", "messages": [{"role": "user", "content": "hi"}],
                              "metadata": {str(i): "v" for i in range(8_000)}},
    "many_placeholders": lambda: {"model": "stub", "messages": [{"role": "user", "content": "<PERSON_1> " * 5_000}]},
    "bidi_and_controls": lambda: {"model": "stub", "messages": [
        {"role": "user", "content": "\u202e\u2066\x00\x1b[31m\ud800" * 2_000}]},
}


@pytest.mark.parametrize("name", sorted(ENORMOUS))
def test_enormous_arrays_and_strings_never_5xx(fuzzed: RunningProxy, name: str) -> None:
    _check_chat(fuzzed, _chat(fuzzed, json.dumps(ENORMOUS[name]()).encode()), name)


# -- every other route --------------------------------------------------------------------------

_GET_ROUTES = ["/v1/receipts/{id}", "/v1/escalations/{id}", "/v1/review/items/{id}", "/verify/{id}"]
_POST_ROUTES = ["/v1/admin/escalations/{id}/resolve", "/v1/review/items/{id}/verdicts", "/v1/review/items/{id}/resolve"]
_QUERY_ROUTES = {
    "/v1/receipts/{id}": ["bundle"], "/v1/admin/escalations": ["status", "limit", "after"],
    "/v1/review/items": ["status", "reason", "limit", "after"], "/v1/review/agreement": [],
    "/v1/ledger/checkpoint": ["tree_size"], "/v1/ledger/proof/inclusion": ["height", "tree_size"],
    "/v1/ledger/proof/consistency": ["from", "to"], "/v1/keys": [], "/v1/models": [], "/healthz": [],
    "/readyz": [], "/metrics": [], "/verify": [], "/verify/": [], "/v1/escalations/{id}": [],
}


@st.composite
def _ids(draw: st.DrawFn, known: dict[str, list[str]]) -> str:
    real = [i for values in known.values() for i in values]
    return draw(st.one_of(st.sampled_from(real), path_segments) if real else path_segments)


def _fill(route: str, segment: str) -> str:
    return route.replace("{id}", segment if segment in RAW_SEGMENTS else quote_segment(segment))


@budget(400)
@given(data=st.data())
def test_query_parameters_ids_and_auth_of_every_get_route(fuzzed: RunningProxy, known_ids: dict,
                                                          data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(sorted(_QUERY_ROUTES)))
    params = data.draw(st.lists(st.tuples(st.sampled_from(_QUERY_ROUTES[route] or ["x"]), query_values),
                                max_size=4))
    path = _fill(route, data.draw(_ids(known_ids)))
    query = urlencode([(k, v.encode("utf-8", "surrogatepass")) for k, v in params])
    authorization = data.draw(auth_headers(KEYS))
    headers = {} if authorization is None else {"Authorization": authorization}
    answer = send(fuzzed.url, "GET", path + ("?" + query if query else ""), headers=headers)
    check_response(answer, f"GET {path}?{query} auth={authorization!r:.80}")


_verdicts = st.fixed_dictionaries({}, optional={
    "pass": st.one_of(st.sampled_from(["A", "B", "C", ""]), json_values), "breach": st.one_of(st.booleans(), json_values),
    "intent_permissible": st.booleans(), "content_harmful": st.booleans(),
    "expected_policy_id": st.one_of(texts, json_values), "note": st.one_of(texts, st.text(min_size=4000)),
    "decision": st.one_of(st.sampled_from(["approve", "reject", "APPROVE"]), json_values)})


@budget(250)
@given(data=st.data())
def test_admin_and_review_posts_never_5xx(fuzzed: RunningProxy, known_ids: dict, data: st.DataObject) -> None:
    route = data.draw(st.sampled_from(_POST_ROUTES))
    path = _fill(route, data.draw(_ids(known_ids)))
    body = data.draw(st.one_of(_verdicts.map(lambda v: json.dumps(v).encode()), json_values.map(
        lambda v: json.dumps(v).encode()), mutated_bytes()))
    key = data.draw(st.sampled_from([ADMIN_KEY, REVIEWER_KEY, CLIENT_KEY]))
    answer = send(fuzzed.url, "POST", path, body, {"Authorization": f"Bearer {key}",
                                                   "Content-Type": "application/json"})
    check_response(answer, f"POST {path} {body[:300]!r}")


_embedding_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["stub", "demo", "nope", ""]),
     "input": st.one_of(texts, st.lists(texts, max_size=4), st.lists(st.integers(-1, 2**40), max_size=4), json_values)},
    optional={"encoding_format": st.sampled_from(["float", "x"]), "dimensions": st.integers(-1, 2**40),
              "user": json_values})


@budget(60)
@given(body=_embedding_bodies)
def test_embeddings_bodies_never_5xx(fuzzed: RunningProxy, body: dict) -> None:
    """``POST /v1/embeddings`` (a 404 in OpenAI's error shape where the route is not served)."""
    answer = send(fuzzed.url, "POST", "/v1/embeddings", json.dumps(body).encode(),
                  {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    check_response(answer, f"embeddings {body!r:.300}")


# -- Responses and Messages APIs -------------------------------------------------

#: (path, Anthropic error shape, the last event of a served stream) of the translated APIs.
_TRANSLATED = {"responses": ("/v1/responses", False, ("response.completed", "response.incomplete")),
               "messages": ("/v1/messages", True, ("message_stop",))}


def _check_translated(proxy: RunningProxy, api: str, body: dict, what: str) -> None:
    """``body`` to ``api``'s route: no 5xx, the API's error shape on a 4xx; a 200 (JSON, or a stream
    whose last event ends the answer and that has no error event) has its receipt."""
    path, anthropic, last = _TRANSLATED[api]
    answer = send(proxy.url, "POST", path, json.dumps(body).encode(),
                  {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    check_response(answer, what, anthropic=anthropic)
    if answer.status != 200:
        return
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        names = [line[7:] for line in answer.body.decode().splitlines() if line.startswith("event: ")]
        assert names and names[-1] in last, f"{what}: stream ends {names[-3:]!r}"
        assert "error" not in names, f"{what}: error event in {names!r:.300}"
    _check_receipt(proxy, answer, what)


@budget(80)
@given(body=responses_bodies, stream=st.booleans())
def test_responses_bodies_never_5xx_and_every_200_has_its_receipt(fuzzed: RunningProxy, body: dict,
                                                                  stream: bool) -> None:
    body = {**body, "stream": stream}
    _check_translated(fuzzed, "responses", body, f"responses {body!r:.400}")


@budget(80)
@given(body=messages_bodies, stream=st.booleans())
def test_messages_bodies_never_5xx_and_every_200_has_its_receipt(fuzzed: RunningProxy, body: dict,
                                                                 stream: bool) -> None:
    body = {**body, "stream": stream}
    _check_translated(fuzzed, "messages", body, f"messages {body!r:.400}")


@budget(60)
@given(body=wrong_typed_bodies(responses_bodies))
def test_a_wrong_type_at_any_responses_field_is_a_4xx_or_served(fuzzed: RunningProxy, body: dict) -> None:
    _check_translated(fuzzed, "responses", body, f"responses {body!r:.400}")


@budget(60)
@given(body=wrong_typed_bodies(messages_bodies))
def test_a_wrong_type_at_any_messages_field_is_a_4xx_or_served(fuzzed: RunningProxy, body: dict) -> None:
    _check_translated(fuzzed, "messages", body, f"messages {body!r:.400}")


@budget(60)
@given(method=st.sampled_from(["PUT", "DELETE", "PATCH", "OPTIONS", "GET", "POST"]),
       path=st.sampled_from(["/v1/chat/completions", "/v1/models", "/v1/nope", "/", "/v1/receipts/",
                             "/v1/ledger/proof", "/v1//receipts/x", "/%ff", "/v1/admin/escalations/x/resolve"]))
def test_unknown_routes_and_methods_answer_openai_errors(fuzzed: RunningProxy, method: str, path: str) -> None:
    answer = send(fuzzed.url, method, path, b"{}" if method in ("POST", "PUT", "PATCH") else None,
                  {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    check_response(answer, f"{method} {path}")


@pytest.mark.parametrize("value", [b"Bearer \x01", b"\x7f", b"Bearer sk-\x1b[31m", b"\x00"])
def test_control_bytes_in_a_header_are_a_400(fuzzed: RunningProxy, value: bytes) -> None:
    """Unparseable HTTP is refused by aiohttp's parser (plain-text 400, before any middleware)."""
    answer = send(fuzzed.url, "GET", "/v1/models", headers={"Authorization": value})
    assert answer.status == 400, answer.body


@pytest.mark.parametrize("value", [b"Bearer \xff\xfe", b"Bearer sk-\xc3(", b"Bearer \xed\xa0\x80" + b"k" * 40])
def test_non_utf8_bearer_keys_are_a_401_not_a_500(fuzzed: RunningProxy, value: bytes) -> None:
    """Found by the fuzz suite: auth hashed the key with a strict UTF-8 encode (UnicodeEncodeError → 500)."""
    for path in ("/v1/models", "/v1/admin/escalations", "/metrics"):
        answer = send(fuzzed.url, "GET", path, headers={"Authorization": value})
        check_response(answer, f"GET {path} {value!r}")
        assert answer.status == 401 and answer.json()["error"]["code"] == "invalid_api_key"


# -- afterwards ---------------------------------------------------------------------------------

_BAD_LOG = re.compile(r"Traceback|Unhandled|Error handling request", re.IGNORECASE)
def _final_checks(fuzzed: RunningProxy) -> None:
    """/readyz 200, a request still served with its receipt, the ledger verifies, no traceback logged."""
    assert send(fuzzed.url, "GET", "/readyz").status == 200
    answer = _chat(fuzzed, json.dumps({"model": "stub", "messages": [{"role": "user", "content": "Hi"}]}).encode())
    _check_chat(fuzzed, answer, "final request")
    done = sonate("verify", "--ledger", fuzzed.ledger_url, "--keys-url",
                  fuzzed.v1 + "/keys", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    bad = [line for line in Path(fuzzed.log_path).read_text(errors="replace").splitlines() if _BAD_LOG.search(line)]
    assert not bad, "\n".join(bad[:20])


def test_zz_proxy_still_answers_and_logged_no_unhandled_exception(fuzzed: RunningProxy) -> None:
    """The final checks as a test (they also run when the module's proxy is torn down, after every test)."""
    _final_checks(fuzzed)


def test_zzz_lone_surrogate_in_tool_call_arguments_is_not_a_500(fuzzed: RunningProxy) -> None:
    """Found by the fuzz suite: arguments spelling lone surrogates answered 500 (the scan cache could
    not encode the parsed text); they are now one plain-text piece."""
    call = {"id": "0", "type": "function", "function": {"name": "f", "arguments": '{"\\ud800": "x\\udfff"}'}}
    body = {"model": "stub", "messages": [{"role": "user", "content": "Hi"},
                                          {"role": "assistant", "content": None, "tool_calls": [call]}]}
    _check_chat(fuzzed, _chat(fuzzed, json.dumps(body).encode()), "lone surrogate in arguments")


@pytest.mark.parametrize("role", ["developer", "system"])
def test_zzz_null_content_of_a_non_assistant_message_is_a_400(fuzzed: RunningProxy, role: str) -> None:
    """Found by the long mode (SONATE_FUZZ=long): the client's mistake answered 502 upstream_error."""
    body = {"model": "stub", "messages": [{"role": role, "content": None}, {"role": "user", "content": "Hi"}]}
    answer = _chat(fuzzed, json.dumps(body).encode())
    check_response(answer, f"{role} content null")
    assert answer.status == 400
    assert json.loads(answer.body)["error"]["param"] == "messages.0"


def test_zzz_embeddings_on_the_demo_route_are_a_400(fuzzed: RunningProxy) -> None:
    """Found by test_embeddings_bodies_never_5xx while /v1/embeddings was being added: the demo route
    (litellm's mock_response) answers text where a vector belongs, which was packed as float32 (500).
    A mock chat route now answers 400 ``model_not_supported``; a provider answer without vectors is a
    502 (proxy.server.flow.upstream)."""
    body = {"model": "demo", "input": ["0"], "encoding_format": "base64"}
    answer = send(fuzzed.url, "POST", "/v1/embeddings", json.dumps(body).encode(),
                  {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    check_response(answer, "embeddings on the demo route")
    assert answer.status == 400 and json.loads(answer.body)["error"]["code"] == "model_not_supported"
