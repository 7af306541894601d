"""Audit Depth's evidence count (proxy/kpi/audit_depth.py, docs/architecture.md "Metric conventions").
"""

from __future__ import annotations

from proxy.kpi.audit_depth import evidence_present


def test_evidence_counts_top_level_and_evidence_fields_but_not_empty_ones() -> None:
    """A field counts at the top level or inside ``evidence``; None, "", {} and [] do not count."""
    required = ["policy_id", "guardrail_action", "categories", "spans", "detector", "note"]
    receipt = {"policy_id": "safety", "guardrail_action": "",
               "evidence": {"categories": ["toxicity"], "spans": [], "detector": {}, "note": None,
                            "guardrail_action": "refuse"}}
    assert evidence_present(receipt, required) == 2
    assert evidence_present({"policy_id": "p"}, ["policy_id"]) == 1
    assert evidence_present({"evidence": {"policy_id": "p"}}, ["policy_id"]) == 1
    assert evidence_present({"policy_id": 0, "evidence": None}, ["policy_id", "x"]) == 1
    assert evidence_present({}, []) == 0
