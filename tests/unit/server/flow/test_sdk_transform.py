"""The OpenAI SDK's request transform with the inert-annotation shortcut: same bodies, less work."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, Iterable

import pytest
from openai import NOT_GIVEN
from openai._models import PropertyInfo
from openai._utils import _transform
from openai.types.beta.response_create_params import ResponseCreateParamsNonStreaming
from openai.types.chat import completion_create_params as chat_params
from typing_extensions import Annotated, Literal, Required, TypedDict

from proxy.server.flow import sdk_transform

CHAT = chat_params.CompletionCreateParamsNonStreaming


class Dated(TypedDict, total=False):
    """A params type whose field the SDK formats (ISO 8601)."""

    at: Annotated[str | dt.datetime, PropertyInfo(format="iso8601")]
    note: str


class Aliased(TypedDict, total=False):
    """A params type whose field the SDK renames."""

    card_id: Required[Annotated[str, PropertyInfo(alias="cardID")]]


class Nested(TypedDict, total=False):
    """Aliases two levels down: a list of dicts of a TypedDict."""

    items: Iterable[dict[str, Aliased]]
    kind: Literal["a", "b"]


class Tree(TypedDict, total=False):
    """A recursive params type."""

    name: str
    children: list["Tree"]


CHAT_BODIES: list[dict[str, Any]] = [
    {"model": "m", "messages": [{"role": "user", "content": "hello"}]},
    {"model": "m", "messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "rules"}]},
        {"role": "user", "name": "ann", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": "done", "refusal": None, "audio": {"id": "a1"}},
        {"role": "function", "name": "legacy", "content": "x"}],
     "tools": [{"type": "function", "function": {"name": "lookup", "description": "find",
                                                 "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}},
                                                 "strict": True}}],
     "tool_choice": {"type": "function", "function": {"name": "lookup"}},
     "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
     "temperature": 0.2, "max_completion_tokens": 10, "stop": ["\n"], "logit_bias": {"50256": -100},
     "metadata": {"k": "v"}, "stream_options": None, "seed": 7, "user": "u", "n": 1},
    {"model": "m", "messages": [{"role": "user", "content": "x" * 10, "extra_field": {"nested": [1, 2.5, True, None]}}],
     "extra_top": [{"a": [{"b": "c"}]}]},
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def sdk_walk(data: Any, annotation: Any) -> Any:
    """The SDK's own synchronous walk, without the shortcut."""
    walk = _transform._transform_recursive
    original = getattr(walk, "__wrapped__", walk)
    saved = _transform._transform_recursive
    _transform._transform_recursive = original
    try:
        return _transform.transform(data, annotation)
    finally:
        _transform._transform_recursive = saved


def sdk_async_walk(data: Any, annotation: Any) -> Any:
    """The SDK's own asynchronous walk, without the shortcut."""
    async_walk = _transform._async_transform_recursive
    saved = (_transform._transform_recursive, async_walk)
    _transform._transform_recursive = getattr(saved[0], "__wrapped__", saved[0])
    _transform._async_transform_recursive = getattr(async_walk, "__wrapped__", async_walk)
    try:
        return run(_transform.async_transform(data, annotation))
    finally:
        _transform._transform_recursive, _transform._async_transform_recursive = saved


@pytest.fixture(autouse=True)
def installed() -> None:
    sdk_transform.install()


def test_install_wraps_both_walks_once() -> None:
    sdk_transform.install()
    walk, async_walk = _transform._transform_recursive, _transform._async_transform_recursive
    assert hasattr(walk, "__wrapped__") and hasattr(async_walk, "__wrapped__")
    assert not hasattr(walk.__wrapped__, "__wrapped__")  # type: ignore[attr-defined]
    assert not hasattr(async_walk.__wrapped__, "__wrapped__")  # type: ignore[attr-defined]


@pytest.mark.parametrize("body", CHAT_BODIES)
def test_chat_bodies_are_the_sdks_own(body: dict[str, Any]) -> None:
    expected = sdk_async_walk(body, CHAT)
    assert run(_transform.async_transform(body, CHAT)) == expected
    assert _transform.transform(body, CHAT) == sdk_walk(body, CHAT) == expected


def test_chat_params_are_inert_and_a_plain_body_is_returned_as_it_is() -> None:
    body = CHAT_BODIES[1]
    assert sdk_transform.inert(CHAT)
    assert run(_transform.async_transform(body, CHAT)) is body


@pytest.mark.parametrize("annotation", [Aliased, Dated, Nested, ResponseCreateParamsNonStreaming])
def test_an_alias_or_a_format_anywhere_makes_a_type_active(annotation: Any) -> None:
    assert not sdk_transform.inert(annotation)


def test_recursive_types_are_decided() -> None:
    assert sdk_transform.inert(Tree)
    tree = {"name": "a", "children": [{"name": "b", "children": []}]}
    assert _transform.transform(tree, Tree) is tree


def test_aliases_and_formats_still_apply() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5)
    assert run(_transform.async_transform({"card_id": "c1"}, Aliased)) == {"cardID": "c1"}
    assert _transform.transform({"at": when, "note": "n"}, Dated) == {"at": when.isoformat(), "note": "n"}
    nested = {"items": [{"x": {"card_id": "c2"}}], "kind": "a"}
    assert run(_transform.async_transform(nested, Nested)) == {"items": [{"x": {"cardID": "c2"}}], "kind": "a"}
    betas = {"model": "m", "input": "hi", "betas": ["responses_multi_agent=v1"]}
    assert _transform.transform(betas, ResponseCreateParamsNonStreaming) == sdk_walk(betas, ResponseCreateParamsNonStreaming)
    assert "openai-beta" in _transform.transform(betas, ResponseCreateParamsNonStreaming)


@pytest.mark.parametrize("value", [
    {"model": "m", "messages": [{"role": "user", "content": "a"}], "seed": NOT_GIVEN},
    {"model": "m", "messages": ({"role": "user", "content": "a"},)},
    {"model": "m", "messages": [{"role": "user", "content": "a"}], "metadata": {1: "int key"}},
    {"model": "m", "messages": [{"role": "user", "content": b"bytes"}]},
])
def test_values_that_are_not_plain_json_take_the_sdks_path(value: dict[str, Any]) -> None:
    assert not sdk_transform.is_plain_json(value)
    assert run(_transform.async_transform(value, CHAT)) == sdk_async_walk(value, CHAT)
    assert run(_transform.async_transform(value, CHAT)) is not value


@pytest.mark.parametrize("value", ["s", 1, 1.5, True, None, [], {}, {"a": [1, {"b": None}]}])
def test_plain_json(value: Any) -> None:
    assert sdk_transform.is_plain_json(value)


@pytest.mark.parametrize("value", [(1,), {1: 2}, {"a": dt.date(2026, 1, 1)}, [b"x"], {"a": NOT_GIVEN}, {"a": {1.5}}])
def test_not_plain_json(value: Any) -> None:
    assert not sdk_transform.is_plain_json(value)
