"""An embeddings request is no chat interaction (FAR-A's denominator): proxy.evaluation.kpi_report groups
only chat receipts (``evidence.endpoint`` absent, ``"chat"``, or the Responses / Messages APIs served
over the chat pipeline) into interactions."""

from __future__ import annotations

from proxy.evaluation.kpi_report import _interactions

WINDOW = ("2026-11-23T00:00:00.000Z", "2026-11-24T00:00:00.000Z")


def _receipt(request_id: str, action: str, evidence: dict) -> dict:
    return {"request_id": request_id, "guardrail_action": action, "ts": "2026-11-23T12:00:00.000Z",
            "evidence": evidence, "stratum": {"domain": "general", "complexity": "simple", "provider": "openai"}}


def test_only_chat_receipts_are_interactions():
    receipts = [_receipt("req_chat", "allow", {"policies_evaluated": []}),
                _receipt("req_chat2", "mask", {"endpoint": "chat"}),
                _receipt("req_resp", "refuse", {"endpoint": "responses"}),
                _receipt("req_msg", "escalate", {"endpoint": "messages"}),
                _receipt("req_emb", "mask", {"endpoint": "embeddings", "inputs": 2}),
                _receipt("req_emb2", "refuse", {"endpoint": "embeddings", "inputs": 1})]
    assert sorted(_interactions(receipts, *WINDOW)) == ["req_chat", "req_chat2", "req_msg", "req_resp"]
