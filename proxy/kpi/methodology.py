"""The published methodology constants: version, weights, thresholds and targets.

Every number a KPI report depends on and a reader must be able to reproduce lives here, and
``METHODOLOGY_VERSION`` names the set. Any change of a weight, a sampling rule or a definition
bumps the version (``YYYY.MM.DD-rN``: the date of the change, ``N`` counting revisions of that
day) and gets an entry in ``docs/methodology-changelog.md``. Pure constants: no I/O.
"""

from __future__ import annotations

import re
from types import MappingProxyType

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "COMPLEXITY_WEIGHTS",
    "CONFIDENCE",
    "METHODOLOGY_VERSION",
    "MIN_CLAIMS",
    "MIN_INTERACTIONS",
    "PROVIDER_MIN_SHARE",
    "TARGETS",
    "TIS_WEIGHTS",
    "VERSION_PATTERN",
    "as_dict",
]

METHODOLOGY_VERSION = "2026.11.22-r1"
"""Version of the methodology these constants implement (``YYYY.MM.DD-rN``)."""

VERSION_PATTERN = re.compile(r"^\d{4}\.\d{2}\.\d{2}-r[1-9]\d*$")

COMPLEXITY_WEIGHTS = MappingProxyType({"simple": 0.25, "standard": 0.35, "advanced": 0.30, "critical": 0.10})
"""α_s of the complexity-normalized KPI M_norm = Σ α_s·M_s (methodology "Strata"); sums to 1."""

TIS_WEIGHTS = MappingProxyType({"lvp": 0.35, "rc": 0.20, "ga": 0.25, "ad": 0.20})
"""TIS = 0.35·LVP + 0.20·RC + 0.25·GA + 0.20·AD (methodology "TIS"); sums to 1."""

CONFIDENCE = 0.95
"""Confidence level of every published interval (Wilson for proportions, bootstrap-normal for indices)."""

BOOTSTRAP_RESAMPLES = 1000
"""Minimum number of bootstrap resamples for an index interval (methodology "Statistics")."""

MIN_INTERACTIONS = 200
"""A stratum with fewer interactions is published as NA (enters aggregates only via partial pooling)."""

MIN_CLAIMS = 50
"""A stratum with fewer checked claims is published as NA for FAR-H."""

PROVIDER_MIN_SHARE = 0.15
"""Each provider should carry at least this share of a report's interactions; smaller ones are flagged."""

TARGETS = MappingProxyType(
    {
        "far_a": {"op": "<", "value": 0.005, "unit": "proportion"},
        "far_h_general": {"op": "<", "value": 0.01, "unit": "proportion"},
        "far_h_regulated": {"op": "<", "value": 0.0025, "unit": "proportion"},
        "pfi_enterprise": {"op": ">=", "value": 0.98, "unit": "index"},
        "pfi_public": {"op": ">=", "value": 0.95, "unit": "index"},
        "tis": {"op": ">=", "value": 0.995, "unit": "index"},
    }
)
"""Published targets (methodology "The methodology, in short"); proportions as fractions, not percent."""


def as_dict() -> dict:
    """Return the methodology as a JSON-ready dict (version, weights, rules, targets) for reports."""
    return {
        "version": METHODOLOGY_VERSION,
        "complexity_weights": dict(COMPLEXITY_WEIGHTS),
        "tis_weights": dict(TIS_WEIGHTS),
        "confidence": CONFIDENCE,
        "proportion_interval": "wilson",
        "index_interval": f"normal from bootstrap (estimate ± z·SE_boot), >= {BOOTSTRAP_RESAMPLES} resamples",
        "min_interactions": MIN_INTERACTIONS,
        "min_claims": MIN_CLAIMS,
        "provider_min_share": PROVIDER_MIN_SHARE,
        "partial_pooling": "empirical-Bayes beta-binomial shrinkage toward the pooled rate (method of moments)",
        "rounding": {"proportion": "percent, 2 decimals, half-up", "index": "3 decimals, half-up"},
        "targets": {name: dict(target) for name, target in TARGETS.items()},
    }
