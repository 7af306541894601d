"""FAR-H, the hallucination rate: claims failing verification / claims checked (methodology "FAR-H").

Pure (no I/O). :func:`check_outputs` mines and verifies the claims of model outputs
(:mod:`proxy.evaluation.claims`, :mod:`proxy.evaluation.oracle`); :func:`farh_result` turns the checked
claims into the published result (:data:`FARH_RESULT_FORMAT`): FAR-H with its 95 % Wilson
interval overall, per tier (general / regulated) and per domain, NA under
:data:`~proxy.kpi.methodology.MIN_CLAIMS` checked claims, judged against the targets
(< 1.00 % general, < 0.25 % regulated).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, cast

from proxy.evaluation.claims import METHODS, Claim, assign_method, dedupe, mine_claims
from proxy.evaluation.oracle import (
    REGULATED_DOMAINS,
    Oracle,
    OracleVerdict,
    RegexRule,
    validate_claim,
    verify_with_oracle,
    verify_with_regex,
)
from proxy.kpi.methodology import CONFIDENCE, METHODOLOGY_VERSION, MIN_CLAIMS, TARGETS
from proxy.kpi.stats import publishable, round_percent, wilson_interval

__all__ = ["FARH_RESULT_FORMAT", "FORMAT_ID", "CheckedClaim", "OutputRecord", "check_outputs", "farh_result",
           "rate_block", "tier_of"]

FORMAT_ID = "sonate.farh/v1"

FARH_RESULT_FORMAT = """\
FAR-H result (``sonate eval hallucination --out farh.json``), format ``sonate.farh/v1``.
A JSON object; proportions are fractions in [0, 1] (display strings are percent, 2 decimals):

    {
      "format": "sonate.farh/v1",
      "kpi": "FAR-H",
      "methodology_version": "2026.11.22-r1",
      "generated_at": "2026-11-22T10:00:00Z",             # RFC 3339 UTC
      "window": {"start": str|null, "end": str|null},       # ISO 8601 UTC of the outputs, when known
      "confidence": 0.95,
      "min_claims": 50,
      "inputs": {"outputs": int,                            # records read
                 "outputs_with_oracle": int,                # whose question is in the oracle set
                 "oracles": ["halueval", "truthfulqa"],     # oracle sources used
                 "oracle_questions": int,
                 "regex_rules": int,
                 "model_assisted": bool,                    # model span detection pass on?
                 "model_assisted_failures": int,            # outputs whose span pass failed (CLI)
                 "outputs_not_model": int,                  # guardrail notices skipped (CLI)
                 "source": str},                            # outputs file or proxy URL
      "claims": {"mined": int,                              # after de-duplication
                 "checked": int,                            # with a verdict (pass or fail)
                 "failed": int,
                 "unchecked": int,                          # no verdict: queued for human review
                 "by_kind": {kind: int},                    # claims by pattern kind (a claim may have several)
                 "by_method": {"oracle"|"regex"|"validator"|"human":
                               {"checked": int, "failed": int, "unchecked": int}}},
      "overall":   RATE,
      "per_tier":  {"general": RATE, "regulated": RATE},    # regulated = legal, health, finance
      "per_domain": {domain: RATE},
      "details": [ {"record_id", "domain", "text", "kinds", "method", "verdict", "reference",
                    "score_correct", "score_incorrect", "detail"} ]   # one per claim
    }

RATE = {"checked": int, "failed": int,
        "rate": float|null,              # failed/checked (null when checked = 0)
        "ci_low": float|null, "ci_high": float|null,   # Wilson 95 % (null when checked = 0)
        "published": bool,               # checked >= min_claims; else the KPI is NA
        "display": "0.47%"|"NA", "ci_display": ["0.10%", "1.20%"]|null,
        "tier": "general"|"regulated"|"mixed",
        "target": {"op": "<", "value": 0.01}|null,    # null for the mixed overall figure
        "meets_target": bool|null}       # null when not published or no target

``rate``/``ci_*`` are reported even when ``published`` is false so a report can pool strata;
a published report shows ``display`` ("NA" under the minimum).
"""


@dataclass(frozen=True)
class OutputRecord:
    """One model output to check: ``id``, the ``output`` text, the ``question`` it answers (for
    the oracle), and optionally its ``domain`` (proxy domain name) and ``ts`` (RFC 3339)."""

    id: str
    output: str
    question: str | None = None
    domain: str | None = None
    ts: str | None = None


@dataclass(frozen=True)
class CheckedClaim:
    """A claim with its record, domain and verification verdict."""

    record_id: str
    domain: str
    claim: Claim
    verdict: OracleVerdict

    @property
    def checked(self) -> bool:
        """True when a method gave a verdict (pass or fail)."""
        return self.verdict.verdict is not None

    @property
    def failed(self) -> bool:
        """True when the verdict is fail."""
        return self.verdict.verdict == "fail"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready detail row (see :data:`FARH_RESULT_FORMAT`)."""
        return {"record_id": self.record_id, "domain": self.domain, "text": self.claim.text,
                "kinds": list(self.claim.kinds), **self.verdict.as_dict()}


def tier_of(domain: str) -> str:
    """``regulated`` for legal / health / finance, else ``general``."""
    return "regulated" if domain in REGULATED_DOMAINS else "general"


def _verify(claim: Claim, entry: Any, rules: Sequence[RegexRule]) -> OracleVerdict:
    # Methods in order from the assigned one; the first verdict wins, else human.
    tried: list[OracleVerdict] = []
    verdict: OracleVerdict | None
    for method in METHODS[METHODS.index(claim.method):]:
        if method == "oracle" and entry is not None:
            verdict = verify_with_oracle(claim, entry)
        elif method == "regex":
            verdict = verify_with_regex(claim, rules)
        elif method == "validator":
            verdict = validate_claim(claim)
        else:
            continue
        if verdict is None:
            continue
        if verdict.verdict is not None:
            return verdict
        tried.append(verdict)
    last = tried[0] if tried else None
    return OracleVerdict(None, "human", last.reference if last else None, last.score_correct if last else 0.0,
                   last.score_incorrect if last else 0.0, last.detail if last else "no automatic method applies")


def check_outputs(records: Iterable[OutputRecord], oracle: Oracle, *, regex_rules: Sequence[RegexRule] = (),
                  model_claims: Mapping[str, Sequence[Claim]] | None = None) -> list[CheckedClaim]:
    """Mine, de-duplicate, map and verify the claims of ``records``.

    Per record: deterministic claims (:func:`~proxy.evaluation.claims.mine_claims`, with the question
    for the direct-answer claim), plus ``model_claims[record.id]`` from the model-assisted pass
    when given, de-duplicated on normalised text; each is mapped to a method
    (:func:`~proxy.evaluation.claims.assign_method`) and verified by that method, falling through to
    the next (oracle → regex → validator) while undecided, else left to a human. The domain
    is the record's, else the oracle entry's, else ``general``.
    """
    result: list[CheckedClaim] = []
    for record in records:
        entry = oracle.lookup(record.question)
        claims = mine_claims(record.output, question=record.question)
        if model_claims and model_claims.get(record.id):
            claims = dedupe([*claims, *model_claims[record.id]])
        domain = record.domain or (entry.domain if entry else "general")
        for claim in claims:
            regex_applies = any(rule.applies.search(claim.text) for rule in regex_rules)
            mapped = assign_method(claim, has_oracle=entry is not None, regex_applies=regex_applies)
            result.append(CheckedClaim(record.id, domain, mapped, _verify(mapped, entry, regex_rules)))
    return result


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def rate_block(failed: int, checked: int, tier: str, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The RATE object of :data:`FARH_RESULT_FORMAT` for ``failed``/``checked`` claims.

    FAR-H = failed / checked (× 100 when displayed); Wilson interval
    (:func:`~proxy.kpi.stats.wilson_interval`); published when checked ≥ MIN_CLAIMS (else NA);
    target < 1.00 % for ``general``, < 0.25 % for ``regulated``, none for ``mixed``.
    Raises ValueError for bad counts (from the Wilson interval).
    """
    low, high = wilson_interval(failed, checked, confidence)
    rate = failed / checked if checked else None
    published = publishable(checked, "claims")
    target = {"general": TARGETS["far_h_general"], "regulated": TARGETS["far_h_regulated"]}.get(tier)
    meets = None
    if published and target is not None and rate is not None:  # published implies checked > 0
        meets = rate < cast(float, target["value"])  # TARGETS rows mix str and float values
    return {
        "checked": checked, "failed": failed, "rate": rate, "ci_low": _finite(low), "ci_high": _finite(high),
        "published": published, "display": round_percent(rate) if published else "NA",
        "ci_display": [round_percent(low), round_percent(high)] if published else None,
        "tier": tier, "target": {"op": target["op"], "value": target["value"]} if target else None,
        "meets_target": meets,
    }


def farh_result(checked: Sequence[CheckedClaim], *, records: int, records_with_oracle: int,
                oracles: Sequence[str], oracle_questions: int, regex_rules: int, model_assisted: bool,
                source: str, generated_at: str, window: tuple[str | None, str | None] = (None, None),
                details: bool = True) -> dict[str, Any]:
    """The FAR-H result object (:data:`FARH_RESULT_FORMAT`) of ``checked`` claims.

    ``generated_at`` and ``window`` are RFC 3339 UTC strings supplied by the caller (this
    module reads no clock).
    """
    by_method = {m: {"checked": 0, "failed": 0, "unchecked": 0} for m in ("oracle", "regex", "validator", "human")}
    kinds: Counter[str] = Counter()
    per_domain: dict[str, list[int]] = {}
    per_tier = {"general": [0, 0], "regulated": [0, 0]}
    for c in checked:
        kinds.update(c.claim.kinds)
        slot = by_method[c.verdict.method]
        if c.checked:
            slot["checked"] += 1
            slot["failed"] += int(c.failed)
            counts = per_domain.setdefault(c.domain, [0, 0])
            counts[0] += int(c.failed)
            counts[1] += 1
            tier = per_tier[tier_of(c.domain)]
            tier[0] += int(c.failed)
            tier[1] += 1
        else:
            slot["unchecked"] += 1
            per_domain.setdefault(c.domain, [0, 0])
    n_checked = sum(1 for c in checked if c.checked)
    n_failed = sum(1 for c in checked if c.failed)
    return {
        "format": FORMAT_ID,
        "kpi": "FAR-H",
        "methodology_version": METHODOLOGY_VERSION,
        "generated_at": generated_at,
        "window": {"start": window[0], "end": window[1]},
        "confidence": CONFIDENCE,
        "min_claims": MIN_CLAIMS,
        "inputs": {"outputs": records, "outputs_with_oracle": records_with_oracle, "oracles": list(oracles),
                   "oracle_questions": oracle_questions, "regex_rules": regex_rules,
                   "model_assisted": model_assisted, "source": source},
        "claims": {"mined": len(checked), "checked": n_checked, "failed": n_failed,
                   "unchecked": len(checked) - n_checked, "by_kind": dict(sorted(kinds.items())),
                   "by_method": by_method},
        "overall": rate_block(n_failed, n_checked, _overall_tier(per_tier)),
        "per_tier": {tier: rate_block(f, n, tier) for tier, (f, n) in per_tier.items()},
        "per_domain": {d: rate_block(f, n, tier_of(d)) for d, (f, n) in sorted(per_domain.items())},
        "details": [c.as_dict() for c in checked] if details else [],
    }


def _overall_tier(per_tier: Mapping[str, list[int]]) -> str:
    present = [tier for tier, (_, n) in per_tier.items() if n]
    return present[0] if len(present) == 1 else "mixed"
