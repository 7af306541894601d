"""Output screening of a stream with the real detectors: :class:`proxy.guardrails.stream.OutputMask`
(privacy on output, part by part) and :func:`proxy.guardrails.stream.model_apology`, on the
engine the proxy builds from the shipped policies, with the privacy policy screening outputs too."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxy.evaluation.guardrails import build_engine
from proxy.guardrails.stream import (
    MAX_IDENTIFIER_CHARS,
    MAX_WINDOW_CHARS,
    OVERLAP_CHARS,
    OutputMask,
    StreamScanner,
    gates_on_window,
    model_apology,
    screen_window,
    stream_holds,
)
from tests.support.stream_answers import IDENTIFIERS, answer_with

ROOT = Path(__file__).resolve().parents[3]
PLACEHOLDER = re.compile(r"<[A-Z_]+_\d+>")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    """The shipped policies, privacy.pii with ``stages: [input, output]``."""
    policies = tmp_path_factory.mktemp("policies")
    for path in (ROOT / "policies").glob("*.yaml"):
        shutil.copy(path, policies / path.name)
    privacy = policies / "privacy.yaml"
    text = privacy.read_text(encoding="utf-8")
    assert "\nstages: [input]" in text
    privacy.write_text(text.replace("\nstages: [input]", "\nstages: [input, output]", 1), encoding="utf-8")
    return build_engine(policies, lambda model, messages: sum(len(m.get("content") or "") for m in messages))


def _release(engine, raw: str, ends: list[int]) -> tuple[OutputMask, list[str]]:
    """Advance one mask over ``raw`` to each window end of ``ends``, the last one final."""
    mask = OutputMask()
    parts = [mask.advance(engine, raw, end, final=(i == len(ends) - 1)) for i, end in enumerate(ends)]
    return mask, parts


def _stream(engine, answer: str, chunk: int) -> str:
    """What the client receives when the provider streams ``answer`` in ``chunk``-character deltas:
    the scanner, window screen and output mask driven as the proxy's stream relay drives them
    (proxy/server/flow/streaming.py: feed, screen each closed window, mask it, release; at the end
    the final window, then the rest). Only the lanes and the HTTP around it are left out; the
    e2e suite (tests/e2e/test_stream_privacy.py) runs a few of these streams through the proxy."""
    scanner = StreamScanner(holds=stream_holds(engine.policies), gated=gates_on_window(engine.policies))
    mask = OutputMask()
    delivered: list[str] = []

    def stopped(windows) -> bool:
        for window in windows:
            if screen_window(engine, scanner.readable(window.text)) is not None:
                scanner.stop()
                return True
            scanner.accept(window, mask.advance(engine, scanner.raw, window.end, window.final))
        return False

    for start in range(0, len(answer), chunk):
        if stopped(scanner.feed(answer[start:start + chunk])):
            return "".join(delivered)
        delivered.append(scanner.release())
    final = scanner.finish()
    if not stopped([final] if final else []):
        delivered.append(scanner.release(final=True))
    return "".join(delivered)


@pytest.mark.parametrize("kind", IDENTIFIERS)
def test_an_identifier_at_every_offset_around_a_window_cut_is_masked_whole(engine, kind: str) -> None:
    # Masked window by window without overlap, an IBAN starting ~22 characters before a cut reached
    # the client in clear, and cards and phone numbers leaked whole or in part at other offsets.
    label, identifier, parts = IDENTIFIERS[kind]
    leaked = []
    for offset in range(MAX_WINDOW_CHARS - len(identifier) - 2, MAX_WINDOW_CHARS + 3):
        answer = answer_with(label, identifier, offset)
        for chunk in (1, 5, 7):
            delivered = _stream(engine, answer, chunk)
            assert delivered.endswith(answer[-40:]) and "is what you need." in delivered
            if any(part in delivered for part in parts) or not re.search(r"<[A-Z_]+_1>", delivered):
                leaked.append((offset, chunk, delivered[offset - 20:offset + len(identifier) + 5]))
    assert leaked == []


def test_each_part_is_masked_and_placeholders_are_numbered_across_the_answer(engine):
    raw = ("Here are the two contacts you asked about for the newsletter mailing list: write to "
           "first.contact@example.com for the garden club and then, for the choir, write to "
           "second.contact@example.org so that both get the invitation in time.")
    middle = raw.index("second.contact") - 5
    mask, parts = _release(engine, raw, [middle, len(raw)])
    assert parts[0] and parts[1]  # two parts left, one per window
    whole = "".join(parts)
    assert "first.contact@example.com" not in whole and "second.contact@example.org" not in whole
    assert PLACEHOLDER.findall(whole) == ["<EMAIL_ADDRESS_1>", "<EMAIL_ADDRESS_2>"]  # one numbering
    assert whole.replace("<EMAIL_ADDRESS_1>", "first.contact@example.com").replace(
        "<EMAIL_ADDRESS_2>", "second.contact@example.org") == raw  # nothing else changed
    assert mask.done == len(raw)
    (decision,) = mask.decisions(engine)
    assert decision.policy_id == "privacy.pii" and decision.action == "mask" and decision.stage == "output"
    assert decision.evidence["detector"]["name"] == "presidio"
    starts = [0, len(parts[0])]  # where each part starts in the answer (the first holds no identifier)
    assert parts[0] == raw[:starts[1]]

    def where(value: str) -> tuple[int, int, int, int]:  # (message, piece, start, end) in its part
        at = raw.index(value)
        piece = 1 if at >= starts[1] else 0
        return (0, piece, at - starts[piece], at - starts[piece] + len(value))

    assert [(s["message"], s["piece"], s["start"], s["end"]) for s in decision.evidence["spans"]] == [
        where("first.contact@example.com"), where("second.contact@example.org")]


def test_no_part_released_means_no_decision_and_no_piece(engine):
    raw = ("Once the quarterly figures are final and the board has signed them off, write to "
           "auditor.office@example.net about the report.")
    mask = OutputMask()
    assert mask.decisions(engine) == []  # nothing advanced yet
    assert mask.advance(engine, raw, 10) == "" and mask.done == 0  # too little to release anything
    assert mask.advance(engine, raw, len(raw), final=True) == raw.replace("auditor.office@example.net",
                                                                         "<EMAIL_ADDRESS_1>")
    (decision,) = mask.decisions(engine)
    address = raw.index("auditor.office")
    assert [(s["piece"], s["start"]) for s in decision.evidence["spans"]] == [(0, address)]  # the only part


def test_an_identifier_across_a_window_end_is_held_back_whole(engine):
    raw = ("Once the quarterly figures are final and the board has signed them off, please forward the "
           "report to the auditor at auditor.office@example.net as soon as possible.")
    cut = raw.index("auditor.office") + 6  # the window ends inside the address
    mask = OutputMask()
    first = mask.advance(engine, raw, cut)  # not final: the tail may still grow into an identifier
    assert first and raw.startswith(first) and mask.done == len(first) <= raw.index("auditor.office")
    assert first.endswith(" ")  # no word is cut
    rest = mask.advance(engine, raw, len(raw), final=True)
    assert first + rest == raw.replace("auditor.office@example.net", "<EMAIL_ADDRESS_1>")


def test_a_part_is_analysed_with_the_released_words_before_it(engine):
    """The words that make two digit groups a phone number ("the phone number of the depot is")
    left with an earlier part; the later part is analysed with up to OVERLAP_CHARS of released text
    in front of it (from a white space), so the number is masked there."""
    raw = ("The parcel left the warehouse this morning and should reach you by the end of the week. "
           "If anything goes wrong with the delivery, the phone number of the depot is "
           "4341 4557 and they will sort it out.")
    number, part = raw.index("4341"), raw.index("is 4341")
    mask = OutputMask()
    first = mask.advance(engine, raw, part + MAX_IDENTIFIER_CHARS + 1)  # releases up to "is 4341"
    assert first == raw[:part] and mask.done == part
    rest = mask.advance(engine, raw, len(raw), final=True)
    assert rest == "is <PHONE_NUMBER_1> and they will sort it out."
    assert 0 < part - OVERLAP_CHARS < raw.index("phone")  # within the overlap, which starts mid-answer
    (decision,) = mask.decisions(engine)
    assert [(s["piece"], s["start"], s["end"]) for s in decision.evidence["spans"]] == [
        (1, number - part, number - part + len("4341 4557"))]  # offsets in the part, not in the analysed text
    alone = OutputMask()  # the same part without the released words before it: not a phone number
    assert alone.advance(engine, raw[number:], len(raw) - number, final=True) == raw[number:]


def test_nothing_found_means_no_decision(engine):
    raw = "The capital of France is Paris, and the Seine runs through it from east to west."
    mask, parts = _release(engine, raw, [len(raw) // 2, len(raw)])
    assert "".join(parts) == raw and mask.decisions(engine) == []


def test_model_apology_reads_the_delivered_answer(engine):
    assert model_apology(engine, "I'm sorry, but I can't help with that request.") is True
    assert model_apology(engine, "Sure: preheat the oven to 180 degrees and bake for twenty minutes.") is False
    assert model_apology(engine, "   ") is False
    assert model_apology(SimpleNamespace(), "I'm sorry, but I can't help with that request.") is False  # no detector


def test_an_answer_explaining_a_rude_word_is_delivered_the_same_words_from_a_client_are_refused(engine):
    """Output Safety reads the model's words about words as mentions (detectors/mentions.py); the
    client's identical statement asks nothing and keeps its toxic-language score. The two readings
    are cached apart, so neither answers for the other."""
    text = 'The word "idiot" comes from the Greek idiotes, which meant a private person.'
    assert engine.screen_output(text).text == text
    assert screen_window(engine, text) is None  # the stream's windows are answers too
    assert engine.screen_input([{"role": "user", "content": text}], side_by_side=False).action == "refuse"
    assert engine.screen_output(text).text == text
