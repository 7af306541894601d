"""Admission and resilience: per-key limits, guardrail lanes, the receipt sink and spool,
workers, checkpoint publication."""
