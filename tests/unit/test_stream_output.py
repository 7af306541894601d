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
from proxy.guardrails.stream import MAX_IDENTIFIER_CHARS, OVERLAP_CHARS, OutputMask, model_apology

ROOT = Path(__file__).resolve().parents[2]
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
    raw = ("If anything goes wrong with the delivery of the parcel, the phone number of the depot is "
           "4341 4557 and they will sort it out.")
    number = raw.index("4341")
    mask = OutputMask()
    first = mask.advance(engine, raw, number + MAX_IDENTIFIER_CHARS + 1)  # releases up to the number
    assert first == raw[:number] and mask.done == number
    rest = mask.advance(engine, raw, len(raw), final=True)
    assert rest == "<PHONE_NUMBER_1> and they will sort it out."
    assert number - OVERLAP_CHARS < raw.index("phone")  # the context word is within the overlap
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
