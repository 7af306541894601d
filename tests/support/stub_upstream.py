"""A stub OpenAI-compatible provider, served over real HTTP, that records what it received.

The only part the tests replace is the LLM provider. The stub answers
``POST /v1/chat/completions`` in JSON or SSE (OpenAI wire format), and ``POST /v1/embeddings``
with deterministic vectors (:func:`stub_vector`; the bodies recorded in
:attr:`StubUpstream.embedding_requests`). By default it echoes the last user message
("Stub answer: <text>") so tests can see what the model saw; tests can queue scripted replies
(text, an HTTP error status, or a delay; for streams: the exact content chunks, a pause between
chunks, tool-call deltas). Every streamed chunk is recorded with the time it was
written (:attr:`StubUpstream.sent`) so tests can order what the client saw against it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import struct
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from aiohttp import web

#: Length of the stub's embeddings when the request names no ``dimensions``.
EMBEDDING_DIMENSIONS = 8


@dataclass
class Reply:
    """A scripted reply: ``text`` answer, or an error ``status`` with a message; ``delay`` seconds.

    Streams: ``chunks`` the exact content deltas (default: ``text`` split after each space),
    ``chunk_delay`` seconds before each content chunk, ``tool_calls`` OpenAI tool-call deltas sent
    (as given) after the content, ``finish_reason`` of the last chunk; ``truncate``: the connection
    is cut after the content chunks (no finish chunk, no ``[DONE]``: a provider failing mid-stream).
    ``raw``: the exact body of a non-streamed answer (JSON text the stub does not build: a malformed
    or hostile provider). ``gate``: an event the test sets once it has done what must happen while
    the request is at the provider; until then (at most 60 s) a non-streamed answer is held, and a
    stream after its first (role) chunk.
    """

    text: str | None = None
    status: int = 200
    delay: float = 0.0
    chunks: list[str] | None = None
    chunk_delay: float = 0.0
    gate: threading.Event | None = None
    tool_calls: list[list[dict[str, Any]]] | None = None
    finish_reason: str = "stop"
    truncate: bool = False
    raw: str | None = None


class StubUpstream:
    """Runs in its own thread and event loop; ``url`` is its base (``http://127.0.0.1:port/v1``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        #: The JSON bodies of the embeddings requests received, in order.
        self.embedding_requests: list[dict[str, Any]] = []
        #: (time.monotonic(), chunk dict) of every streamed chunk, in the order written.
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.replies: list[Reply] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    # --- control from tests ---
    def start(self) -> "StubUpstream":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stub upstream did not start")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.embedding_requests.clear()
            self.replies.clear()
            self.sent.clear()

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests)

    def received_embeddings(self) -> list[dict[str, Any]]:
        """The embeddings request bodies received since the last :meth:`reset`."""
        with self._lock:
            return list(self.embedding_requests)

    def stop(self) -> None:
        """Shut the server down, its open keep-alive connections included (their handler tasks would
        otherwise stay pending until the garbage collector destroys them, and asyncio logs "Task was
        destroyed but it is pending!" in whatever test runs then), then end the thread and its loop."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    # --- server ---
    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/embeddings", self._embeddings)
        # a handler still sleeping on a scripted delay is cancelled after 1 s at stop (aiohttp's default: 60 s)
        runner = self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _embeddings(self, request: web.Request) -> web.Response:
        """OpenAI embeddings: one :func:`stub_vector` per input string (float lists; base64 when asked);
        a queued :class:`Reply` with an error ``status`` or a ``delay`` applies here too."""
        body = await request.json()
        with self._lock:
            self.embedding_requests.append(body)
            reply = self.replies.pop(0) if self.replies else Reply()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return web.json_response({"error": {"message": f"stub error {reply.status}", "type": "server_error",
                                                "param": None, "code": None}}, status=reply.status)
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        dimensions = body.get("dimensions") or EMBEDDING_DIMENSIONS
        data = []
        for i, text in enumerate(texts):
            vector = stub_vector(str(text), dimensions)
            if body.get("encoding_format") == "base64":
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        tokens = sum(len(str(t).split()) for t in texts)
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            reply = self.replies.pop(0) if self.replies else Reply()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.gate is not None and not body.get("stream"):
            await _wait(reply.gate)
        if reply.status != 200:
            return web.json_response({"error": {"message": f"stub error {reply.status}", "type": "server_error",
                                                "param": None, "code": None}}, status=reply.status)
        last_user = next((m.get("content") for m in reversed(body["messages"]) if m.get("role") == "user"), "")
        text = reply.text if reply.text is not None else f"Stub answer: {last_user}"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                 "total_tokens": prompt_tokens + len(text.split())}
        cid, created, model = "chatcmpl-stub-" + uuid.uuid4().hex[:12], int(time.time()), body["model"]
        if reply.raw is not None and not body.get("stream"):
            return web.Response(text=reply.raw, content_type="application/json")
        if not body.get("stream"):
            return web.json_response({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage,
            })
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(obj: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(obj)}\n\n".encode())
            with self._lock:
                self.sent.append((time.monotonic(), obj))

        try:  # a proxy that stops reading (its client went away) closes the connection: stop sending
            base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
            await send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
            if reply.gate is not None:
                await _wait(reply.gate)
            for piece in _content_chunks(reply, text):
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                await send({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            if reply.truncate and request.transport is not None:
                request.transport.close()
                return response
            for calls in reply.tool_calls or []:
                await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]})
            await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                await send({**base, "choices": [], "usage": usage})
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            pass
        return response


async def _wait(gate: threading.Event) -> None:
    """Wait for ``gate`` (at most 60 s) without blocking the stub's event loop."""
    await asyncio.get_running_loop().run_in_executor(None, gate.wait, 60)


def stub_vector(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """The stub's deterministic embedding of ``text``: ``dimensions`` floats in [-1, 1) from its SHA-256
    (exactly representable in float32, so a base64 round trip gives the same numbers)."""
    digest = hashlib.sha256(text.encode()).digest()
    while len(digest) < dimensions:
        digest += hashlib.sha256(digest).digest()
    return [(b - 128) / 128 for b in digest[:dimensions]]


def _content_chunks(reply: Reply, text: str) -> Iterator[str]:
    """The content deltas of a streamed reply: ``reply.chunks``, else ``text`` split after each space."""
    if reply.chunks is not None:
        yield from reply.chunks
        return
    words = text.split(" ")
    for i, word in enumerate(words):
        yield word if i == len(words) - 1 else word + " "
