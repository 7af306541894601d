"""Deeply nested JSON bodies: a clear 400 naming the limit, never a 500.

A body of 5,000 nested arrays used to answer 500 ("The proxy had an internal error"): Python's
JSON decoder raised RecursionError. The proxy bounds nesting at ``server.limits.max_json_depth`` levels and
answers OpenAI's error shape (``invalid_request_error``, code ``invalid_json``); a JSON Schema
nested well inside the bound (tool ``parameters``) is still served. Only the provider is a stub.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from proxy.config import LimitsConfig
from tests.support.proxy import CLIENT_KEY, RunningProxy

MAX_JSON_DEPTH = LimitsConfig().max_json_depth  # the default bound (server.limits.max_json_depth)


def _post(proxy: RunningProxy, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(proxy.v1 + "/chat/completions", data=body, method="POST", headers={
        "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _nested_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def test_five_thousand_nested_arrays_get_a_400_not_a_500(proxy: RunningProxy) -> None:
    body = b'{"model": "stub", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, payload = _post(proxy, body)
    assert status == 400
    assert payload["error"]["code"] == "invalid_json"
    assert f"deeper than {MAX_JSON_DEPTH} levels" in payload["error"]["message"]


def test_nesting_just_over_the_bound_is_refused_and_within_it_is_served(proxy: RunningProxy) -> None:
    def body(levels: int) -> bytes:
        tool = {"type": "function", "function": {"name": "f", "parameters": _nested_schema(levels)}}
        return json.dumps({"model": "stub", "messages": [{"role": "user", "content": "Hi"}],
                           "tools": [tool]}).encode()

    # depth = body object, tools list, tool, function, then 2 levels per schema level
    status, payload = _post(proxy, body(MAX_JSON_DEPTH // 2))
    assert status == 400 and payload["error"]["code"] == "invalid_json"
    status, payload = _post(proxy, body(10))
    assert status == 200, payload
    assert payload["object"] == "chat.completion"
