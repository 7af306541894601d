"""Human review: escalation cases and adjudication items, one claim → decide → receipt workflow
on the store's status compare-and-set queue (docs/architecture.md "Request flow").
"""
