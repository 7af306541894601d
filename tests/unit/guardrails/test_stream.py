"""proxy.guardrails.stream: the incremental scanner on its own (pure code, no detectors), and one
window's screen on the real engine with the fake detectors of tests/support/detectors.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.schema import SAFETY_HOLD_BACK, HoldBack, SafetyPolicy, load_policies, parse_hold_back
from proxy.guardrails.stream import (
    MAX_WINDOW_CHARS,
    OVERLAP_CHARS,
    StreamScanner,
    hold_start,
    placeholder_safe,
    screen_window,
)
from tests.support.detectors import PRIVACY, SAFETY, FakeDetectors, count_words


def run(scanner: StreamScanner, deltas: list[str]) -> tuple[list[str], list[str]]:
    """(what was released after each delta, the screened window texts)."""
    released, windows = [], []
    for delta in deltas:
        windows += [w.text for w in scanner.feed(delta)]
        released.append(scanner.release())
    return released, windows


def test_zero_hold_releases_every_chunk_at_once():
    released, windows = run(StreamScanner(holds=[HoldBack()]), ["Hello ", "there. ", "More"])
    assert released == ["Hello ", "there. ", "More"]
    assert windows == ["Hello there. "]


def test_a_window_sees_the_overlap_before_it():
    scanner = StreamScanner(holds=[HoldBack()])
    _, windows = run(scanner, ["First part ", "ends here. ", "Second one. "])
    assert windows == ["First part ends here. ", "First part ends here. Second one. "]
    long = StreamScanner(holds=[HoldBack()])
    text = "x" * 300 + ". " + "y" * 50 + ". "
    _, windows = run(long, [text])
    assert windows[1] == text[302 - OVERLAP_CHARS:]  # the overlap, then the new sentence


def test_a_window_closes_at_the_size_cap_on_white_space():
    scanner = StreamScanner(holds=[HoldBack()])
    words = "word " * (MAX_WINDOW_CHARS // 5 + 10)
    (window,) = scanner.feed(words)
    assert window.end <= MAX_WINDOW_CHARS and words[window.end - 1] == " "


def test_hold_back_in_chars_and_tokens():
    assert hold_start("abcdef", HoldBack(size=2)) == 4
    assert hold_start("abc", HoldBack(size=10)) == 0
    assert hold_start("one two, three four", HoldBack(size=2, unit="tokens")) == len("one two, ")
    assert hold_start("one two, three four", HoldBack(size=3, unit="tokens")) == len("one two")  # the comma
    scanner = StreamScanner(holds=[HoldBack(size=4), HoldBack(size=1, unit="tokens")])  # the larger hold wins
    assert run(scanner, ["Hello world", " again"])[0] == ["Hello ", "world "]  # 1 token > 4 chars here


@pytest.mark.parametrize("value,expected", [(0, HoldBack()), (120, HoldBack(size=120)),
                                            ("24 tokens", HoldBack(size=24, unit="tokens")),
                                            ("1 char", HoldBack(size=1))])
def test_hold_back_yaml_forms(value, expected):
    assert HoldBack.model_validate(parse_hold_back(value)) == expected


@pytest.mark.parametrize("value", ["24 bananas", "many tokens", True])
def test_hold_back_yaml_rejects(value):
    with pytest.raises(ValueError):
        parse_hold_back(value)


def test_placeholder_split_across_chunks_is_restored_whole():
    restore = {"<PERSON_1>": "Ada Lovelace"}
    scanner = StreamScanner(holds=[HoldBack()], restore=lambda t: _restore(t, restore))
    released, _ = run(scanner, ["Hello <PER", "SON_1> and ", "<", "b> ok"])
    assert released == ["Hello ", "Ada Lovelace and ", "", "<b> ok"]


def _restore(text: str, mapping: dict[str, str]) -> str:
    for placeholder, value in mapping.items():
        text = text.replace(placeholder, value)
    return text


def test_placeholder_safe_only_moves_back_over_a_partial_placeholder():
    assert placeholder_safe("a <PERSON_", 10) == 2
    assert placeholder_safe("a <PERSON_1>", 12) == 12
    assert placeholder_safe("a < b", 5) == 5


def test_stop_keeps_the_held_back_text():
    scanner = StreamScanner(holds=[HoldBack(size=8)])
    assert run(scanner, ["Safe words here ", "then bad"])[0] == ["Safe wor", "ds here "]
    scanner.stop()
    assert scanner.release() == "" and scanner.release(final=True) == ""


def test_finish_screens_the_whole_answer_and_releases_the_rest():
    scanner = StreamScanner(holds=[HoldBack(size=100)])
    assert run(scanner, ["One. ", "Two"])[0] == ["", ""]
    final = scanner.finish()
    assert final is not None and final.text == "One. Two" and final.final
    assert scanner.release(final=True) == "One. Two"
    assert StreamScanner().finish() is None


def test_gated_mode_releases_only_accepted_windows():
    scanner = StreamScanner(holds=[HoldBack()], gated=True)
    (window,) = scanner.feed("Mail bob@example.com now. Next")
    assert scanner.release() == ""
    scanner.accept(window, "Mail <EMAIL_ADDRESS_1> now. ")
    assert scanner.release() == "Mail <EMAIL_ADDRESS_1> now. "
    final = scanner.finish()
    scanner.accept(final)
    assert scanner.release(final=True) == "Next"


def test_privacy_cut_keeps_the_longest_identifier_back_and_never_cuts_a_word_or_a_span():
    from proxy.guardrails.detectors.pii import PiiSpan
    from proxy.guardrails.stream import MAX_IDENTIFIER_CHARS, MAX_UNBROKEN_CHARS, privacy_cut

    raw = "word " * 40  # 200 characters
    cut = privacy_cut(raw, 0, len(raw), [])
    assert cut == 135 and len(raw) - cut >= MAX_IDENTIFIER_CHARS and raw[cut - 1] == " "
    iban = PiiSpan("IBAN_CODE", 120, 147, 1.0)  # crosses the cut: held back whole
    assert privacy_cut(raw, 0, len(raw), [iban]) == 120
    assert privacy_cut(raw, 130, len(raw), [iban]) == 130  # nothing more may leave yet
    assert privacy_cut(raw, 0, MAX_IDENTIFIER_CHARS, []) == 0
    unbroken = "x" * (MAX_UNBROKEN_CHARS + MAX_IDENTIFIER_CHARS)
    assert privacy_cut(unbroken, 0, len(unbroken) - 1, []) == 0  # a word is not cut...
    assert privacy_cut(unbroken, 0, len(unbroken), []) == MAX_UNBROKEN_CHARS  # ...unless it is this long


def test_safety_holds_24_tokens_back_by_default_and_as_shipped():
    assert SAFETY_HOLD_BACK == HoldBack(size=24, unit="tokens")
    assert SafetyPolicy(id="s", kind="safety", stages=["output"], thresholds={"toxicity": "0.9"}).hold_back \
        == SAFETY_HOLD_BACK
    shipped = [p for p in load_policies(Path(__file__).resolve().parents[3] / "policies") if p.kind == "safety"]
    assert [p.hold_back for p in shipped] == [SAFETY_HOLD_BACK]


def test_privacy_cut_steps_back_over_overlapping_spans_and_keeps_a_span_that_ends_at_the_cut():
    from proxy.guardrails.detectors.pii import PiiSpan
    from proxy.guardrails.stream import MAX_IDENTIFIER_CHARS, MAX_UNBROKEN_CHARS, privacy_cut

    raw = "word " * 40
    assert privacy_cut(raw, 0, len(raw), []) == 135
    # the later span moves the cut into the earlier one, which then holds back from its own start
    person, iban = PiiSpan("PERSON", 110, 128, 1.0), PiiSpan("IBAN_CODE", 125, 140, 1.0)
    assert privacy_cut(raw, 0, len(raw), [person, iban]) == 110
    assert privacy_cut(raw, 0, len(raw), [iban, person]) == 110
    # a span wholly before the cut (ending at it) does not hold anything back
    assert privacy_cut(raw, 0, len(raw), [PiiSpan("PERSON", 130, 135, 1.0)]) == 135
    # an unbroken run is cut only once MAX_UNBROKEN_CHARS of it wait after what was released
    unbroken = "x" * (4 * MAX_UNBROKEN_CHARS)
    done = MAX_UNBROKEN_CHARS // 2
    assert privacy_cut(unbroken, done, done + MAX_IDENTIFIER_CHARS + MAX_UNBROKEN_CHARS - 1, []) == done
    assert privacy_cut(unbroken, done, done + MAX_IDENTIFIER_CHARS + MAX_UNBROKEN_CHARS, []) == (
        done + MAX_UNBROKEN_CHARS)


def test_a_token_hold_starts_at_a_whole_token_even_when_it_is_longer_than_the_tail():
    tokens = HoldBack(size=2, unit="tokens")
    assert hold_start("x" * 100, HoldBack(size=1, unit="tokens")) == 0  # one long token: held whole
    assert hold_start("ab cd", tokens) == 0 and hold_start("ab", tokens) == 0
    assert hold_start("y" * 80 + " " + "z" * 80, tokens) == 0
    assert hold_start("a b c " + "w" * 70, tokens) == 4
    words = "one two three " * 50
    assert hold_start(words, HoldBack(size=3, unit="tokens")) == len(words) - len("one two three ")


def test_windows_tile_the_answer_and_carry_the_overlap_in_front():
    scanner = StreamScanner(overlap_chars=3)
    windows = scanner.feed("One. Two. Three")
    assert [(w.start, w.end, w.text) for w in windows] == [(0, 5, "One. "), (5, 10, "e. Two. ")]


def test_placeholder_safe_backs_off_a_partial_placeholder_before_end_only():
    assert placeholder_safe("<PER", 4) == 0  # at the very start of the answer
    assert placeholder_safe("ab <PER more", 7) == 3  # what follows end is not read
    assert placeholder_safe("<PER x <", 4) == 0  # nor a "<" after end
    assert placeholder_safe("ab <PERSON_1> c", 15) == 15


def test_without_a_hold_everything_scanned_is_released():
    scanner = StreamScanner()
    scanner.feed("Hi. Bye")
    assert scanner.release() == "Hi. Bye"


def test_a_token_hold_starts_at_the_first_held_token_not_at_white_space_before_it():
    assert hold_start("  ab", HoldBack(size=1, unit="tokens")) == 2
    assert hold_start("  ab cd", HoldBack(size=2, unit="tokens")) == 2


def test_a_sentence_ending_in_a_newline_exactly_at_the_window_size_closes_the_window_there():
    scanner = StreamScanner(window_chars=10)
    (window,) = scanner.feed("abc def g\nmore")
    assert (window.start, window.end) == (0, 10)  # not cut back to the last space
    scanner = StreamScanner(window_chars=10)
    assert [(w.start, w.end) for w in scanner.feed("abc def gh\nmore")] == [(0, 8), (8, 11)]  # one past: cut at the space


def test_screen_window_refuses_with_the_output_safety_detector_as_evidence():
    engine = GuardrailEngine([SAFETY, PRIVACY], count_tokens=count_words, registry=FakeDetectors().registry)
    decision = screen_window(engine, "a BAD answer")
    assert decision is not None and decision.policy_id == SAFETY.id and decision.stage == "output"
    assert decision.evidence["detector"]["name"] == "fake-safety"
    assert decision.evidence["detector"]["components"] == [{"name": "fake-tox", "version": "1"}]
    assert screen_window(engine, "a fine answer") is None and screen_window(engine, "  ") is None


def windows_of(text: str, window_chars: int = 10) -> list[tuple[int, int]]:
    return [(w.start, w.end) for w in StreamScanner(window_chars=window_chars).feed(text)]


def test_a_window_at_the_size_cap_is_cut_after_its_last_space():
    assert windows_of("abcd efghi") == [(0, 5)]  # exactly the cap: closed, after the space
    assert windows_of("abcd efgh") == []  # below the cap and no sentence end: still open
    assert windows_of("a " + "b" * 20) == [(0, 2), (2, 12), (12, 22)]  # a space right after the start
    assert windows_of("b" * 25) == [(0, 10), (10, 20)]  # no space: cut at the cap


def test_a_window_at_the_size_cap_does_not_cut_a_placeholder_unless_it_starts_there():
    assert windows_of("abcdefg<PERSON_1> rest") == [(0, 7), (7, 17)]
    assert windows_of("<ABCDEFGHIJKLMNOPQRSTU") == [(0, 10), (10, 20)]  # nothing before it: cut anyway


def test_gated_release_joins_every_accepted_window_and_marks_them_released():
    scanner = StreamScanner(gated=True)
    first, second = scanner.feed("One. Two. ")
    scanner.accept(first, "1. ")
    scanner.accept(second)
    assert scanner.release() == "1. Two. " and scanner.released == second.end == scanner.scanned
    assert scanner.release() == ""
