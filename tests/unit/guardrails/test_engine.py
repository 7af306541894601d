"""GuardrailEngine over fake detectors registered through the DetectorRegistry.

The fakes implement the Detector protocol deterministically (keyword rules), so these tests pin
the engine's own logic: precedence, masking and restoring, continuity, output screening and
which message texts reach which detector. The real detectors have their own tests.
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from typing import Any

import pytest

from proxy.guardrails import engine as engine_module
from proxy.guardrails.detector import Detector
from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.domain import DomainClassifierConfig, DomainResult, DomainSpec
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.messages import message_text
from proxy.guardrails.registry import DetectorRegistry, default_registry
from proxy.guardrails.schema import ContinuityPolicy, PrivacyPolicy
from proxy.primitives.canonical import sha256_ref
from tests.support.detectors import (
    COMPLIANCE,
    CONTINUITY,
    POLICIES,
    PRIVACY,
    SAFETY,
    FakeApology,
    FakeDetectors,
    FakeDomain,
    FakePii,
    FakeSafety,
    count_words,
)


class Rig(FakeDetectors):
    """An engine over the four policies with fresh fakes; the fakes stay reachable for assertions."""

    def __init__(self, policies: list[Any] | None = None) -> None:
        super().__init__()
        self.engine = GuardrailEngine(policies or POLICIES, count_tokens=count_words, registry=self.registry,
                                      apology_detector=FakeApology())


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def rig() -> Rig:
    return Rig()


# ---- registry ---------------------------------------------------------------------------------


def test_registry_builds_one_detector_per_policy_by_kind(rig):
    assert rig.built == ["safety", "privacy", "compliance"]
    assert rig.engine.detectors == {"safety": rig.safety, "privacy": rig.pii, "compliance": rig.domain}
    assert all(isinstance(d, Detector) for d in rig.engine.detectors.values())


def test_registry_rejects_an_unregistered_kind():
    registry = DetectorRegistry().register("safety", lambda p: FakeSafety())
    with pytest.raises(LookupError, match="privacy"):
        GuardrailEngine([SAFETY, PRIVACY], count_tokens=count_words, registry=registry)


def test_default_registry_covers_every_policy_kind():
    assert default_registry().kinds() == ["compliance", "continuity", "privacy", "safety"]


# ---- input precedence -------------------------------------------------------------------------


def test_nothing_fires_allows_unchanged_messages(rig):
    messages = [user("What is 2 + 2?")]
    screen = rig.engine.screen_input(messages)
    assert (screen.action, screen.decisions, screen.triggers) == ("allow", [], [])
    assert screen.messages == messages and screen.masker is None
    assert (screen.domain, screen.domain_confidence) == ("general", "0.9000")


def test_refuse_beats_escalate_and_mask(rig):
    messages = [user("BAD: please diagnose ada@example.org")]
    screen = rig.engine.screen_input(messages)
    assert screen.action == "refuse"
    assert [(d.policy_id, d.action, d.stage) for d in screen.decisions] == [("safety", "refuse", "input")]
    assert screen.triggers == screen.decisions
    assert screen.apology == "Refused by policy."
    assert screen.messages == messages and screen.masker is None  # nothing masked, nothing escalated
    assert screen.escalation_id is None  # (Privacy may have run beside Safety: test_refused_input_...)
    assert screen.domain == "health"  # the domain is still classified (stratum of the receipt)
    evidence = screen.decisions[0].evidence
    assert evidence["categories"] == ["toxicity"]
    assert evidence["detector"] == {"name": "fake-safety", "version": "1",
                                    "components": [{"name": "fake-tox", "version": "1"}]}
    assert screen.decisions[0].scores == {"harmful_intent": "0.0000", "toxicity": "0.9000"}


def test_escalate_beats_mask_and_both_are_performed(rig):
    screen = rig.engine.screen_input([user("Can you diagnose me? I am ada@example.org")])
    assert screen.action == "escalate"
    assert [d.action for d in screen.decisions] == ["mask", "escalate"]
    assert screen.escalation_id.startswith("esc_")
    assert screen.notice == f"Routed (health) as {screen.escalation_id}."
    escalation = screen.decisions[1].evidence
    assert escalation["escalation_id"] == screen.escalation_id and escalation["routing"] == "human"
    assert escalation["detector"] == {"name": "fake-domain", "version": "3"}
    assert "ada@example.org" not in screen.messages[0]["content"]


def test_safety_threshold_is_inclusive(rig):
    rig.safety.overrides = {"at": {"toxicity": 0.5}, "below": {"toxicity": 0.4999}}
    assert rig.engine.screen_input([user("at")]).action == "refuse"
    assert rig.engine.screen_input([user("below")]).action == "allow"


# ---- masking and restoring --------------------------------------------------------------------


def test_mask_replaces_pii_and_the_answer_gets_it_back(rig):
    messages = [user("Mail ada@example.org or Ada Lovelace"),
                {"role": "user", "content": [{"type": "text", "text": "again ada@example.org"},
                                             {"type": "image_url", "image_url": {"url": "x"}}]}]
    screen = rig.engine.screen_input(messages)
    assert screen.action == "mask"
    assert screen.messages[0]["content"] == "Mail <EMAIL_ADDRESS_1> or <PERSON_1>"
    assert screen.messages[1]["content"][0]["text"] == "again <EMAIL_ADDRESS_1>"  # same value, same placeholder
    assert messages[0]["content"] == "Mail ada@example.org or Ada Lovelace"  # the caller's copy is untouched
    evidence = screen.decisions[0].evidence
    assert evidence["entity_types"] == ["EMAIL_ADDRESS", "PERSON"]
    assert {(s["message"], s["piece"], s["start"], s["end"]) for s in evidence["spans"]} == {
        (0, 0, 5, 20), (0, 0, 24, 36), (1, 1, 6, 21)}
    assert "ada@example.org" not in repr(evidence) and "Lovelace" not in repr(evidence)

    out = rig.engine.screen_output("Dear <PERSON_1>, I wrote to <EMAIL_ADDRESS_1>.", screen.masker)
    assert out.text == "Dear Ada Lovelace, I wrote to ada@example.org."
    assert (out.decisions, out.refused, out.model_apology) == ([], False, False)


def test_placeholders_stay_when_the_policy_does_not_restore():
    no_restore = PrivacyPolicy(id="privacy", kind="privacy", stages=["input"], restore_in_answer=False)
    rig = Rig([no_restore])
    screen = rig.engine.screen_input([user("I am ada@example.org")])
    assert rig.engine.screen_output("Hi <EMAIL_ADDRESS_1>", screen.masker).text == "Hi <EMAIL_ADDRESS_1>"


def test_new_pii_in_the_answer_is_masked_on_output(rig):
    out = rig.engine.screen_output("Write to bob@example.com")
    assert out.text == "Write to <EMAIL_ADDRESS_1>"
    assert [(d.policy_id, d.action, d.stage) for d in out.decisions] == [("privacy", "mask", "output")]


# ---- output ------------------------------------------------------------------------------------


def test_output_refusal_replaces_the_answer(rig):
    out = rig.engine.screen_output("Here is how to HARM someone: ...")
    assert (out.text, out.refused, out.model_apology) == ("Refused by policy.", True, False)
    assert [(d.policy_id, d.stage, d.evidence["categories"]) for d in out.decisions] == [
        ("safety", "output", ["harmful_intent"])]


def test_model_apology_is_reported(rig):
    assert rig.engine.screen_output("Sorry, I cannot do that.").model_apology is True
    assert rig.engine.screen_output("Four.").model_apology is False


# ---- Privacy beside Safety and Compliance ----------------------------------------------


def test_a_small_input_is_masked_while_safety_and_compliance_judge_it_in_a_side_thread(rig, monkeypatch):
    seen, judging = {}, threading.Event()
    for name, fake in (("safety", rig.safety), ("privacy", rig.pii), ("compliance", rig.domain)):
        def spy(texts, _detect=fake.detect, _name=name):
            seen[_name] = threading.current_thread().name
            if _name == "privacy":  # Privacy is still running when the others start: they run at once
                seen["overlapped"] = judging.wait(10)
            else:
                judging.set()
            return _detect(texts)
        monkeypatch.setattr(fake, "detect", spy)
    screen = rig.engine.screen_input([user("Hello, I am ada@example.org")])
    assert screen.action == "mask" and screen.messages[0]["content"] == "Hello, I am <EMAIL_ADDRESS_1>"
    assert seen["overlapped"] and seen["privacy"] == threading.current_thread().name
    assert seen["safety"] == seen["compliance"] != seen["privacy"]


def test_a_caller_under_load_screens_a_small_input_in_its_own_thread_alone(monkeypatch):
    messages, screens = [user("Hello, I am ada@example.org")], {}
    for side_by_side in (False, True):
        rig, seen, judged = Rig(), {}, threading.Event()  # a fresh engine: no scan cache answers the second screen
        for name, fake in (("safety", rig.safety), ("privacy", rig.pii), ("compliance", rig.domain)):
            def spy(texts, _detect=fake.detect, _name=name, _seen=seen, _judged=judged):
                _seen[_name] = threading.current_thread().name
                if _name == "privacy":  # a side thread, had one been started, gets to run Safety meanwhile
                    _judged.wait(2)
                else:
                    _judged.set()
                return _detect(texts)
            monkeypatch.setattr(fake, "detect", spy)
        screens[side_by_side] = rig.engine.screen_input(messages, None, side_by_side)
        if not side_by_side:  # (beside it: the test above)
            assert set(seen.values()) == {threading.current_thread().name}  # no side thread
    alone, beside = screens[False], screens[True]
    assert (alone.action, alone.messages) == ("mask", [user("Hello, I am <EMAIL_ADDRESS_1>")])
    assert [(d.policy_id, d.action, d.evidence) for d in alone.decisions] == \
        [(d.policy_id, d.action, d.evidence) for d in beside.decisions]


def test_a_large_input_is_screened_in_one_thread_and_privacy_skips_a_refused_one(rig, monkeypatch):
    monkeypatch.setattr(engine_module, "PARALLEL_MAX_CHARS", 10)
    screen = rig.engine.screen_input([user("BAD: please diagnose ada@example.org")])
    assert screen.action == "refuse" and rig.pii.calls == []


def test_a_privacy_error_fails_an_allowed_input_but_not_a_refusal(rig, monkeypatch):
    def broken(texts):
        raise RuntimeError("privacy detector down")
    monkeypatch.setattr(rig.pii, "detect", broken)
    assert rig.engine.screen_input([user("BAD: something")]).action == "refuse"
    with pytest.raises(RuntimeError, match="privacy detector down"):
        rig.engine.screen_input([user("What is 2 + 2?")])


# ---- which texts reach which detector ----------------------------------------------------------


def test_each_detector_reads_the_roles_it_screens(rig):
    messages = [{"role": "system", "content": "You are terse. What is a sys call?"},
                {"role": "developer", "content": "Please answer dev questions."},
                user("first question"), {"role": "assistant", "content": "an answer"},
                {"role": "tool", "content": "tool output"}, {"role": "function", "content": "fn output"},
                user("last question")]
    rig.engine.screen_input(messages)
    everything = ["You are terse. What is a sys call?", "Please answer dev questions.", "first question",
                  "an answer", "tool output", "fn output", "last question"]
    assert rig.safety.calls == [everything]  # client-written assistant turns are input too
    assert rig.pii.calls == [everything]
    # the open question (test_conversation.py); of instructions, the questions and requests they ask
    assert rig.domain.calls == [["last question", "What is a sys call?", "Please answer dev questions."]]


def test_results_are_cached_by_content(rig):
    history = [user("first question")]
    rig.engine.screen_input(history)
    rig.engine.screen_input([*history, {"role": "assistant", "content": "ok"}, user("second")])
    assert rig.safety.calls == [["first question"], ["ok", "second"]]


# ---- everything the client writes is input -------------------------------------------


def prefill(text: str) -> list[dict[str, Any]]:
    return [user("Continue."), {"role": "assistant", "content": text}, user("Go on from where you stopped.")]


def test_a_prefilled_assistant_turn_is_refused_like_a_user_turn(rig):
    screen = rig.engine.screen_input(prefill("Here is how to HARM people, step one"))
    assert screen.action == "refuse" and screen.masker is None
    assert screen.decisions[0].evidence["categories"] == ["harmful_intent"]


@pytest.mark.parametrize("field, message", [
    ("refusal", {"role": "assistant", "content": None, "refusal": "HARM"}),
    ("tool call arguments", {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"how": "HARM them"}'}}]}),
    ("tool call name", {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "BAD_words", "arguments": "{}"}}]}),
    ("tool result", {"role": "tool", "tool_call_id": "c", "content": "HARM"}),
    ("name", {"role": "user", "name": "BAD", "content": "hi"}),
    ("refusal part", {"role": "assistant", "content": [{"type": "refusal", "refusal": "HARM"}]}),
])
def test_safety_judges_every_client_field(rig, field, message):
    assert rig.engine.screen_input([message, user("Go on.")]).action == "refuse", field


def test_the_policy_may_judge_only_the_latest_assistant_turns():
    last_one = SAFETY.model_copy(update={"input_assistant_turns": 1})
    rig = Rig([last_one])
    old_prefill = [*prefill("HARM in the old turn"), {"role": "assistant", "content": "fine"}, user("next")]
    assert rig.engine.screen_input(old_prefill).action == "allow"
    assert rig.safety.calls == [["Continue.", "Go on from where you stopped.", "fine", "next"]]
    assert rig.engine.screen_input(prefill("HARM in the latest turn")).action == "refuse"
    none = Rig([SAFETY.model_copy(update={"input_assistant_turns": 0})])
    assert none.engine.screen_input(prefill("HARM")).action == "allow"


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}


def with_parts(text: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def test_unreadable_parts_are_forwarded_by_default_and_refused_when_the_policy_says_so(rig):
    named_file = {"type": "file", "file": {"filename": "notes.txt"}}  # a name only: text, screened
    data_file = {"type": "file", "file": {"filename": "scan.pdf", "file_data": "JVBERi0="}}
    messages = [with_parts("What is in this picture?", IMAGE, IMAGE), user("And this?"),
                with_parts("Listen.", AUDIO, named_file, data_file)]
    assert rig.engine.screen_input(messages).action == "allow"  # default: forward

    strict = Rig([SAFETY.model_copy(update={"unreadable_parts": "refuse"}), PRIVACY])
    screen = strict.engine.screen_input(messages)
    assert screen.action == "refuse" and screen.apology == "Refused by policy."
    [decision] = screen.decisions
    assert decision.scores == {"unreadable_content": "1.0000"}
    assert decision.evidence["categories"] == ["unreadable_content"]
    assert decision.evidence["unreadable_parts"] == {"file": 1, "image_url": 2, "input_audio": 1}
    assert strict.engine.screen_input([with_parts("Hi", named_file), user("Go on.")]).action == "allow"
    assert strict.engine.screen_input([user("Describe a sunset.")]).action == "allow"


def test_a_refused_history_turn_with_an_image_is_withheld_not_refused_again():
    strict = Rig([SAFETY.model_copy(update={"unreadable_parts": "refuse"})])
    first = [with_parts("What is in this picture?", IMAGE)]
    assert strict.engine.screen_input(first).action == "refuse"
    later = [*first, {"role": "assistant", "content": "Refused by policy."}, user("Then describe a sunset.")]
    screen = strict.engine.screen_input(later)
    assert screen.action == "allow" and "image_url" not in json.dumps(screen.messages)


def test_a_message_without_personal_data_is_passed_on_as_it_is_beside_masked_ones(rig):
    """Only the messages holding a span are copied and masked; the others (a resent history's
    turns, most of them) are the caller's own objects, and placeholders keep their numbering."""
    messages = [{"role": "system", "content": "Be brief."}, user("Mail ada@example.org, please."),
                {"role": "assistant", "content": "Done."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                user("And bob@example.com and ada@example.org too.")]
    screen = rig.engine.screen_input(messages)
    assert screen.action == "mask"
    assert [m is o for m, o in zip(screen.messages, messages)] == [True, False, True, True, True, False]
    assert screen.messages[1]["content"] == "Mail <EMAIL_ADDRESS_1>, please."
    assert screen.messages[5]["content"] == "And <EMAIL_ADDRESS_2> and <EMAIL_ADDRESS_1> too."
    assert messages[5]["content"] == "And bob@example.com and ada@example.org too."  # the caller's copy


def test_pii_in_tool_calls_and_tool_results_is_masked_and_restored(rig):
    arguments = '{"to": "ada@example.org", "cc": ["bob@example.com"], "note": "for Ada Lovelace", "n": 3}'
    messages = [user("Send it."),
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "send_mail", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sent to ada@example.org"}]
    screen = rig.engine.screen_input(messages)
    assert screen.action == "mask"
    call = screen.messages[1]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {
        "to": "<EMAIL_ADDRESS_1>", "cc": ["<EMAIL_ADDRESS_2>"], "note": "for <PERSON_1>", "n": 3}
    assert call["function"]["name"] == "send_mail" and call["id"] == "c1"
    assert screen.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "sent to <EMAIL_ADDRESS_1>"}
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == arguments  # the caller's copy is untouched
    spans = screen.decisions[0].evidence["spans"]
    assert {(s["message"], s["field"], s["entity_type"]) for s in spans} == {
        (1, "tool_calls.0.function.arguments", "EMAIL_ADDRESS"), (1, "tool_calls.0.function.arguments", "PERSON"),
        (2, "content", "EMAIL_ADDRESS")}
    assert "example" not in json.dumps(screen.decisions[0].evidence)

    answer_calls = [{"id": "c2", "type": "function",
                     "function": {"name": "send_mail", "arguments": '{"to": "<EMAIL_ADDRESS_2>", "re": "<PERSON_1>"}'}}]
    out = rig.engine.screen_output("Mailing <EMAIL_ADDRESS_1>.", screen.masker, answer_calls)
    assert out.text == "Mailing ada@example.org."
    assert json.loads(out.tool_calls[0]["function"]["arguments"]) == {"to": "bob@example.com", "re": "Ada Lovelace"}
    assert answer_calls[0]["function"]["arguments"] == '{"to": "<EMAIL_ADDRESS_2>", "re": "<PERSON_1>"}'


def test_a_refused_answer_drops_its_tool_calls(rig):
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert rig.engine.screen_output("HARM", None, calls).tool_calls is None
    assert rig.engine.screen_output("fine", None, calls).tool_calls == calls


# ---- continuity -------------------------------------------------------------------------------


def long_conversation() -> list[dict[str, Any]]:
    turns = [user(f"question {i} " + "word " * 5) if i % 2 == 0 else
             {"role": "assistant", "content": f"answer {i} " + "word " * 5} for i in range(6)]
    return [{"role": "system", "content": "Be brief."}, *turns]


def test_continuity_plan_keeps_head_and_last_turns(rig):
    messages = long_conversation()
    plan = rig.engine.continuity_plan(messages, "m")
    assert plan is not None and plan.policy is CONTINUITY
    assert plan.tokens_before == count_words("m", messages) > CONTINUITY.max_tokens
    assert (plan.head, plan.older, plan.kept) == (messages[:1], messages[1:5], messages[5:])

    request = rig.engine.summary_request(plan)
    assert request[0] == {"role": "system", "content": "Summarize please."}
    assert request[1]["content"].splitlines()[0] == "user: " + message_text(messages[1])

    applied = rig.engine.apply_summary(plan, "they asked four questions", "m")
    assert applied.messages == [messages[0], {"role": "system", "content": "Summary of the earlier "
                                              "conversation: they asked four questions"}, *messages[5:]]
    assert applied.decision.action == "summarize" and applied.decision.policy_id == "continuity"
    assert applied.decision.evidence == {
        "continuity": True, "summary_hash": sha256_ref(b"they asked four questions"),
        "tokens_before": plan.tokens_before, "tokens_after": count_words("m", applied.messages),
        "max_tokens": 20, "summarized_messages": 4}
    messages_out, decision = applied  # still unpacks as (messages, decision)
    assert decision is applied.decision


def test_no_plan_under_budget_or_with_nothing_to_summarize(rig):
    assert rig.engine.continuity_plan([user("short")], "m") is None
    long_but_few = [{"role": "system", "content": "word " * 30}, user("word " * 30), user("hi")]
    assert rig.engine.continuity_plan(long_but_few, "m") is None


def test_tokens_are_counted_only_when_there_are_turns_to_summarize(rig):
    counted: list[int] = []

    def counting(model: str, messages: list[dict[str, Any]]) -> int:
        counted.append(len(messages))
        return count_words(model, messages)

    rig.engine.count_tokens = counting
    over_budget_single_turn = [{"role": "system", "content": "word " * 30}, user("word " * 30)]
    assert rig.engine.continuity_plan(over_budget_single_turn, "m") is None
    assert counted == []  # one turn after the head: nothing to summarize, nothing counted
    assert rig.engine.continuity_plan(long_conversation(), "m") is not None
    assert counted == [len(long_conversation())]


# ---- bounded work -----------------------------------------------------------------------------


class Abandoned(Exception):
    """What a lane's pause hook raises for a screen nobody awaits (proxy.server.admission.limits.ScreenAbandoned)."""


def test_many_texts_are_detected_in_groups_with_a_pause_point_between_them(rig):
    values = [f"v{i}" for i in range(100)] + ["ada@example.com"]
    pauses: list[str] = []
    with patterns.pausing(lambda: pauses.append(threading.current_thread().name)):
        screen = rig.engine.screen_input([user("hi")], {"extra_body": {"x": values}}, side_by_side=False)
    groups = [len(call) for call in rig.pii.calls]
    assert groups == [engine_module.DETECT_GROUP] * 3 + [102 - 3 * engine_module.DETECT_GROUP]
    # after the walk of the fields, after Compliance, after the definitions' texts; then between
    # Privacy's four groups, none before the first
    assert len(pauses) == 3 + 3
    assert screen.definitions["extra_body"]["x"][100] == "<EMAIL_ADDRESS_1>"  # results stay in their place
    assert screen.definitions["extra_body"]["x"][:100] == values[:100]


def test_an_abandoned_screen_stops_at_its_next_group(rig):
    def abandon() -> None:
        if rig.pii.calls:  # abandoned while Privacy works through its groups
            raise Abandoned

    with patterns.pausing(abandon), pytest.raises(Abandoned):
        rig.engine.screen_input([user("hi")], {"extra_body": {"x": [f"v{i}" for i in range(1000)]}},
                                side_by_side=False)
    assert sum(map(len, rig.pii.calls)) == engine_module.DETECT_GROUP  # one group of 1,001 texts, then it stopped


def test_a_screen_abandoned_while_its_fields_are_walked_runs_no_detector(rig):
    def abandon() -> None:
        raise Abandoned

    with patterns.pausing(abandon), pytest.raises(Abandoned):
        rig.engine.screen_input([user("hi")], {"extra_body": {"x": [f"v{i}" for i in range(1000)]}},
                                side_by_side=False)
    assert rig.pii.calls == [] and rig.safety.calls == []


def test_the_side_thread_pauses_and_is_abandoned_with_its_screen(rig):
    """Safety and Compliance in the side thread run under the screen's pause hook."""
    messages = [user(f"question {i}") for i in range(40)]  # 40 texts for each detector: two groups
    side_paused = threading.Event()

    def hook() -> None:
        if threading.current_thread().name.startswith("guardrails-side"):
            side_paused.set()
            raise Abandoned
        if rig.pii.calls:  # Privacy, in the calling thread, between its groups: wait for the side thread's pause
            side_paused.wait(10)

    with patterns.pausing(hook), pytest.raises(Abandoned):
        rig.engine.screen_input(messages, side_by_side=True)
    assert side_paused.is_set()
    # 40 unanswered questions: Compliance reads them first and the side thread stops after one group
    assert [len(call) for call in rig.domain.calls + rig.safety.calls] == [engine_module.DETECT_GROUP]


def test_count_pieces_is_what_privacy_reads(rig):
    messages = [user("hi"), {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"a": [1, 2, 3]})}}]}]
    definitions = {"extra_body": {"x": ["p", "q"]}}
    assert rig.engine.count_pieces(messages, definitions) == 1 + 1 + 1 + 3 + 2  # hi, f, a, 1 2 3, p q
    rig.engine.screen_input(messages, definitions, side_by_side=False)
    assert len(rig.pii.calls[0]) == 8


def test_a_forked_child_starts_its_own_side_threads_and_the_parent_can_stop_its_own():
    import os

    pool = engine_module._side_pool()
    assert pool.submit(lambda: 1).result() == 1
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool (whose threads it lacks) forgotten, a new one works
        ok = engine_module._side_pool.cache_info().currsize == 0 and engine_module._side_pool().submit(
            lambda: 2).result(timeout=30) == 2
        os._exit(0 if ok else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    engine_module.stop_side_threads()  # before a fork: the threads stopped, a later screen starts new ones
    assert engine_module._side_pool.cache_info().currsize == 0 and pool._shutdown
    assert engine_module._side_pool().submit(lambda: 3).result() == 3


# ---- a person masked in one text is masked in all ---------------------------------------------


class CoreferringPii(FakePii):
    """FakePii plus the real detector's cross-text step (:meth:`PiiDetector.corefer`, with its
    default configuration): every other mention of a person masked in any text."""

    config = PiiDetectorConfig(entities=["PERSON", "EMAIL_ADDRESS"])
    _stop_words = frozenset()
    _common_words = frozenset()
    _words = frozenset()
    corefer = PiiDetector.corefer


def test_a_person_named_in_one_message_is_masked_where_another_names_them_in_part():
    rig = Rig()
    rig.pii = CoreferringPii()
    rig.registry.register("privacy", rig._factory(rig.pii))
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=rig.registry)
    screen = engine.screen_input([user("Ada Lovelace wrote the notes."), user("Did Lovelace sign them?")])
    assert [m["content"] for m in screen.messages] == ["<PERSON_1> wrote the notes.", "Did <PERSON_1> sign them?"]


# ---- what the decisions record -------------------------------------------------------------


def test_the_mask_decision_records_its_stage_detector_and_piece_numbers_past_a_withheld_turn(rig):
    """A refused turn's pieces are withheld from the model but still numbered: the spans of a later
    message keep their number among all the request's pieces."""
    assert rig.engine.screen_input([user("BAD idea, write ada@example.org")]).action == "refuse"
    messages = [user("BAD idea, write ada@example.org"), {"role": "assistant", "content": "Refused by policy."},
                user("Then mail bob@example.com")]
    screen = rig.engine.screen_input(messages)
    assert screen.action == "mask" and screen.messages == [user("Then mail <EMAIL_ADDRESS_2>")]
    [decision] = screen.decisions
    assert (decision.stage, decision.evidence["stage"]) == ("input", "input")
    assert decision.evidence["detector"] == {"name": "fake-pii", "version": "2"}
    assert [(s["message"], s["piece"], s["start"]) for s in decision.evidence["spans"]] == [(2, 2, 10)]


def test_the_escalation_records_the_route_confidence(rig):
    screen = rig.engine.screen_input([user("Can you diagnose this rash?")])
    assert screen.action == "escalate"
    assert screen.decisions[0].evidence["confidence"] == screen.domain_confidence == "0.8000"


def test_the_output_mask_decision_names_the_answer_and_the_detector(rig):
    out = rig.engine.screen_output("Write to bob@example.com")
    [decision] = out.decisions
    assert decision.evidence["detector"] == {"name": "fake-pii", "version": "2"}
    assert [(s["message"], s["piece"], s["start"], s["end"]) for s in decision.evidence["spans"]] == [(0, 0, 9, 24)]


def test_mask_messages_gives_the_messages_as_the_model_would_see_them(rig):
    messages = [user("Mail ada@example.org"), {"role": "assistant", "content": "Done."}]
    assert rig.engine.mask_messages(messages) == [user("Mail <EMAIL_ADDRESS_1>"), messages[1]]
    assert rig.engine.mask_messages([user("What is 2 + 2?")]) == [user("What is 2 + 2?")]
    assert messages[0]["content"] == "Mail ada@example.org"


def test_output_safety_judges_the_answer_with_the_inputs_placeholders_restored():
    """The client reads the restored answer, so Safety judges that (input Safety is off here)."""
    rig = Rig([SAFETY.model_copy(update={"stages": ["output"]}), PRIVACY])
    screen = rig.engine.screen_input([user("My colleague is HARM.team@example.org")])
    assert screen.action == "mask"
    out = rig.engine.screen_output("Write to <EMAIL_ADDRESS_1>.", screen.masker)
    assert (out.text, out.refused) == ("Refused by policy.", True)
    assert rig.safety.calls[-1] == ["Write to HARM.team@example.org."]


# ---- Compliance: notices and the most regulated text -----------------------------------------


class ScoredDomain(FakeDomain):
    """A compliance detector with a domain configuration (regulated: health): "maybe" is in the
    ambiguous band and forwarded with a notice; "pills" leans to health, "hi" does not."""

    name, version = "scored-domain", "4"
    config = DomainClassifierConfig(domains={
        "general": DomainSpec(description="anything", regulated=False, examples=["a", "b", "c"]),
        "health": DomainSpec(description="medicine", regulated=True, examples=["d", "e", "f"]),
    })

    def detect(self, texts: list[str]) -> list[DomainResult]:
        self.calls.append(list(texts))
        out = []
        for t in texts:
            if "maybe" in t:
                out.append(DomainResult("health", 0.45, {"general": 0.55, "health": 0.45}, False, True,
                                        notice="This touches health."))
            elif "pills" in t:
                out.append(DomainResult("general", 0.6, {"general": 0.6, "health": 0.4}, False, False))
            else:
                out.append(DomainResult("general", 0.9, {"general": 0.9, "health": 0.1}, False, False))
        return out


def scored_rig() -> Rig:
    rig = Rig()
    rig.domain = ScoredDomain()
    rig.registry.register("compliance", rig._factory(rig.domain))
    rig.engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=rig.registry)
    return rig


def test_an_ambiguous_question_is_forwarded_with_the_notice_and_a_notice_decision():
    screen = scored_rig().engine.screen_input([user("maybe a question about my heart")])
    assert (screen.action, screen.notice, screen.escalation_id) == ("allow", "This touches health.", None)
    [decision] = screen.decisions
    assert (decision.policy_id, decision.action) == ("compliance", "allow")
    assert decision.evidence["confidence"] == "0.4500" and decision.evidence["notice"] is True
    assert decision.evidence["detector"] == {"name": "scored-domain", "version": "4"}


def test_the_route_is_the_text_closest_to_a_regulated_domain_when_none_is_regulated():
    """Of two open texts neither regulated nor noticed, the one with more regulated probability
    routes the request (the last user message would only win a tie)."""
    screen = scored_rig().engine.screen_input([user("about my pills"), user("hi")])
    assert (screen.action, screen.domain, screen.domain_confidence) == ("allow", "general", "0.6000")
    alone = scored_rig().engine.screen_input([user("hi")])
    assert alone.domain_confidence == "0.9000"


def test_a_developer_message_is_judged_by_the_questions_it_asks(rig):
    """Instructions describe how to answer ("Our clinic can diagnose rashes."); Compliance judges
    only the questions and requests written into them, a developer's as a system message's."""
    screen = rig.engine.screen_input([{"role": "developer", "content": "Our clinic can diagnose rashes. "
                                                                       "What is the weather?"}, user("hi")])
    assert screen.action == "allow" and rig.domain.calls == [["hi", "What is the weather?"]]


def test_a_notice_text_routes_before_a_plain_one():
    screen = scored_rig().engine.screen_input([user("maybe a question about my heart"), user("hi")])
    assert (screen.action, screen.notice) == ("allow", "This touches health.")


def test_without_a_compliance_policy_every_request_is_general_for_sure():
    screen = Rig([SAFETY, PRIVACY]).engine.screen_input([user("Can you diagnose this rash?")])
    assert (screen.action, screen.domain, screen.domain_confidence) == ("allow", "general", "1.0000")


def test_a_settled_turn_is_not_judged_again_for_the_domain(rig):
    """A refused question left unanswered stays refused; the next question is routed on its own."""
    assert rig.engine.screen_input([user("BAD: diagnose me")]).action == "refuse"
    screen = rig.engine.screen_input([user("BAD: diagnose me"), user("What is 2 + 2?")])
    assert (screen.action, screen.domain, screen.messages) == ("allow", "general", [user("What is 2 + 2?")])
    assert [s.evidence() for s in screen.settled] == [{"messages": [0, 1], "verdict": "refuse", "signal": "recorded"}]


def test_a_refusal_keeps_the_route_and_the_settled_turns_for_its_receipt(rig):
    assert rig.engine.screen_input([user("BAD: diagnose me")]).action == "refuse"
    screen = rig.engine.screen_input([user("BAD: diagnose me"), {"role": "assistant", "content": "Refused by policy."},
                                      user("BAD again, diagnose me")])
    assert (screen.action, screen.domain, screen.domain_confidence) == ("refuse", "health", "0.8000")
    assert [s.evidence() for s in screen.settled] == [{"messages": [0, 2], "verdict": "refuse", "signal": "reply"}]


@pytest.mark.parametrize("side_by_side", [True, False])
def test_tool_definitions_are_judged_at_the_definition_thresholds(side_by_side):
    """Definitions may get stricter thresholds than messages: a toxicity of 0.9 refuses a message
    (threshold 0.5) but not a tool description (0.95); harmful intent, not overridden, refuses both."""
    rig = Rig([SAFETY.model_copy(update={"definition_thresholds": {"toxicity": Decimal("0.95")}}), PRIVACY,
               COMPLIANCE])
    tools = {"tools": [{"type": "function", "function": {"name": "f", "description": "BAD words"}}]}
    assert rig.engine.screen_input([user("hi")], tools, side_by_side).action == "allow"
    assert rig.engine.screen_input([user("BAD words")], None, side_by_side).action == "refuse"
    harmful = {"tools": [{"type": "function", "function": {"name": "f", "description": "HARM them"}}]}
    assert rig.engine.screen_input([user("hi")], harmful, side_by_side).action == "refuse"


def test_the_engine_logs_each_policys_detector(caplog):
    with caplog.at_level("INFO", logger="sonate.guardrails"):
        Rig()
    assert "policy safety (safety): detector fake-safety 1" in caplog.messages
    assert "policy compliance (compliance): detector fake-domain 3" in caplog.messages
    assert not any(m.startswith("policy continuity") for m in caplog.messages)  # no detector


# ---- when Privacy runs beside the judges -----------------------------------------------------


def detector_threads(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Spies on the rig's fakes: policy kind → name of the thread its detector ran in. Privacy waits
    (up to 10 s) for Safety or Compliance to start, so a side thread, when there is one, runs them;
    with neither policy it does not wait."""
    seen: dict[str, str] = {}
    judging = threading.Event()
    if not any(p.kind in ("safety", "compliance") for p in rig.engine.policies):
        judging.set()
    for name, fake in (("safety", rig.safety), ("privacy", rig.pii), ("compliance", rig.domain)):
        def spy(texts, _detect=fake.detect, _name=name):
            seen[_name] = threading.current_thread().name
            if _name == "privacy":
                judging.wait(10)
            else:
                judging.set()
            return _detect(texts)
        monkeypatch.setattr(fake, "detect", spy)
    return seen


def side_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("guardrails-side")]


@pytest.mark.parametrize("judge", ["safety", "compliance"])
def test_privacy_runs_beside_either_judge_alone(monkeypatch, judge):
    rig = Rig([{"safety": SAFETY, "compliance": COMPLIANCE}[judge], PRIVACY])
    seen = detector_threads(rig, monkeypatch)
    assert rig.engine.screen_input([user("Hello, I am ada@example.org")]).action == "mask"
    assert seen[judge].startswith("guardrails-side") and seen["privacy"] == threading.current_thread().name


def test_privacy_alone_starts_no_side_thread(monkeypatch):
    engine_module.stop_side_threads()
    rig = Rig([PRIVACY])
    seen = detector_threads(rig, monkeypatch)
    rig.engine.screen_input([user("Hello, I am ada@example.org")])
    assert seen == {"privacy": threading.current_thread().name} and side_threads() == []


@pytest.mark.parametrize("size, beside", [(engine_module.PARALLEL_MAX_CHARS, True),
                                          (engine_module.PARALLEL_MAX_CHARS + 1, False)])
def test_privacy_runs_beside_the_judges_up_to_the_character_bound(monkeypatch, size, beside):
    rig = Rig()
    seen = detector_threads(rig, monkeypatch)
    rig.engine.screen_input([user("x" * size)])
    assert seen["safety"].startswith("guardrails-side") is beside


@pytest.mark.parametrize("count, beside", [(engine_module.PARALLEL_MAX_PIECES, True),
                                           (engine_module.PARALLEL_MAX_PIECES + 1, False)])
def test_privacy_runs_beside_the_judges_up_to_the_piece_bound(monkeypatch, count, beside):
    rig = Rig()
    definitions = {"extra_body": {"x": [f"v{i}" for i in range(count - 1)]}}
    assert rig.engine.count_pieces([user("hi")], definitions) == count
    seen = detector_threads(rig, monkeypatch)
    rig.engine.screen_input([user("hi")], definitions)
    assert seen["safety"].startswith("guardrails-side") is beside


def test_stopping_the_side_threads_waits_for_the_screen_they_run():
    pool = engine_module._side_pool()
    release, finished = threading.Event(), threading.Event()

    def screen() -> None:
        release.wait(10)
        finished.set()

    pool.submit(screen)

    def release_once_stopping() -> None:  # the screen ends only after the stop began
        while not pool._shutdown:
            time.sleep(0.01)
        time.sleep(0.2)
        release.set()

    threading.Thread(target=release_once_stopping).start()
    engine_module.stop_side_threads()
    assert finished.is_set()


# ---- continuity: heads, budgets and several policies -----------------------------------------


def continuity(policy_id: str, max_tokens: int, keep_last: int) -> ContinuityPolicy:
    return ContinuityPolicy(id=policy_id, kind="continuity", stages=["input"], max_tokens=max_tokens,
                            keep_last_messages=keep_last, summary_prompt="Summarize please.")


def test_leading_system_and_developer_messages_stay_verbatim(rig):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Cite."},
                *long_conversation()[1:]]
    plan = rig.engine.continuity_plan(messages, "m")
    assert plan is not None and (plan.head, plan.older, plan.kept) == (messages[:2], messages[2:6], messages[6:])
    developer_first = [{"role": "developer", "content": "Cite."}, *long_conversation()[1:]]
    assert rig.engine.continuity_plan(developer_first, "m").head == developer_first[:1]


def test_a_request_of_instructions_only_has_no_plan(rig):
    assert rig.engine.continuity_plan([{"role": "system", "content": "word " * 30}] * 3, "m") is None


def test_a_conversation_exactly_at_the_budget_is_not_summarized():
    messages = long_conversation()
    at_budget = continuity("at", count_words("m", messages), 2)
    assert Rig([at_budget]).engine.continuity_plan(messages, "m") is None
    over = continuity("over", count_words("m", messages) - 1, 2)
    assert Rig([over]).engine.continuity_plan(messages, "m").policy is over


def test_the_first_continuity_policy_that_applies_plans():
    messages = long_conversation()  # 6 turns after the head, 45 words
    keeps_everything, under_budget = continuity("keep-all", 5, 10), continuity("roomy", 1000, 2)
    tight = continuity("tight", 20, 3)
    plan = Rig([keeps_everything, under_budget, tight]).engine.continuity_plan(messages, "m")
    assert plan is not None and plan.policy is tight and plan.kept == messages[4:]


def test_tokens_are_counted_with_the_requests_model(rig):
    models: list[str] = []

    def per_model(model: str, messages: list[dict[str, Any]]) -> int:
        models.append(model)
        return count_words(model, messages)

    rig.engine.count_tokens = per_model
    plan = rig.engine.continuity_plan(long_conversation(), "gpt-x")
    rig.engine.apply_summary(plan, "a summary", "gpt-x")
    assert models == ["gpt-x", "gpt-x"]


def test_the_summary_request_labels_every_older_turn_with_its_role(rig):
    messages = [user("q1 " + "word " * 10), {"role": "assistant", "content": "a1 " + "word " * 10},
                {"content": "q2 " + "word " * 10}, user("q3"), user("q4")]
    plan = rig.engine.continuity_plan(messages, "m")
    assert plan is not None and plan.older == messages[:3]
    assert rig.engine.summary_request(plan) == [
        {"role": "system", "content": "Summarize please."},
        {"role": "user", "content": "\n".join([f"user: {message_text(messages[0])}",
                                               f"assistant: {message_text(messages[1])}",
                                               f"user: {message_text(messages[2])}"])}]
