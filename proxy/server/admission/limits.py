"""Admission control: per-key rate and concurrency limits, and bounded guardrail lanes
(docs/operations.md "Limits").

- :class:`TokenBucket`: ``rate`` tokens per second up to ``burst`` (the classic token bucket,
  e.g. RFC 2697 §1's committed burst / rate; the same model as OpenAI's documented request
  limits). A request takes one token; without one, the wait until the next token is the
  ``Retry-After``.
- :class:`KeyLimiter`: one bucket and one concurrency count per caller actor; over either limit
  → :func:`rate_limited` (HTTP 429, OpenAI's ``rate_limit_exceeded`` error, ``Retry-After``).
- :class:`ScreenLanes`: the guardrail thread pools. Requests whose client-written text totals
  at least ``large_input_chars`` characters, or holds at least ``large_input_pieces`` texts
  (:func:`screen_size`: each JSON string, key and number is one, and a detector's cost is mostly
  per text), run in their own small pool (the "large lane"), so
  large inputs never occupy the threads short requests need (and run at a lower OS priority,
  :func:`lower_thread_priority`, so short requests get the CPUs first); each lane admits at most its
  threads plus a bounded queue, beyond which a screen is refused with :func:`overloaded` (503,
  ``Retry-After``) instead of an unbounded wait; an input screen that outlasts the time budget is
  answered with :func:`screen_timed_out` (503, fail closed: nothing is forwarded unscreened).
  Long inputs give way (small requests keep their latency
  while a large one is screened): a detector working through a long text's windows calls
  :func:`proxy.guardrails.detectors.patterns.pause_point` between groups of them; in the large
  lane that waits (at most ``yield_seconds`` per call) while any small-lane screen is running, so
  the two do not share the GIL and the CPUs; in either lane a screen whose caller stopped waiting
  (timed out) is abandoned there (:class:`ScreenAbandoned`) instead of running to its end. After
  each large-lane screen the allocator hands freed heap back to the OS (:func:`trim_heap`): a
  150 KB prompt's parse otherwise stays in the process's RSS.
- :func:`check_messages`: the per-request bounds on message count and characters per message (413);
  :func:`too_many_pieces`: the bound on the number of texts one request has screened (413).

Clocks are injected (``clock``: a monotonic seconds function) so the arithmetic is testable.
Everything here runs on the event loop (no locks): admission is decided before any ``await``.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from proxy.guardrails.detectors.patterns import pausing
from proxy.server.errors import GatewayError

__all__ = ["KeyLimiter", "Lease", "ScreenAbandoned", "ScreenLanes", "ScreenSize", "TokenBucket", "check_messages",
           "consume_result", "overloaded", "pin_mmap_threshold", "rate_limited", "screen_size", "screen_timed_out",
           "text_chars", "too_large_to_screen", "too_many_pieces", "trim_heap"]


def _retry_after(seconds: float) -> str:
    """``Retry-After`` delay-seconds (RFC 9110 §10.2.3: a non-negative integer), rounded up, at least 1."""
    return str(max(1, math.ceil(seconds - 1e-9)))


def rate_limited(message: str, seconds: float) -> GatewayError:
    """HTTP 429 in OpenAI's documented shape (type ``requests``, code ``rate_limit_exceeded``) with a
    ``Retry-After`` of ``seconds`` rounded up; counted as ``sonate_requests_total{result="rate_limited"}``."""
    wait = _retry_after(seconds)
    return GatewayError(429, f"{message} Please try again in {wait}s.", "requests", "rate_limit_exceeded",
                        result="rate_limited", headers={"Retry-After": wait})


def too_large_to_screen(chars: int, limit: int) -> GatewayError:
    """HTTP 413 (type ``invalid_request_error``, code ``input_too_large``): the client-written text
    (``chars`` characters) exceeds the per-request screening budget ``limit``; the request is
    refused before any detector runs and never forwarded unscreened. Counted as
    ``sonate_requests_total{result="client_error"}``."""
    return GatewayError(413, f"The messages hold {chars} characters of text; the guardrails screen at most {limit} "
                             f"per request (server.limits.max_screen_chars). Send less text per request.",
                        "invalid_request_error", "input_too_large")


def too_many_pieces(pieces: int, limit: int) -> GatewayError:
    """HTTP 413 (type ``invalid_request_error``, code ``input_too_large``): the request holds ``pieces``
    separately screened texts (every string, object key and number the guardrails read: message
    texts, tool-call arguments' keys and values, tool schemas, passed-through fields), more than
    ``limit`` (``server.limits.max_screen_pieces``). Refused before any detector runs, never forwarded
    unscreened; counted as
    ``sonate_requests_total{result="client_error"}``."""
    return GatewayError(413, f"The request holds {pieces} separately screened texts (strings, object keys and "
                             f"numbers); the guardrails screen at most {limit} per request "
                             f"(server.limits.max_screen_pieces). Send fewer values per request.",
                        "invalid_request_error", "input_too_large")


def overloaded(message: str, seconds: float = 1.0, code: str = "overloaded") -> GatewayError:
    """HTTP 503 (type ``server_error``, ``code``) with ``Retry-After``; counted as
    ``sonate_requests_total{result="overloaded"}``."""
    wait = _retry_after(seconds)
    return GatewayError(503, f"{message} Please try again in {wait}s.", "server_error", code,
                        result="overloaded", headers={"Retry-After": wait})


def screen_timed_out(seconds: float) -> GatewayError:
    """HTTP 503 (type ``server_error``, code ``guardrail_timeout``) with ``Retry-After``: the input
    guardrails did not finish within the per-request budget ``seconds``
    (``server.limits.screen_timeout_seconds``). Fail closed: the request is not forwarded and writes no
    receipt (nothing was decided); counted as ``sonate_requests_total{result="overloaded"}``. The
    detector thread stops at its next pause point (:class:`ScreenAbandoned`; work without one
    finishes in the background) and keeps its lane slot until then, so the lane's back-pressure
    stays true."""
    return overloaded(f"The guardrails did not finish screening this request within {seconds:g} s "
                      f"(server.limits.screen_timeout_seconds).", code="guardrail_timeout")


def check_messages(messages: list[dict[str, Any]], max_messages: int, max_message_chars: int) -> ScreenSize:
    """Refuse a request over the per-request bounds (0 disables either): more than ``max_messages``
    messages → 413 ``too_many_messages``; a message holding more than ``max_message_chars``
    characters of text (:func:`text_chars`) → 413 ``message_too_large`` naming its index. Each error
    names its ``server.limits`` setting. Returns :func:`screen_size` of ``messages``, summed over
    the one walk of each message the character bound needs."""
    if max_messages and len(messages) > max_messages:
        raise GatewayError(413, f"The request has {len(messages)} messages; at most {max_messages} are accepted "
                                f"(server.limits.max_messages).", "invalid_request_error", "too_many_messages",
                           param="messages")
    total = ScreenSize(0, 0)
    for i, message in enumerate(messages):
        size = screen_size(message)
        if max_message_chars and size.chars > max_message_chars:
            raise GatewayError(413, f"messages.{i} holds {size.chars} characters of text; at most {max_message_chars} "
                                    f"per message are accepted (server.limits.max_message_chars).",
                               "invalid_request_error", "message_too_large", param=f"messages.{i}")
        total += size
    return total


class TokenBucket:
    """``rate`` tokens per second (> 0), at most ``burst`` (>= 1) stored; starts full.

    :meth:`take` removes one token and returns 0.0, or, when none is available, removes nothing
    and returns the seconds until one will be.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        """Raise ValueError unless ``rate > 0`` and ``burst >= 1``."""
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.clock = float(rate), float(burst), clock
        self.tokens = float(burst)
        self.updated = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = now

    def take(self) -> float:
        """Take one token: 0.0 when taken, else the seconds until one is available (nothing taken)."""
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    @property
    def full(self) -> bool:
        """True when the bucket holds ``burst`` tokens (it can be forgotten without changing anything)."""
        self._refill()
        return self.tokens >= self.burst


@dataclass
class Lease:
    """One admitted request's concurrency slot; :meth:`release` (or leaving the ``with``) frees it once."""

    limiter: "KeyLimiter | None"
    actor: str
    released: bool = field(default=False)

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        if not self.released and self.limiter is not None:
            self.limiter._release(self.actor)
        self.released = True

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class KeyLimiter:
    """Per-actor limits: at most ``max_concurrent`` requests in flight and a token bucket of
    ``rate`` requests/s with ``burst`` (0 disables either limit).

    Actors are the names of configured keys (a bounded set); a full, idle bucket is dropped.
    """

    def __init__(self, max_concurrent: int, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """No I/O. ``rate`` in requests per second; ``burst`` in requests."""
        self.max_concurrent, self.rate, self.burst, self.clock = max_concurrent, rate, max(1, burst), clock
        self.active: dict[str, int] = {}
        self.buckets: dict[str, TokenBucket] = {}

    def acquire(self, actor: str) -> Lease:
        """Admit one request of ``actor``: a :class:`Lease` to release when it is answered.

        Raises GatewayError 429 (:func:`rate_limited`) when ``actor`` already has ``max_concurrent``
        requests in flight (Retry-After: 1) or its bucket is empty (Retry-After: until the next token).
        A refused request takes no token.
        """
        if self.max_concurrent and self.active.get(actor, 0) >= self.max_concurrent:
            raise rate_limited(f"Too many concurrent requests for this key (limit {self.max_concurrent}).", 1.0)
        if self.rate:
            bucket = self.buckets.get(actor)
            if bucket is None:
                bucket = self.buckets[actor] = TokenBucket(self.rate, self.burst, self.clock)
            wait = bucket.take()
            if wait:
                raise rate_limited(f"Rate limit reached for this key ({self.rate:g} requests/s, "
                                   f"burst {self.burst}).", wait)
        self.active[actor] = self.active.get(actor, 0) + 1
        return Lease(self, actor)

    def _release(self, actor: str) -> None:
        left = self.active.get(actor, 0) - 1
        if left > 0:
            self.active[actor] = left
        else:
            self.active.pop(actor, None)
            bucket = self.buckets.get(actor)
            if bucket is not None and bucket.full:
                del self.buckets[actor]


def text_chars(value: Any) -> int:
    """Total length in characters of every string (keys included) and of every number's JSON text in a
    JSON-like ``value`` (the guardrails screen each number as a text)."""
    return screen_size(value).chars


class ScreenSize(NamedTuple):
    """What a screen will read: ``chars`` characters in ``pieces`` texts (:func:`screen_size`)."""

    chars: int
    pieces: int

    def __add__(self, other: "ScreenSize") -> "ScreenSize":  # type: ignore[override]
        return ScreenSize(self.chars + other.chars, self.pieces + other.pieces)


def _number_chars(value: int | float) -> int:
    """Characters of a number's JSON text, as the guardrails read it (``json.dumps``); a huge integer
    is counted by its digits without converting it (CPython limits int → str conversion)."""
    if isinstance(value, int) and abs(value) >= 10**18:
        return math.ceil(value.bit_length() * math.log10(2)) + 1
    return len(json.dumps(value))


def screen_size(value: Any) -> ScreenSize:
    """The size of a JSON-like ``value`` as the guardrails read it, in one pass without copying:
    characters of every string, key and number, and the number of texts among them (each non-empty
    string, each key, each number; a string that is itself a JSON object or array, such as tool-call
    ``arguments``, white space around it included, counts the characters and texts inside it). The text count bounds what Privacy analyses one by one
    (schema keywords and other structure included, so it is an upper bound on the screen's pieces:
    :meth:`proxy.guardrails.engine.GuardrailEngine.count_pieces` is exact). Booleans and null are
    not text."""
    chars = pieces = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            bare = item.strip()  # json.loads, as the guardrails parse it, skips white space around the value
            if bare[:1] in ("{", "[") and bare[-1:] in ("}", "]"):
                try:
                    stack.append(json.loads(item))
                    continue
                except (ValueError, RecursionError):
                    pass
            chars += len(item)
            pieces += bool(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                chars += len(str(key))
                pieces += 1
                stack.append(inner)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            chars += _number_chars(item)
            pieces += 1
    return ScreenSize(chars, pieces)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None when the C library is not glibc)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


#: glibc's ``M_MMAP_THRESHOLD`` (mallopt(3)): blocks from this size on get their own mapping, given
#: back to the OS when freed. 128 KiB is glibc's starting value; pinning it turns off the dynamic
#: threshold, which each freed mapped block raises (up to 32 MiB), after which the multi-MB buffers of
#: a long screen come from the heap arenas and stay resident as fragments (a 150 KB prompt
#: left ~50 MB in the RSS, ~25 MB with the threshold pinned).
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # malloc.h


def pin_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``size`` bytes (``mallopt(M_MMAP_THRESHOLD)``), unless the
    operator set ``MALLOC_MMAP_THRESHOLD_`` (glibc then already did). True when set; False when the
    C library is not glibc or the variable is set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, size))


def lower_thread_priority(nice: int) -> bool:
    """Give the calling thread the nice value ``nice`` (0–19; a higher one it already has is kept),
    so the kernel schedules the other threads and processes first when they compete for the CPUs.

    Linux only: setpriority(2) with ``PRIO_PROCESS`` and a thread id changes that thread alone
    (on other systems it would renice the whole process, so nothing is done there). Used as the
    large-input lane's thread initializer (``server.limits.large_input_nice``). Returns True when
    the value was set, False when ``nice`` is 0, the system is not Linux or the kernel refused.
    """
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))
    except OSError:
        return False
    return True


def trim_heap() -> bool:
    """Hand the heap memory the allocator holds free back to the OS: glibc ``malloc_trim(0)``
    (every arena; man malloc_trim(3)). Freed blocks otherwise stay in the process's RSS: spaCy's
    parse of a long prompt frees tens to hundreds of MB that glibc keeps for later allocations.
    Takes milliseconds (ctypes releases the GIL meanwhile). Returns True when memory was released,
    False when none was or the C library is not glibc."""
    trim = _malloc_trim()
    return bool(trim and trim(0))


class ScreenAbandoned(Exception):
    """Raised at a detector's pause point when nobody awaits its screen any more (it timed out)."""


@dataclass
class _Lane:
    name: str
    executor: Executor | None
    slots: int
    busy: int = 0


class ScreenLanes:
    """Where guardrail work runs: the ``small`` pool, or the ``large`` one for work on at least
    ``large_chars`` characters or at least ``large_pieces`` texts (``large=None``: one lane; 0: that
    measure never makes work large).

    A lane admits ``small_slots`` / ``large_slots`` screens at once (its threads plus its queue);
    :meth:`run` with ``admit=True`` raises :func:`overloaded` beyond that, with ``admit=False``
    (the output screen of a request already admitted) it queues. An admitted screen of more than
    ``max_chars`` characters (0: no budget) is refused with :func:`too_large_to_screen`; an admitted
    screen still running after ``timeout`` seconds (0: no budget) with :func:`screen_timed_out`.
    At a detector's pause point (module docstring) a large-lane screen waits up to
    ``yield_seconds`` (0: never) while small-lane screens run, and a timed-out screen stops.
    ``on_change(lane name, +1 | -1)`` is called when a lane takes a screen and when it gives its slot
    back (metrics); :meth:`busy` tells how many screens a lane holds (running or queued, a timed-out
    one until its thread stops).
    """

    def __init__(self, small: Executor | None, small_slots: int, large: Executor | None = None,
                 large_slots: int = 1, large_chars: int = 0, max_chars: int = 0, timeout: float = 0.0,
                 yield_seconds: float = 0.2, large_pieces: int = 0,
                 on_change: Callable[[str, int], None] | None = None) -> None:
        """No I/O; the executors belong to the caller (it shuts them down)."""
        self.small = _Lane("small", small, small_slots)
        self.large = _Lane("large", large, large_slots) if large is not None else None
        self.large_chars = large_chars
        self.large_pieces = large_pieces
        self.on_change = on_change
        self.max_chars = max_chars
        self.timeout = timeout
        self.yield_seconds = yield_seconds
        #: Set while no small-lane screen runs (waited on by large-lane threads; changed on the loop).
        self.small_idle = threading.Event()
        self.small_idle.set()

    def lane(self, chars: int, pieces: int = 0) -> _Lane:
        """The lane for work on ``chars`` characters of text in ``pieces`` texts."""
        if self.large is not None and ((self.large_chars and chars >= self.large_chars)
                                       or (self.large_pieces and pieces >= self.large_pieces)):
            return self.large
        return self.small

    def busy(self, name: str) -> int:
        """Screens the lane ``name`` (``small`` / ``large``) holds now; 0 for a lane that does not exist."""
        lane = self.small if name == "small" else self.large
        return lane.busy if lane is not None else 0

    async def run(self, fn: Callable[..., Any], *args: Any, chars: int, pieces: int = 0, admit: bool = True) -> Any:
        """``fn(*args)`` in the lane for ``chars`` characters in ``pieces`` texts (:meth:`lane`). With
        ``admit``: GatewayError 413 over the
        ``max_chars`` budget, 503 when the lane is full (no unbounded queue behind busy detector threads),
        503 ``guardrail_timeout`` after ``timeout`` seconds. The lane slot is held until ``fn`` returns or
        raises, also when the caller stopped waiting (a timed-out screen occupies its thread until its
        next pause point)."""
        if admit and self.max_chars and chars > self.max_chars:
            raise too_large_to_screen(chars, self.max_chars)
        lane = self.lane(chars, pieces)
        if admit and lane.busy >= lane.slots:
            raise overloaded(f"The guardrail detectors are saturated ({lane.name} inputs).")
        lane.busy += 1
        if self.on_change is not None:
            self.on_change(lane.name, 1)
        if lane is self.small:
            self.small_idle.clear()
        abandoned = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(lane.executor, self._call, lane, abandoned, fn, args)
        future.add_done_callback(lambda _: self._release(lane))
        if not (admit and self.timeout):
            return await future
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout)
        except TimeoutError:
            abandoned.set()  # it stops at its next pause point
            future.add_done_callback(consume_result)  # its late result or error is not wanted
            raise screen_timed_out(self.timeout) from None

    def _call(self, lane: _Lane, abandoned: threading.Event, fn: Callable[..., Any], args: tuple) -> Any:
        """``fn(*args)`` in a thread of ``lane``, with the lane's pause hook; the heap trimmed after a
        large-lane screen."""
        large = lane is not self.small

        def pause() -> None:
            if abandoned.is_set():
                raise ScreenAbandoned("the screen's caller stopped waiting")
            if large and self.yield_seconds:
                self.small_idle.wait(self.yield_seconds)

        try:
            with pausing(pause):
                return fn(*args)
        finally:
            if large:
                trim_heap()

    def _release(self, lane: _Lane) -> None:
        lane.busy -= 1
        if self.on_change is not None:
            self.on_change(lane.name, -1)
        if lane is self.small and not lane.busy:
            self.small_idle.set()


def consume_result(future: "asyncio.Future[Any]") -> None:
    """Retrieve a finished future's exception (one nobody awaited is not logged as lost); a done
    callback for futures whose outcome may be left unread."""
    if not future.cancelled():
        future.exception()
