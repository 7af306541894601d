"""The Audit Depth (AD) evidence rule of TIS (docs/architecture.md "Metric conventions").

One rule for both places that count it: the proxy's ``sonate_evidence_*`` counters at request
time and ``sonate report`` over stored receipts. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def evidence_present(receipt: Mapping[str, Any], required: Sequence[str]) -> int:
    """How many ``required`` evidence fields ``receipt`` carries (top level or in ``evidence``).

    A field counts when present and not null / "" / {} / [] — the rule of the proxy's AD
    counters and ``sonate report``.
    """
    evidence = receipt.get("evidence") or {}

    def present(name: str) -> bool:
        value = receipt.get(name, evidence.get(name))
        return value is not None and value != "" and value != {} and value != []

    return sum(1 for name in required if present(name))
