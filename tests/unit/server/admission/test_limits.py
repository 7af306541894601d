"""proxy.server.admission.limits: token bucket and per-key limiter arithmetic on an injected clock, and the
guardrail lanes' admission (a real thread pool; no detectors needed)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from proxy.config import LimitsConfig, ServerConfig
from proxy.guardrails.detectors.patterns import pause_point
from proxy.server.admission.limits import (
    KeyLimiter,
    ScreenAbandoned,
    ScreenLanes,
    ScreenSize,
    TokenBucket,
    check_messages,
    consume_result,
    lower_thread_priority,
    pin_mmap_threshold,
    screen_size,
    text_chars,
    too_large_to_screen,
    too_many_pieces,
    trim_heap,
)
from proxy.server.errors import GatewayError


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_spends_its_burst_then_waits_one_token_time() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)  # one token every 1/rate s
    clock.now += 0.2
    assert bucket.take() == pytest.approx(0.3)  # a refused take spends nothing
    clock.now += 0.3
    assert bucket.take() == 0.0
    assert bucket.take() == pytest.approx(0.5)


def test_bucket_refills_to_burst_and_no_further() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=10.0, burst=2, clock=clock)
    bucket.take(), bucket.take()
    clock.now += 3600
    assert bucket.full
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]


def test_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError):
        TokenBucket(rate=1, burst=0)


def test_rate_limit_429_in_openai_shape_with_retry_after_rounded_up() -> None:
    clock = Clock()
    limiter = KeyLimiter(max_concurrent=0, rate=0.25, burst=1, clock=clock)  # one request per 4 s
    limiter.acquire("alice").release()
    with pytest.raises(GatewayError) as refused:
        limiter.acquire("alice")
    error = refused.value
    assert (error.status, error.type, error.code, error.result) == (429, "requests", "rate_limit_exceeded",
                                                                    "rate_limited")
    assert error.headers == {"Retry-After": "4"}
    clock.now += 2.5
    with pytest.raises(GatewayError) as again:
        limiter.acquire("alice")
    assert again.value.headers == {"Retry-After": "2"}  # 1.5 s left → 2 (never 0, never early)
    limiter.acquire("bob").release()  # keys are independent
    clock.now += 1.5
    limiter.acquire("alice").release()


def test_concurrency_limit_counts_in_flight_requests_per_key() -> None:
    limiter = KeyLimiter(max_concurrent=2, rate=0, burst=1)
    first, second = limiter.acquire("alice"), limiter.acquire("alice")
    with pytest.raises(GatewayError) as refused:
        limiter.acquire("alice")
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    assert "concurrent" in refused.value.message
    limiter.acquire("bob").release()
    first.release()
    first.release()  # idempotent: does not free a second slot
    with limiter.acquire("alice"):
        with pytest.raises(GatewayError):
            limiter.acquire("alice")
    second.release()
    assert limiter.active == {}


def test_concurrency_refusal_takes_no_token() -> None:
    clock = Clock()
    limiter = KeyLimiter(max_concurrent=1, rate=1.0, burst=1, clock=clock)
    held = limiter.acquire("alice")  # the only token
    clock.now += 1.0  # a token is back
    with pytest.raises(GatewayError):
        limiter.acquire("alice")  # refused for concurrency...
    held.release()
    limiter.acquire("alice").release()  # ...so the token is still there


def test_idle_full_buckets_are_forgotten() -> None:
    clock = Clock()
    limiter = KeyLimiter(max_concurrent=4, rate=1.0, burst=2, clock=clock)
    limiter.acquire("alice").release()
    assert "alice" in limiter.buckets  # a token short: kept
    lease = limiter.acquire("alice")
    clock.now += 5  # refilled while the request ran
    lease.release()
    assert limiter.buckets == {} and limiter.active == {}


def test_limits_config_defaults_and_validation() -> None:
    limits = ServerConfig().limits
    assert limits.max_concurrent_per_key > 0 and limits.requests_per_second > 0 and limits.burst >= 1
    assert ServerConfig(limits={"burst": 3}).limits.burst == 3
    with pytest.raises(ValueError):
        LimitsConfig(bogus=1)
    with pytest.raises(ValueError):
        LimitsConfig(requests_per_second=-1)


def test_text_chars_counts_every_string() -> None:
    assert text_chars([{"role": "user", "content": "abc"}]) == len("role") + 4 + len("content") + 3
    assert text_chars({"a": [None, True, "xy"]}) == 3


def test_screen_size_counts_numbers_keys_and_the_texts_inside_json_strings() -> None:
    """Every number is a text the guardrails read (20,000 numbers must not count 0 characters)."""
    assert screen_size({"x_list": list(range(20_000))}) == (6 + sum(len(str(n)) for n in range(20_000)), 20_001)
    assert screen_size(["w1", "", 2.5, False, None]) == (5, 2)
    arguments = {"arguments": json.dumps({"ids": [11, 22, 33], "note": "hi"})}  # a tool call's JSON text
    assert screen_size(arguments) == (len("arguments") + len("ids") + 6 + len("note") + 2, 1 + 1 + 3 + 1 + 1)
    assert screen_size({"content": "[not json"}).pieces == 2
    assert screen_size(10**40).chars >= 41  # huge integers counted without converting them


async def test_lanes_route_many_pieces_to_the_large_lane() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    seen: list[tuple[str, int]] = []
    lanes = ScreenLanes(small, 2, large, 1, large_chars=8000, large_pieces=500,
                        on_change=lambda lane, delta: seen.append((lane, delta)))
    try:
        assert lanes.lane(10, 499) is lanes.small and lanes.lane(10, 500) is lanes.large
        assert (await lanes.run(threading.current_thread, chars=10, pieces=500)).name.startswith("large")
        assert (await lanes.run(threading.current_thread, chars=10, pieces=3)).name.startswith("small")
        await asyncio.sleep(0)  # the release callbacks
        assert seen == [("large", 1), ("large", -1), ("small", 1), ("small", -1)]
        assert lanes.busy("large") == lanes.busy("small") == 0
    finally:
        small.shutdown(), large.shutdown()


async def test_lanes_route_by_size_and_refuse_beyond_the_queue() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, small_slots=2, large=large, large_slots=1, large_chars=100)
    gate = threading.Event()

    def blocked() -> str:
        gate.wait(10)
        return threading.current_thread().name

    try:
        running = asyncio.ensure_future(lanes.run(blocked, chars=500))
        await asyncio.sleep(0.05)
        with pytest.raises(GatewayError) as refused:
            await lanes.run(blocked, chars=200)  # the large lane's one slot is taken
        assert (refused.value.status, refused.value.code, refused.value.result) == (503, "overloaded", "overloaded")
        assert refused.value.headers == {"Retry-After": "1"}
        # a small request still runs while the large lane is busy
        assert (await lanes.run(threading.current_thread, chars=10)).name.startswith("small")
        queued = asyncio.ensure_future(lanes.run(blocked, chars=200, admit=False))  # output screens queue
        gate.set()
        assert (await running).startswith("large") and (await queued).startswith("large")
        assert lanes.large.busy == 0 and lanes.small.busy == 0
    finally:
        gate.set()
        small.shutdown(), large.shutdown()


async def test_a_text_of_exactly_large_input_chars_runs_in_the_large_lane() -> None:
    """``large_input_chars`` is the large lane's first size (``>=``): the boundary on both sides."""
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, small_slots=2, large=large, large_slots=1, large_chars=100)
    try:
        assert (await lanes.run(threading.current_thread, chars=100)).name.startswith("large")
        assert (await lanes.run(threading.current_thread, chars=99)).name.startswith("small")
        assert lanes.lane(100) is lanes.large and lanes.lane(99) is lanes.small
    finally:
        small.shutdown(), large.shutdown()


async def test_a_screen_over_the_budget_is_refused_before_any_detector_runs() -> None:
    pool = ThreadPoolExecutor(1, "small")
    lanes = ScreenLanes(pool, small_slots=4, max_chars=1000)
    ran: list[int] = []
    try:
        with pytest.raises(GatewayError) as refused:
            await lanes.run(ran.append, 1, chars=1001)
        assert (refused.value.status, refused.value.type, refused.value.code) == (413, "invalid_request_error",
                                                                                 "input_too_large")
        assert "1001" in refused.value.message and "1000" in refused.value.message
        assert ran == [] and lanes.small.busy == 0
        await lanes.run(ran.append, 2, chars=1000)  # at the budget: screened
        await lanes.run(ran.append, 3, chars=50_000, admit=False)  # output screens are never refused
        assert ran == [2, 3]
        assert LimitsConfig().max_screen_chars == 200_000 and LimitsConfig(max_screen_chars=0).max_screen_chars == 0
    finally:
        pool.shutdown()


async def test_a_screen_past_its_time_budget_fails_closed_and_keeps_its_slot_until_the_thread_ends() -> None:
    pool = ThreadPoolExecutor(1, "small")
    lanes = ScreenLanes(pool, small_slots=1, timeout=0.2)
    gate, finished = threading.Event(), threading.Event()

    def slow() -> str:
        gate.wait(10)
        finished.set()
        return "late verdict"

    try:
        with pytest.raises(GatewayError) as timed_out:
            await lanes.run(slow, chars=10)
        error = timed_out.value
        assert (error.status, error.type, error.code, error.result) == (503, "server_error", "guardrail_timeout",
                                                                        "overloaded")
        assert "server.limits.screen_timeout_seconds" in error.message and error.headers == {"Retry-After": "1"}
        # the detector thread is still busy: its slot stays taken, so the next screen is refused, not queued
        assert lanes.small.busy == 1
        with pytest.raises(GatewayError) as refused:
            await lanes.run(slow, chars=10)
        assert refused.value.code == "overloaded"
        gate.set()
        assert await asyncio.get_running_loop().run_in_executor(None, finished.wait, 5)
        for _ in range(100):
            if lanes.small.busy == 0:
                break
            await asyncio.sleep(0.01)
        assert lanes.small.busy == 0
        assert await lanes.run(str.upper, "ok", chars=2) == "OK"
        # output screens (admit=False) are never cut short: the request was already forwarded
        gate.clear()
        threading.Timer(0.4, gate.set).start()
        assert await lanes.run(slow, chars=10, admit=False) == "late verdict"
    finally:
        gate.set()
        pool.shutdown()


async def test_a_large_screen_waits_at_its_pause_points_while_small_screens_run() -> None:
    small, large = ThreadPoolExecutor(2, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, small_slots=2, large=large, large_slots=1, large_chars=100, yield_seconds=30)
    gate, steps = threading.Event(), []

    def long_work() -> str:
        steps.append("first group")
        pause_point()  # between two groups of windows
        steps.append("second group")
        return "screened"

    try:
        blocked = asyncio.ensure_future(lanes.run(gate.wait, 10, chars=10))  # a small screen in flight
        await asyncio.sleep(0.05)
        assert not lanes.small_idle.is_set()
        screening = asyncio.ensure_future(lanes.run(long_work, chars=500))
        await asyncio.sleep(0.3)
        assert steps == ["first group"] and not screening.done()  # it gives way to the small screen
        gate.set()
        assert await blocked is True and await asyncio.wait_for(screening, 5) == "screened"
        assert steps == ["first group", "second group"] and lanes.small_idle.is_set()
        # a small screen never waits at its own pause points, even while another small one runs
        gate.clear()
        blocked = asyncio.ensure_future(lanes.run(gate.wait, 10, chars=10))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(lanes.run(long_work, chars=10), 5) == "screened"
        gate.set()
        await blocked
    finally:
        gate.set()
        small.shutdown(), large.shutdown()


async def test_a_large_screen_waits_at_most_yield_seconds_per_pause() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, small_slots=2, large=large, large_slots=1, large_chars=100, yield_seconds=0.1)
    gate = threading.Event()

    def three_pauses() -> str:
        for _ in range(3):
            pause_point()
        return "screened"

    try:
        blocked = asyncio.ensure_future(lanes.run(gate.wait, 10, chars=10))  # busy for the whole test
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(lanes.run(three_pauses, chars=500), 5) == "screened"
        assert 0.25 <= asyncio.get_running_loop().time() - started < 2.0  # 3 x 0.1 s, not starved
        gate.set()
        await blocked
    finally:
        gate.set()
        small.shutdown(), large.shutdown()


async def test_a_timed_out_screen_stops_at_its_next_pause_point_and_frees_its_slot() -> None:
    pool = ThreadPoolExecutor(1, "small")
    lanes = ScreenLanes(pool, small_slots=1, timeout=0.2)
    groups, stopped = [], threading.Event()

    def long_work() -> str:
        try:
            for n in range(100):
                groups.append(n)
                threading.Event().wait(0.05)  # a group of windows
                pause_point()
            return "finished"
        except ScreenAbandoned:
            stopped.set()
            raise

    loop = asyncio.get_running_loop()
    gc.collect()  # the session's loop: an earlier test's garbage is not this test's to report
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception") or Exception()))
    try:
        with pytest.raises(GatewayError) as timed_out:
            await lanes.run(long_work, chars=10)
        assert timed_out.value.code == "guardrail_timeout"
        assert await asyncio.get_running_loop().run_in_executor(None, stopped.wait, 5)
        for _ in range(100):
            if lanes.small.busy == 0:
                break
            await asyncio.sleep(0.01)
        assert lanes.small.busy == 0 and len(groups) < 20  # stopped after ~5 groups, not 100
        assert await lanes.run(str.upper, "ok", chars=2) == "OK"
        gc.collect()
        # the abandoned screen's ScreenAbandoned was read, not logged as lost
        assert not [error for error in reported if isinstance(error, ScreenAbandoned)]
    finally:
        loop.set_exception_handler(None)
        pool.shutdown()


def test_pause_point_without_a_hook_does_nothing_and_trim_heap_answers() -> None:
    pause_point()  # no lane installed a hook on this thread
    assert trim_heap() in (True, False)


def test_message_count_and_size_bounds_name_their_setting() -> None:
    messages = [{"role": "user", "content": "x" * 10}, {"role": "assistant", "content": "y" * 40}]
    # within both bounds; what the screen will read is counted on the way, bounds or none
    within = check_messages(messages, max_messages=2, max_message_chars=60)
    assert within == screen_size(messages) == (4 + 4 + 7 + 10 + 4 + 9 + 7 + 40, 8)  # keys, values: 4 texts each
    assert check_messages(messages * 100, max_messages=0, max_message_chars=0) == screen_size(messages * 100)
    tool_call = {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 12}'}}]}
    assert check_messages([tool_call], 0, 0) == screen_size([tool_call])
    with pytest.raises(GatewayError) as many:
        check_messages(messages, max_messages=1, max_message_chars=0)
    assert (many.value.status, many.value.code, many.value.param) == (413, "too_many_messages", "messages")
    assert "server.limits.max_messages" in many.value.message
    with pytest.raises(GatewayError) as large:
        check_messages(messages, max_messages=0, max_message_chars=30)
    assert (large.value.status, large.value.code, large.value.param) == (413, "message_too_large", "messages.1")
    assert "server.limits.max_message_chars" in large.value.message and "yyyy" not in large.value.message
    defaults = LimitsConfig()
    assert (defaults.max_messages, defaults.max_message_chars, defaults.max_json_depth) == (2048, 200_000, 64)
    assert defaults.screen_timeout_seconds == 30.0
    with pytest.raises(ValueError):
        LimitsConfig(max_json_depth=2)


def test_pin_mmap_threshold_sets_glibc_threshold_unless_the_operator_did(monkeypatch):
    import platform

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert pin_mmap_threshold() is (platform.libc_ver()[0] == "glibc")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert pin_mmap_threshold() is False  # glibc read the operator's value at start: left alone


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_lower_thread_priority_renices_the_calling_thread_only():
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before, seen = nice(), {}

    def lane_thread() -> None:
        seen["set"], seen["nice"] = lower_thread_priority(7), nice()
        seen["lower"], seen["kept"] = lower_thread_priority(3), nice()  # a higher value it has is kept

    with ThreadPoolExecutor(1, initializer=lower_thread_priority, initargs=(0,)) as pool:
        pool.submit(lane_thread).result()
    assert seen == {"set": True, "nice": max(7, before), "lower": True, "kept": max(7, before)}
    assert nice() == before
    assert lower_thread_priority(0) is False and nice() == before


def test_too_many_pieces_is_a_413_naming_the_count_the_limit_and_the_setting() -> None:
    error = too_many_pieces(600, 500)
    assert (error.status, error.type, error.code, error.result) == (413, "invalid_request_error", "input_too_large",
                                                                    "client_error")
    assert "600" in error.message and "500" in error.message and "server.limits.max_screen_pieces" in error.message
    chars = too_large_to_screen(9000, 8000)
    assert (chars.status, chars.type, chars.code) == (413, "invalid_request_error", "input_too_large")
    assert "9000" in chars.message and "8000" in chars.message and "server.limits.max_screen_chars" in chars.message


async def test_busy_counts_the_screens_of_the_named_lane_only() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, 2, large, 1, large_chars=8000)
    alone = ScreenLanes(ThreadPoolExecutor(1, "alone"), 1)

    async def held(chars: int, name: str) -> None:
        gate = threading.Event()
        task = asyncio.ensure_future(lanes.run(gate.wait, 5, chars=chars))
        for _ in range(500):
            if lanes.busy(name):
                break
            await asyncio.sleep(0.01)
        try:
            other = "small" if name == "large" else "large"
            assert (lanes.busy(name), lanes.busy(other)) == (1, 0)
        finally:
            gate.set()
            await task

    try:
        await held(9000, "large")
        await held(10, "small")
        assert alone.busy("large") == 0  # no large lane
    finally:
        small.shutdown(), large.shutdown(), alone.small.executor.shutdown()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_lower_thread_priority_takes_a_nice_value_of_one() -> None:
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(lower_thread_priority, 1).result() is True


def test_trim_heap_gives_freed_heap_memory_back_on_glibc() -> None:
    import platform

    blocks = [bytearray(100_000) for _ in range(200)]  # below the mmap threshold: heap arenas
    del blocks
    assert trim_heap() is (platform.libc_ver()[0] == "glibc")


def test_a_huge_integer_is_counted_within_two_characters_of_its_digits() -> None:
    for value in (10**18, 10**40, -(10**40), 7 * 10**99):
        assert len(str(value)) <= screen_size(value).chars <= len(str(value)) + 2


def test_a_json_text_with_white_space_around_it_counts_the_texts_inside_it() -> None:
    """json.loads (what the guardrails parse tool-call arguments with) skips white space around the
    value, so such arguments are screened piece by piece: the lane must see those pieces."""
    numbers = json.dumps(list(range(600)))
    inside = screen_size(numbers)
    assert inside.pieces == 600
    for text in (" " + numbers, numbers + "\n", "\t" + numbers + " "):
        assert screen_size(text) == inside
    assert screen_size(' ["ab", 7]') == (3, 2)  # an array, not only an object
    assert screen_size('{"ab": 7}') == (3, 2)
    assert screen_size("x]") == (2, 1) and screen_size("[x") == (2, 1)  # not JSON: one text


def test_consume_result_reads_a_failed_future_and_leaves_a_cancelled_one_alone() -> None:
    loop = asyncio.new_event_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:
        failed = loop.create_future()
        failed.set_exception(RuntimeError("late"))
        consume_result(failed)
        cancelled = loop.create_future()
        cancelled.cancel()
        consume_result(cancelled)  # no CancelledError: a cancelled future has no exception to read
        del failed
        gc.collect()
        assert reported == []  # "exception was never retrieved" is not logged
        unread = loop.create_future()
        unread.set_exception(RuntimeError("lost"))
        del unread
        gc.collect()
        assert reported == ["Future exception was never retrieved"]  # what consume_result prevents
    finally:
        loop.close()


async def test_lane_defaults_one_large_slot_no_size_routing_and_no_time_budget() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    gate = threading.Event()
    try:
        by_pieces = ScreenLanes(small, 2, large, large_pieces=3)
        assert by_pieces.lane(10_000, 2) is by_pieces.small  # large_chars 0: size never makes work large
        lanes = ScreenLanes(small, 2, large, large_chars=100)
        assert lanes.lane(10, 5) is lanes.small  # large_pieces 0: the text count never makes work large
        one_piece = ScreenLanes(small, 2, large, large_pieces=1)
        assert one_piece.lane(10) is one_piece.small  # no pieces given: none
        assert (await one_piece.run(threading.current_thread, chars=10)).name.startswith("small")
        held = asyncio.ensure_future(lanes.run(gate.wait, 5, chars=500))
        for _ in range(500):
            if lanes.busy("large"):
                break
            await asyncio.sleep(0.01)
        with pytest.raises(GatewayError) as full:
            await lanes.run(gate.wait, 5, chars=500)  # one large slot by default
        assert full.value.status == 503
        gate.set()
        await held
        slow = ScreenLanes(small, 2)
        assert await slow.run(lambda: time.sleep(1.3) or "done", chars=10) == "done"  # no time budget
    finally:
        gate.set()
        small.shutdown(), large.shutdown()


async def test_without_a_large_pool_every_screen_runs_in_the_small_lane() -> None:
    small = ThreadPoolExecutor(1, "small")
    lanes = ScreenLanes(small, 2, None, large_chars=10, large_pieces=2)
    try:
        assert lanes.large is None and lanes.lane(500, 50) is lanes.small
        assert (await lanes.run(threading.current_thread, chars=500, pieces=50)).name.startswith("small")
    finally:
        small.shutdown()


def test_screen_sizes_add_up_per_measure() -> None:
    assert ScreenSize(3, 1) + ScreenSize(5, 2) == ScreenSize(8, 3)
    assert screen_size(["ab"]) + screen_size({"k": 12}) == (5, 3)


async def test_small_lane_is_idle_only_when_its_last_screen_ends() -> None:
    small, large = ThreadPoolExecutor(2, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, 2, large, 1, large_chars=100)
    first, second, third = threading.Event(), threading.Event(), threading.Event()
    try:
        one = asyncio.ensure_future(lanes.run(first.wait, 5, chars=10))
        two = asyncio.ensure_future(lanes.run(second.wait, 5, chars=10))
        big = asyncio.ensure_future(lanes.run(third.wait, 5, chars=500))
        for _ in range(500):
            if lanes.busy("small") == 2 and lanes.busy("large") == 1:
                break
            await asyncio.sleep(0.01)
        third.set()
        await big  # the large lane emptied: the small one is still busy
        assert not lanes.small_idle.is_set()
        first.set()
        await one
        assert not lanes.small_idle.is_set()  # one small screen still runs
        second.set()
        await two
        await asyncio.sleep(0)  # the release callback
        assert lanes.small_idle.is_set()
    finally:
        first.set(), second.set(), third.set()
        small.shutdown(), large.shutdown()


async def test_a_large_screen_gives_way_at_most_a_fifth_of_a_second_per_pause_by_default() -> None:
    small, large = ThreadPoolExecutor(1, "small"), ThreadPoolExecutor(1, "large")
    lanes = ScreenLanes(small, 2, large, 1, large_chars=100)
    gate = threading.Event()

    def one_pause() -> str:
        pause_point()
        return "screened"

    try:
        blocked = asyncio.ensure_future(lanes.run(gate.wait, 10, chars=10))
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(lanes.run(one_pause, chars=500), 5) == "screened"
        assert 0.15 <= asyncio.get_running_loop().time() - started < 0.9
        gate.set()
        await blocked
    finally:
        gate.set()
        small.shutdown(), large.shutdown()
