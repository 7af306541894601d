"""An escalation case's receipts checked as a chain (proxy.server.flow.review.case_chain)."""

from __future__ import annotations

from proxy.server.flow.review.case_chain import verify_case


def escalation(case_id: str = "esc_1") -> dict:
    return {"receipt_id": "rcpt_e", "guardrail_action": "escalate", "ledger_height": 0,
            "evidence": {"escalation_id": case_id}}


def step(n: int, name: str, previous: str, origin: str = "rcpt_e", case_id: str = "esc_1") -> dict:
    return {"receipt_id": f"rcpt_{n}", "guardrail_action": "resolve", "ledger_height": n,
            "evidence": {"escalation_id": case_id, "step": name, "escalation_receipt_id": origin,
                         "previous_receipt_id": previous}}


def test_steps_linked_in_ledger_order_verify() -> None:
    receipts = [escalation(), step(1, "approve", "rcpt_e"), step(2, "model_call", "rcpt_1"),
                step(3, "release", "rcpt_2"), step(4, "approve", "rcpt_e", case_id="esc_2")]
    assert verify_case(receipts, "esc_1") == (["approve", "model_call", "release"], [])


def test_a_pending_case_has_no_steps_and_verifies() -> None:
    assert verify_case([escalation()], "esc_1") == ([], [])


def test_a_missing_or_forked_step_breaks_the_chain() -> None:
    missing = [escalation(), step(1, "approve", "rcpt_e"), step(3, "release", "rcpt_2")]
    names, failures = verify_case(missing, "esc_1")
    assert names == ["approve", "release"] and [(f.check, f.receipt_id) for f in failures] == [("case-link", "rcpt_3")]
    forked = [escalation(), step(1, "approve", "rcpt_e"), step(2, "reject", "rcpt_e")]
    assert [f.receipt_id for f in verify_case(forked, "esc_1")[1]] == ["rcpt_2"]
    elsewhere = [escalation(), step(1, "approve", "rcpt_e", origin="rcpt_other")]
    assert [f.check for f in verify_case(elsewhere, "esc_1")[1]] == ["case-link"]


def test_a_case_without_its_escalation_receipt_fails() -> None:
    names, failures = verify_case([step(1, "approve", "rcpt_e")], "esc_1")
    assert names == [] and [f.check for f in failures] == ["case-escalation"]
    assert str(failures[0]).startswith("case esc_1: case-escalation:")
