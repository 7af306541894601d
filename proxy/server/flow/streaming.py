"""A forwarded stream, passed through chunk by chunk with the output guardrails enforced.

:class:`StreamedAnswer` reads the provider's ``chat.completion.chunk``s
(:class:`proxy.server.flow.upstream.UpstreamStream`), feeds the content to the incremental scanner
(:class:`proxy.guardrails.stream.StreamScanner`; windows are screened in the detector thread
lane) and yields the SSE events the client receives (docs/operations.md "Streams"):

1. a role chunk when the provider's first chunk arrives (its ``id`` and ``created`` are the
   stream's); then content chunks as the scanner releases them; tool-call deltas
   unchanged (only the chunk's ``id``/``created``/``model`` are the stream's);
2. when a guardrail fires: the provider stream is closed and a last choice chunk with
   ``finish_reason: "content_filter"`` (carrying the policy's apology when no content had been
   sent yet) ends the answer: the text still held back never leaves;
3. otherwise the provider's ``finish_reason`` chunk, and the usage chunk (empty ``choices``)
   when ``stream_options.include_usage`` is set;
4. the receipts, appended (:meth:`proxy.server.flow.pipeline.Gateway.seal_stream`) with
   ``outputs_hash`` over the chat.completion that the delivered chunks assemble to;
5. ``data: [DONE]`` — or, when the receipts cannot be appended under ``fail_closed``, an error
   event (``data: {"error": {...}}``, code ``ledger_unavailable``) instead of ``[DONE]``.

A provider failure mid-stream, or a client that goes away, still gets its receipts (what was
delivered up to then); the provider failure is then sent as an error event without ``[DONE]``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, AsyncGenerator, AsyncIterator, Protocol

from proxy.guardrails.decisions import Decision
from proxy.guardrails.stream import (
    OutputMask,
    StreamScanner,
    Window,
    gates_on_window,
    model_apology,
    screen_window,
    stream_holds,
)
from proxy.server.admission.limits import ScreenLanes
from proxy.server.errors import GatewayError, guardrail_failed
from proxy.server.flow.exchange import Exchange
from proxy.server.flow.upstream import UpstreamError, UpstreamStream
from proxy.server.flow.wire import completion_body, error_body, new_completion_id, sse_event
from proxy.server.telemetry.metrics import Metrics


class _Services(Protocol):
    """What a stream needs of :class:`proxy.server.flow.pipeline.Gateway`: its guardrail lanes,
    metrics and the receipts of a finished stream (:meth:`~proxy.server.flow.pipeline.Gateway.seal_stream`)."""

    lanes: ScreenLanes
    metrics: Metrics

    async def seal_stream(self, x: Exchange, result: Any, body: dict[str, Any], decisions: list[Decision],
                          model_apology: bool, receipt_id: str, stream: dict[str, Any]) -> Any: ...

__all__ = ["StreamedAnswer", "assemble_tool_calls"]

log = logging.getLogger("sonate.streaming")


def assemble_tool_calls(deltas: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The tool calls that OpenAI tool-call deltas assemble to (by ``index``: the first delta's
    ``id``/``type``/name, ``arguments`` concatenated), None when there were none."""
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        call = calls.setdefault(int(delta.get("index") or 0), {"id": None, "type": "function",
                                                              "function": {"name": "", "arguments": ""}})
        call["id"] = call["id"] or delta.get("id")
        call["type"] = delta.get("type") or call["type"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""
    return [calls[i] for i in sorted(calls)] or None


class StreamedAnswer:
    """One forwarded streamed request from its first byte to ``[DONE]``; iterate :meth:`events`
    once (close it with ``contextlib.aclosing``: a client that goes away still gets its receipts).

    ``receipt_id``: assigned before the first byte (the decisive receipt's id, sent in the headers).
    """

    def __init__(self, gateway: _Services, x: Exchange, upstream: UpstreamStream, include_usage: bool,
                 receipt_id: str) -> None:
        """Bind the request's state; no I/O."""
        assert x.screen is not None
        masker = x.screen.masker
        policies = x.policy.engine.policies
        restore = masker.restore if masker is not None and any(
            p.kind == "privacy" and "input" in p.stages and p.restore_in_answer for p in policies) else None
        self.gateway, self.x, self.upstream = gateway, x, upstream
        self.include_usage, self.receipt_id = include_usage, receipt_id
        self.scanner = StreamScanner(holds=stream_holds(policies), restore=restore, gated=gates_on_window(policies))
        self.output_mask = OutputMask() if self.scanner.gated else None
        self.base: dict[str, Any] = {"id": "", "object": "chat.completion.chunk", "created": int(time.time()),
                                     "model": x.req.model}
        self.delivered: list[str] = []
        self.tool_deltas: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.refusal: Decision | None = None
        self.ended = "open"
        self._first_content: float | None = None

    # -- events -----------------------------------------------------------------------------------
    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_event({**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    async def events(self) -> AsyncGenerator[bytes, None]:
        """The SSE events, in order (see the module docstring). Never raises for provider or
        ledger failures (they become error events); the receipts are appended in every case."""
        sealed = False
        try:
            failure = None
            try:
                async for event in self._relay():
                    yield event
            except UpstreamError as exc:
                failure = error_body(exc.message, exc.type, code=exc.code)
                self.ended = "upstream_error"
            except Exception as exc:  # a detector raised screening the stream: stop it, say so
                failure = await self._guardrail_failed(exc)
            else:
                try:
                    async for event in self._close_answer():
                        yield event
                except Exception as exc:  # the last window's screen raised
                    failure = await self._guardrail_failed(exc)
            sealed = True
            error = await self._seal()
            final = failure or error
            if final:
                yield sse_event(final)
                return
            yield sse_event("[DONE]")
        finally:
            if not sealed:  # the client went away (or the task was cancelled): receipt what it got
                self.ended = "client_disconnected"
                await self.upstream.aclose()
                await self._seal()

    async def _guardrail_failed(self, exc: Exception) -> dict[str, Any]:
        """A detector raised ``exc`` while the stream was screened: close the provider stream, record
        ``ended: guardrail_error`` and return the error event's body (logged by type only:
        :func:`proxy.server.errors.guardrail_failed`)."""
        error = guardrail_failed("output", self.x.request_id, exc)
        self.ended = "guardrail_error"
        await self.upstream.aclose()
        return error_body(error.message, error.type, code=error.code)

    async def abandon(self) -> None:
        """The response could not even start (the client went away before the headers): close the
        provider stream and append the receipts of an answer nothing of which was delivered."""
        self.ended = "client_disconnected"
        await self.upstream.aclose()
        await self._seal()

    async def _relay(self) -> AsyncIterator[bytes]:
        """Provider chunks → content released by the scanner, tool-call deltas; stops early when a
        guardrail fires (the provider stream is closed)."""
        async for chunk in self.upstream:
            if not self.base["id"]:
                self.base["id"] = chunk.get("id") or new_completion_id()
                self.base["created"] = chunk.get("created") or self.base["created"]
                yield self._chunk({"role": "assistant", "content": ""})
            if chunk.get("usage"):
                self.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    if await self._screen(self.scanner.feed(delta["content"])):
                        await self.upstream.aclose()
                        return
                    if piece := self.scanner.release():
                        yield self._chunk({"content": piece})
                        self._delivered(piece)
                if delta.get("tool_calls"):
                    yield self._chunk({"tool_calls": delta["tool_calls"]})
                    self.tool_deltas.extend(delta["tool_calls"])
                self.finish_reason = choice.get("finish_reason") or self.finish_reason

    async def _close_answer(self) -> AsyncIterator[bytes]:
        """The final window, the rest of the content, the finish chunk and the usage chunk."""
        if not self.base["id"]:  # the provider sent no chunk at all
            self.base["id"] = new_completion_id()
            yield self._chunk({"role": "assistant", "content": ""})
        if self.refusal is None:
            final = self.scanner.finish()
            if not await self._screen([final] if final else []):
                if piece := self.scanner.release(final=True):
                    yield self._chunk({"content": piece})
                    self._delivered(piece)
        if self.refusal is not None:
            apology = "" if self.delivered else self.x.policy.policies[self.refusal.policy_id].apology
            self.finish_reason = "content_filter"
            yield self._chunk({"content": apology} if apology else {}, "content_filter")
            if apology:
                self._delivered(apology)
        else:
            self.finish_reason = self.finish_reason or "stop"
            yield self._chunk({}, self.finish_reason)
        self.ended = self.finish_reason
        if self.include_usage:
            yield sse_event({**self.base, "choices": [], "usage": self._usage()})

    async def _screen(self, windows: list[Window]) -> bool:
        """Screen ``windows`` in the detector lane (and mask them when privacy screens outputs);
        True (and the scanner stopped) when a guardrail fired."""
        lanes, engine = self.gateway.lanes, self.x.policy.engine
        for window in windows:
            t = time.perf_counter()
            readable = self.scanner.readable(window.text)  # output Safety judges what the client reads
            decision = await lanes.run(screen_window, engine, readable, chars=len(readable), admit=False)
            if decision is None and self.output_mask is not None:  # masked up to the window's end, less a tail
                raw = self.scanner.raw
                self.scanner.accept(window, await lanes.run(self.output_mask.advance, engine, raw, window.end,
                                                            window.final, chars=window.end - self.output_mask.done,
                                                            admit=False))
            self.gateway.metrics.guardrail_duration.labels("output").observe(time.perf_counter() - t)
            if decision is not None:
                self.refusal = decision
                self.scanner.stop()
                return True
        return False

    def _delivered(self, piece: str) -> None:
        """Count ``piece`` as received by the client (called after the consumer wrote it)."""
        if self._first_content is None:
            self._first_content = time.perf_counter()
            observe = getattr(self.gateway.metrics, "stream_first_content", None)  # metrics.py: see docs
            if observe is not None:
                observe.labels(self.x.req.model).observe(self._first_content - self.x.started)
        self.delivered.append(piece)

    def _usage(self) -> dict[str, Any]:
        """The provider's usage object as received (zeros when it sent none)."""
        return self.usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    # -- receipts ---------------------------------------------------------------------------------
    def body(self) -> dict[str, Any]:
        """The chat.completion the delivered chunks assemble to (the receipts' ``outputs_hash``)."""
        text = "".join(self.delivered)
        tool_calls = assemble_tool_calls(self.tool_deltas)
        return completion_body(model=self.x.req.model, content=text if (text or not tool_calls) else None,
                               finish_reason=self.finish_reason or "stop", usage=self._usage(),
                               completion_id=self.base["id"] or None, created=self.base["created"],
                               tool_calls=tool_calls)

    async def _seal(self) -> dict[str, Any] | None:
        """Append the receipts of what was delivered; the error body to send when that failed
        (fail_closed), None when they are appended (or spooled)."""
        decisions = [self.refusal] if self.refusal else []
        if self.output_mask is not None:
            decisions += self.output_mask.decisions(self.x.policy.engine)
        text = "".join(self.delivered)
        apology = (self.refusal is None and bool(text.strip()) and await self.gateway.lanes.run(
            model_apology, self.x.policy.engine, text, chars=len(text), admit=False))
        try:
            await self.gateway.seal_stream(self.x, self.upstream.result(), self.body(), decisions, apology,
                                           self.receipt_id, {"ended": self.ended, "delivered_chars": len(text)})
        except GatewayError as exc:
            return error_body(exc.message, exc.type, code=exc.code)
        except Exception:  # never let a bug here turn into an unreceipted [DONE]
            log.exception("sealing the stream of %s failed", self.x.request_id)
            return error_body("The stream's receipts could not be written.", "api_error", code="server_error")
        return None
