"""The OpenAI SDK's request-body transform, skipped where it cannot change the body.

litellm calls OpenAI-compatible providers through the ``openai`` SDK, which walks every request
body against its TypedDict annotation before sending it (``openai._utils._transform``: key aliases
from ``PropertyInfo(alias=...)``, dates and files formatted by ``PropertyInfo(format=...)``,
pydantic models dumped, ``NOT_GIVEN``/``omit`` values dropped). The walk inspects the type of every
value, and a chat message is checked against each member of the message union: about 0.25 ms per
message on a 2-CPU machine, 25 ms for a 101-message history, the largest per-message cost of a chat
app's resent history (LiteLLM's own proxy pays it too).

For a value that is plain JSON (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``,
``bool``, ``None``) under an annotation that carries no alias and no format anywhere inside it, the
walk returns an equal value: :func:`install` wraps the SDK's recursion so that such a value is
returned as it is, and everything else takes the SDK's own path unchanged. Chat-completion bodies
as litellm builds them are such values, so the walk costs one pass of ``isinstance`` checks.
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from openai._models import PropertyInfo
from openai._utils import _transform
from openai._utils._typing import is_annotated_type, is_required_type

#: JSON scalars: values the SDK's walk returns as they are under an inert annotation.
_SCALARS = (str, int, float, bool, type(None))


def is_plain_json(value: object) -> bool:
    """True when ``value`` is made only of dicts with ``str`` keys, lists and JSON scalars (no tuple,
    date, bytes, file, pydantic model or SDK sentinel anywhere inside)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, inner in item.items():  # type: ignore[attr-defined]
                if type(key) is not str:
                    return False
                stack.append(inner)
        elif kind is list:
            stack.extend(item)  # type: ignore[arg-type]
        elif kind not in _SCALARS:
            return False
    return True


def _changes_value(meta: object) -> bool:
    """True for ``Annotated`` metadata the SDK's walk acts on: a ``PropertyInfo`` with an alias or a
    format (a discriminator only guides parsing responses)."""
    return isinstance(meta, PropertyInfo) and (meta.alias is not None or meta.format is not None)


class _Inertness:
    """Whether the SDK's walk can change a plain-JSON value under an annotation, decided once per
    annotation object and kept by identity (typing objects hash slowly: a Union hashes its members)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[object, bool]] = {}

    def __call__(self, annotation: object) -> bool:
        """True when no alias and no format occurs anywhere inside ``annotation`` (members of unions,
        items of lists, iterables, sequences and dicts, fields of TypedDicts, recursively)."""
        known = self._known.get(id(annotation))
        if known is not None and known[0] is annotation:
            return known[1]
        inert = self._walk(annotation, set())
        self._known[id(annotation)] = (annotation, inert)  # the annotation kept alive: its id stays its own
        return inert

    def _walk(self, annotation: Any, visiting: set[int]) -> bool:
        if id(annotation) in visiting:  # a recursive type: decided by its other parts
            return True
        visiting.add(id(annotation))
        if is_annotated_type(annotation):
            if any(_changes_value(meta) for meta in typing.get_args(annotation)[1:]):
                return False
            return self._walk(typing.get_args(annotation)[0], visiting)
        if is_required_type(annotation):
            return self._walk(typing.get_args(annotation)[0], visiting)
        if _transform.is_typeddict(annotation):  # the SDK's own test (typing and typing_extensions)
            hints = _transform.get_type_hints(annotation, include_extras=True)
            return all(self._walk(hint, visiting) for hint in hints.values())
        return all(self._walk(arg, visiting) for arg in typing.get_args(annotation)
                   if not isinstance(arg, (str, int, float, bool, type(None))))  # Literal values


inert = _Inertness()


def _unchanged(data: object, annotation: type, inner_type: type | None) -> bool:
    """True when the SDK's walk would return ``data`` unchanged: plain JSON under an inert
    ``annotation`` (and ``inner_type``, the item type the SDK passes for a list's items)."""
    return inert(annotation) and (inner_type is None or inert(inner_type)) and is_plain_json(data)


def _skipping(walk: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's synchronous ``_transform_recursive`` that returns plain JSON under an inert
    annotation as it is."""

    def transform_recursive(data: object, *, annotation: type, inner_type: type | None = None) -> object:
        if _unchanged(data, annotation, inner_type):
            return data
        return walk(data, annotation=annotation, inner_type=inner_type)

    transform_recursive.__wrapped__ = walk  # type: ignore[attr-defined]
    return transform_recursive


def _skipping_async(walk: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's ``_async_transform_recursive`` that returns plain JSON under an inert annotation
    as it is."""

    async def async_transform_recursive(data: object, *, annotation: type, inner_type: type | None = None) -> object:
        if _unchanged(data, annotation, inner_type):
            return data
        return await walk(data, annotation=annotation, inner_type=inner_type)

    async_transform_recursive.__wrapped__ = walk  # type: ignore[attr-defined]
    return async_transform_recursive


def install() -> None:
    """Wrap the SDK's two recursive walks (``openai._utils._transform._transform_recursive`` and
    ``_async_transform_recursive``, which every request body and every nested value goes through)
    with the inert-annotation shortcut; idempotent."""
    if not hasattr(_transform._transform_recursive, "__wrapped__"):
        _transform._transform_recursive = _skipping(_transform._transform_recursive)
    if not hasattr(_transform._async_transform_recursive, "__wrapped__"):
        _transform._async_transform_recursive = _skipping_async(_transform._async_transform_recursive)
