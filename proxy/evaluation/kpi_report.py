"""The KPI report: FAR-A, TIS (LVP, RC, GA, AD), FAR-H and PFI over an evaluation window.

Pure computation over what ``sonate report`` read (:mod:`proxy.cli.report` does the I/O):
the ledger's receipts, the adjudication items, the escalation cases, each policy's required
evidence and the trusted public keys. Definitions (methodology; ``docs/methodology-changelog.md``):

- *Interaction*: one chat request = the receipts sharing a ``request_id`` whose
  ``guardrail_action`` is not a human action (:data:`HUMAN_ACTIONS`), with ``ts`` in
  ``[start, end)``, served by chat completions or the Responses / Messages APIs
  (:data:`CHAT_ENDPOINTS`); receipts of other endpoints (``evidence.endpoint``, e.g. ``"embeddings"``)
  are no chat request and no interaction (they still count in LVP's sample of receipts). Its stratum
  is the receipt's ``stratum`` (domain, complexity, provider); a missing or unknown complexity
  counts as ``standard`` in every figure.
- **FAR-A** = interactions whose apology (a refusal, or ``evidence.model_apology``) was
  adjudicated *unnecessary* / interactions. Apologies not yet adjudicated count as necessary;
  the adjudication coverage is disclosed next to the figure.
- **LVP** = sampled receipts of the window passing the signature, schema and chain checks
  (:func:`proxy.receipts.verify.verify_receipt` against the previous height) / sampled.
- **RC** = actions with a receipt / actions. Actions: every receipt of an interaction, plus the
  human actions the store records about it — a resolved escalation (needs a ``resolve``
  receipt) and each adjudication pass or lead verdict (needs an ``adjudicate`` receipt).
- **GA** = 1 − (FP + FN) / triggers, per interaction: a trigger is an interaction with a
  guardrail action other than ``allow``; FP = trigger adjudicated without a verified breach; FN =
  allowed interactions adjudicated with a breach — those found in the random sample are scaled by
  the inverse sampling fraction (eligible allowed interactions / adjudicated sample items),
  those among model apologies (a census) count once.
- **AD** = required evidence fields present / required, over the receipts of interactions whose
  policy declares ``evidence_required`` (the same rule as the proxy's AD counters).
- **TIS** = 0.35·LVP + 0.20·RC + 0.25·GA + 0.20·AD.

Statistics (:mod:`proxy.kpi.stats`): Wilson 95 % intervals for proportions; for indices (TIS,
complexity-normalized values) a normal interval from a bootstrap of ``resamples`` (≥ 1,000)
resamples of interactions; a complexity stratum under 200 interactions is NA and enters the
normalized value through beta-binomial partial pooling.

Trends (``evaluation_trends``, only when the store holds runs): the summaries of the stored
``sonate eval conversation`` runs generated in the window, one row per run, oldest first.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from proxy.evaluation.conversation.results import TREND_METRICS, trend_rows
from proxy.kpi.adjudication import FINAL_STATUSES, TRIGGER_ACTIONS, agreement_by_domain
from proxy.kpi.audit_depth import evidence_present
from proxy.kpi.methodology import (
    BOOTSTRAP_RESAMPLES,
    COMPLEXITY_WEIGHTS,
    CONFIDENCE,
    METHODOLOGY_VERSION,
    PROVIDER_MIN_SHARE,
    TARGETS,
    TIS_WEIGHTS,
    as_dict,
)
from proxy.kpi.stats import (
    bootstrap_interval,
    normalized,
    partial_pool,
    publishable,
    round_index,
    round_percent,
    tis,
    wilson_interval,
)
from proxy.kpi.strata import COMPLEXITIES
from proxy.receipts.ledgers import ledger_of
from proxy.receipts.verify import verify_receipt

__all__ = ["FORMAT_ID", "HUMAN_ACTIONS", "ReportInputs", "build_report", "evidence_present", "proportion_block"]

FORMAT_ID = "sonate.report/v1"
HUMAN_ACTIONS = frozenset({"adjudicate", "resolve"})
"""Receipted actions taken by people about an interaction, not interactions themselves."""

# Columns of the per-interaction matrix the bootstrap resamples.
_COLS = ("interaction", "apology", "unnecessary", "trigger", "misfire", "actions", "receipted",
         "lvp_sampled", "lvp_passed", "ad_required", "ad_present")
_C = {name: i for i, name in enumerate(_COLS)}


@dataclass
class ReportInputs:
    """Everything a report is computed from.

    ``receipts``: the ledger's receipts in height order (all heights scanned; the window is
    applied here); ``review_items`` the adjudication items; ``cases`` the escalation cases;
    ``evidence_required`` policy_id → required evidence fields; ``public_keys`` key_id → 32-byte
    Ed25519 key; ``start``/``end`` the window as RFC 3339 UTC strings with milliseconds
    (``2026-11-01T00:00:00.000Z``), end exclusive; ``farh``/``pfi`` the checked inputs of
    :mod:`proxy.evaluation.kpi_inputs` (or None); ``lvp_sample`` receipts re-verified for LVP; ``seed``
    for every random draw; ``resamples`` bootstrap resamples (≥ 1000).
    """

    receipts: Sequence[dict[str, Any]]
    review_items: Sequence[dict[str, Any]]
    cases: Sequence[dict[str, Any]]
    evidence_required: Mapping[str, Sequence[str]]
    public_keys: Mapping[str, bytes]
    start: str
    end: str
    generated_at: str
    farh: dict[str, Any] | None = None
    pfi: dict[str, Any] | None = None
    lvp_sample: int = 1000
    seed: int = 0
    resamples: int = BOOTSTRAP_RESAMPLES
    sources: dict[str, Any] = field(default_factory=dict)
    #: Stored ``sonate eval conversation`` results (the store's ``conversation`` series), for the trends.
    evaluations: Sequence[dict[str, Any]] = ()


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def proportion_block(successes: int, n: int, *, kind: str = "interactions") -> dict[str, Any]:
    """A published proportion: counts, rate, Wilson 95 % interval, NA rule and display strings.

    ``{"successes", "n", "rate", "ci_low", "ci_high", "published", "display", "ci_display"}``;
    rate and interval are given even when not published (for pooling), ``display`` is "NA"
    under the minimum N (``kind``: interactions 200, claims 50).
    """
    low, high = wilson_interval(successes, n, CONFIDENCE)
    rate = successes / n if n else None
    published = publishable(n, kind)
    return {"successes": successes, "n": n, "rate": rate, "ci_low": _finite(low), "ci_high": _finite(high),
            "published": published, "display": round_percent(rate) if published else "NA",
            "ci_display": [round_percent(low), round_percent(high)] if published else None}


def _index_block(estimate: float, low: float, high: float, n: int, *, published: bool = True) -> dict[str, Any]:
    ok = published and math.isfinite(estimate)
    return {"value": _finite(estimate), "ci_low": _finite(low), "ci_high": _finite(high), "n": n,
            "published": ok, "display": round_index(estimate) if ok else "NA",
            "ci_display": [round_index(low), round_index(high)] if ok and math.isfinite(low) else None}


@dataclass
class _Interaction:
    request_id: str
    stratum: dict[str, str]
    receipts: list[dict[str, Any]] = field(default_factory=list)


#: ``evidence.endpoint`` values of chat interactions: chat completions (no field), and the Responses
#: and Messages APIs translated onto the same pipeline (docs/api.md).
CHAT_ENDPOINTS = frozenset({"chat", "responses", "messages"})


def _in_window(ts: str, start: str, end: str) -> bool:
    return start <= ts < end  # RFC 3339 UTC with milliseconds: lexicographic = chronological


def _interactions(receipts: Sequence[dict[str, Any]], start: str, end: str) -> dict[str, _Interaction]:
    out: dict[str, _Interaction] = {}
    for r in receipts:
        if r.get("guardrail_action") in HUMAN_ACTIONS or not _in_window(r.get("ts", ""), start, end):
            continue
        if (r.get("evidence") or {}).get("endpoint", "chat") not in CHAT_ENDPOINTS:  # embeddings: no chat request
            continue
        request_id = r.get("request_id")
        if not isinstance(request_id, str) or not request_id:  # a broken record: an LVP orphan, no interaction
            continue
        stratum = r.get("stratum") or {}
        entry = out.setdefault(request_id, _Interaction(request_id, {
            "domain": str(stratum.get("domain") or r.get("intent") or "general"),
            "complexity": _complexity(stratum.get("complexity")),
            "provider": str(stratum.get("provider") or r.get("provider") or "unknown")}))
        entry.receipts.append(r)
    return out


def _complexity(value: Any) -> str:
    """A receipt's complexity stratum: one of :data:`~proxy.kpi.strata.COMPLEXITIES`; a missing or
    unknown value counts as ``standard`` everywhere in the report (FAR-A, TIS and per_stratum_n alike)."""
    return value if isinstance(value, str) and value in COMPLEXITIES else "standard"


def _by_request(cases: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Escalation cases grouped by request_id, in input order (a request may have several)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        if "request_id" in case:
            out.setdefault(case["request_id"], []).append(case)
    return out


def _human_receipt_index(receipts: Sequence[dict[str, Any]]) -> tuple[set[tuple[str, str | None]], set[str]]:
    """(adjudication_id, stage) pairs and escalation ids that have a receipt anywhere in the ledger."""
    adjudications: set[tuple[str, str | None]] = set()
    resolutions: set[str] = set()
    for r in receipts:
        evidence = r.get("evidence") or {}
        if r.get("guardrail_action") == "adjudicate" and "adjudication_id" in evidence:
            adjudications.add((evidence["adjudication_id"], evidence.get("stage")))
        elif r.get("guardrail_action") == "resolve" and "escalation_id" in evidence:
            resolutions.add(evidence["escalation_id"])
    return adjudications, resolutions


def _lvp_sample(receipts: Sequence[dict[str, Any]], start: str, end: str, size: int, seed: int,
                keys: Mapping[str, bytes]) -> dict[str, list[bool]]:
    """Re-verify a seeded random sample of the window's receipts, each against the receipt before
    it in its own ledger (:func:`~proxy.receipts.ledgers.ledger_of`); request_id → [passed, ...]."""
    by_height = {(ledger_of(r), r.get("ledger_height")): r for r in receipts}
    window = [r for r in receipts if _in_window(r.get("ts", ""), start, end)]
    sample = window if len(window) <= size else random.Random(seed).sample(window, size)
    results: dict[str, list[bool]] = defaultdict(list)
    for r in sample:
        height = r.get("ledger_height")
        previous = by_height.get((ledger_of(r), height - 1)) if isinstance(height, int) and height > 0 else None
        missing_previous = isinstance(height, int) and height > 0 and previous is None
        ok = not missing_previous and not verify_receipt(r, dict(keys), previous)
        results[r.get("request_id", "")].append(ok)
    return results


@dataclass(frozen=True)
class _Lookups:
    """What the per-interaction columns look up besides the interaction's own receipts."""

    items: dict[str, dict[str, Any]]       # request_id -> adjudication item
    cases: dict[str, list[dict[str, Any]]]  # request_id -> its escalation cases
    adjudicated: set[tuple[str, str | None]]  # (adjudication_id, stage) with an ``adjudicate`` receipt
    resolved: set[str]                     # escalation ids with a ``resolve`` receipt
    lvp: dict[str, list[bool]]             # request_id -> LVP re-verification results
    evidence_required: Mapping[str, Sequence[str]]

    @classmethod
    def of(cls, inputs: ReportInputs) -> "_Lookups":
        """Index the inputs' review items, cases and human receipts; draw the LVP sample."""
        adjudicated, resolved = _human_receipt_index(inputs.receipts)
        return cls(items={i["request_id"]: i for i in inputs.review_items if "request_id" in i},
                   cases=_by_request(inputs.cases),
                   adjudicated=adjudicated, resolved=resolved,
                   lvp=_lvp_sample(inputs.receipts, inputs.start, inputs.end, inputs.lvp_sample, inputs.seed,
                                   inputs.public_keys),
                   evidence_required=inputs.evidence_required)


def _final(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """The item's final adjudication, or None while it is not final."""
    return item.get("final") if item and item.get("status") in FINAL_STATUSES else None


def _apology(inter: _Interaction) -> bool:
    """FAR-A denominator event: a refusal, or a model apology the proxy detected."""
    return any(r["guardrail_action"] == "refuse" or (r.get("evidence") or {}).get("model_apology") is True
               for r in inter.receipts)


def _misfire(apology: bool, trigger: bool, item: dict[str, Any] | None,
             final: dict[str, Any] | None) -> tuple[float, str]:
    """GA: (misfire 0/1, the interaction's role in the random sample of allowed interactions).

    Roles: ``""`` (a trigger or apology, not sampled), ``eligible`` (allowed, not adjudicated in
    the sample), ``sampled`` / ``sampled_fn`` (adjudicated in the sample; ``_fn`` = a false
    negative, whose misfire is scaled later by the inverse sampling fraction).
    """
    if not apology and not trigger:
        if final and item is not None and "sample" in item.get("reasons", []):  # final implies an item
            return 0.0, "sampled_fn" if final.get("false_negative") else "sampled"
        return 0.0, "eligible"
    if final and ((trigger and final.get("false_positive")) or final.get("false_negative")):
        return 1.0, ""  # a false negative here: e.g. a model apology the guardrails should have prevented (census)
    return 0.0, ""


def _receipted_actions(inter: _Interaction, item: dict[str, Any] | None, look: _Lookups) -> tuple[int, int]:
    """RC: (actions, actions with a receipt): the interaction's receipts plus its human actions."""
    n_actions = n_receipted = len(inter.receipts)
    if item:
        stages = list((item.get("passes") or {}).keys()) + (["lead"] if item.get("lead") else [])
        n_actions += len(stages)
        n_receipted += sum((item["id"], s) in look.adjudicated for s in stages)
    for case in look.cases.get(inter.request_id, []):  # each resolution is a human action
        if case.get("status") == "resolved":
            n_actions += 1
            n_receipted += case["id"] in look.resolved
    return n_actions, n_receipted


def _evidence_counts(inter: _Interaction, evidence_required: Mapping[str, Sequence[str]]) -> tuple[int, int]:
    """AD: (required evidence fields, fields present) over the interaction's receipts."""
    required_total = present = 0
    for r in inter.receipts:
        required = evidence_required.get(r.get("policy_id") or "")
        if required:
            required_total += len(required)
            present += evidence_present(r, required)
    return required_total, present


def _row(inter: _Interaction, look: _Lookups) -> tuple[list[float], str, bool]:
    """One interaction's matrix row (:data:`_COLS`), its sample role and whether it is adjudicated."""
    item = look.items.get(inter.request_id)
    final = _final(item)
    apology = _apology(inter)
    trigger = any(r["guardrail_action"] in TRIGGER_ACTIONS for r in inter.receipts)
    unnecessary = bool(final and final.get("unnecessary_apology") and apology)      # FAR-A
    misfire, role = _misfire(apology, trigger, item, final)                         # GA
    n_actions, n_receipted = _receipted_actions(inter, item, look)                  # RC
    checks = look.lvp.get(inter.request_id, [])                                     # LVP
    ad_required, ad_present = _evidence_counts(inter, look.evidence_required)       # AD
    row = [1, apology, unnecessary, trigger, misfire, n_actions, n_receipted, len(checks), sum(checks),
           ad_required, ad_present]
    return row, role, bool(final)


def _matrix(inputs: ReportInputs) -> tuple[np.ndarray, list[dict[str, str]], dict[str, Any]]:
    """The per-interaction matrix (:data:`_COLS`), each row's stratum, and disclosure counts."""
    interactions = _interactions(inputs.receipts, inputs.start, inputs.end)
    look = _Lookups.of(inputs)
    rows, roles, adjudicated = [], [], []
    for inter in interactions.values():
        row, role, is_final = _row(inter, look)
        rows.append(row)
        roles.append(role)
        adjudicated.append(is_final)
    matrix = np.array(rows, dtype=float).reshape(len(rows), len(_COLS))
    # GA false negatives found in the random sample stand for the unsampled allowed interactions.
    fn_rows = [i for i, role in enumerate(roles) if role == "sampled_fn"]
    eligible = sum(role in ("eligible", "sampled", "sampled_fn") for role in roles)
    sampled_final = sum(role in ("sampled", "sampled_fn") for role in roles)
    scale = eligible / sampled_final if sampled_final else 0.0
    matrix[fn_rows, _C["misfire"]] = scale
    apology, trigger, final = matrix[:, _C["apology"]] > 0, matrix[:, _C["trigger"]] > 0, np.array(adjudicated, bool)
    # Receipts sampled for LVP that belong to no interaction of the window (human actions):
    orphan = [ok for rid, oks in look.lvp.items() if rid not in interactions for ok in oks]
    info = {"apologies": int(apology.sum()), "apologies_adjudicated": int((apology & final).sum()),
            "triggers": int(trigger.sum()), "triggers_adjudicated": int((trigger & final).sum()),
            "eligible_for_sample": eligible, "sample_adjudicated": sampled_final,
            "false_negatives_in_sample": len(fn_rows), "fn_scale": scale, "lvp_orphans": orphan}
    return matrix, [inter.stratum for inter in interactions.values()], info


def _components(m: np.ndarray, orphan: Sequence[bool] = ()) -> dict[str, float]:
    """LVP, RC, GA, AD (nan when a denominator is 0) from column sums of ``m``."""
    s = m.sum(axis=0) if len(m) else np.zeros(len(_COLS))
    sampled = s[_C["lvp_sampled"]] + len(orphan)
    passed = s[_C["lvp_passed"]] + sum(orphan)

    def ratio(num: float, den: float) -> float:
        return num / den if den else math.nan

    return {"lvp": ratio(passed, sampled), "rc": ratio(s[_C["receipted"]], s[_C["actions"]]),
            "ga": max(0.0, 1.0 - s[_C["misfire"]] / s[_C["trigger"]]) if s[_C["trigger"]] else math.nan,
            "ad": ratio(s[_C["ad_present"]], s[_C["ad_required"]])}


def _tis_of(components: Mapping[str, float]) -> float:
    values = [components[k] for k in TIS_WEIGHTS]
    return math.nan if any(not math.isfinite(v) for v in values) else tis(*values)


def _component_counts(m: np.ndarray, orphan: Sequence[bool] = ()) -> dict[str, tuple[int, int]]:
    """(successes, n) of each TIS component, for Wilson intervals and pooling (GA's FN rounded)."""
    s = m.sum(axis=0) if len(m) else np.zeros(len(_COLS))
    triggers = int(s[_C["trigger"]])
    return {"lvp": (int(s[_C["lvp_passed"]]) + sum(orphan), int(s[_C["lvp_sampled"]]) + len(orphan)),
            "rc": (int(s[_C["receipted"]]), int(s[_C["actions"]])),
            "ga": (max(0, triggers - int(round(s[_C["misfire"]]))), triggers),
            "ad": (int(s[_C["ad_present"]]), int(s[_C["ad_required"]]))}


def _pooled_strata(m: np.ndarray, index: np.ndarray, metric: str) -> dict[str, float]:
    """Per-complexity value of ``metric`` (``far_a`` or ``tis``): raw when publishable, else pooled."""
    n_by = {c: int(m[index == i, _C["interaction"]].sum()) for i, c in enumerate(COMPLEXITIES)}
    if metric == "far_a":
        counts = {c: (int(m[index == i, _C["unnecessary"]].sum()), n_by[c]) for i, c in enumerate(COMPLEXITIES)}
        pooled = partial_pool(counts)
        return {c: (counts[c][0] / n_by[c]) if publishable(n_by[c], "interactions") else pooled[c].pooled
                for c in COMPLEXITIES}
    per = {c: _component_counts(m[index == i]) for i, c in enumerate(COMPLEXITIES)}
    out = {}
    pools = {k: partial_pool({c: per[c][k] for c in COMPLEXITIES}) for k in TIS_WEIGHTS}
    for c in COMPLEXITIES:
        if publishable(n_by[c], "interactions"):
            comps = _components(m[index == COMPLEXITIES.index(c)])
        else:
            comps = {k: pools[k][c].pooled for k in TIS_WEIGHTS}
        out[c] = _tis_of(comps)
    return out


def _normalized_or_nan(values: Mapping[str, float]) -> float:
    try:
        return normalized(values, COMPLEXITY_WEIGHTS)
    except ValueError:
        return math.nan


def _far_a(m: np.ndarray, index: np.ndarray, strata: list[dict[str, str]], inputs: ReportInputs) -> dict[str, Any]:
    total = proportion_block(int(m[:, _C["unnecessary"]].sum()), int(m[:, _C["interaction"]].sum()))
    per_complexity = {}
    counts = {c: (int(m[index == i, _C["unnecessary"]].sum()), int((index == i).sum())) for i, c in enumerate(COMPLEXITIES)}
    pooled = partial_pool(counts)
    for c in COMPLEXITIES:
        block = proportion_block(*counts[c])
        block["pooled"] = _finite(pooled[c].pooled)
        block["shrinkage"] = _finite(pooled[c].shrinkage)
        per_complexity[c] = block
    data = np.column_stack([index, m])

    def statistic(sample: np.ndarray) -> float:
        return _normalized_or_nan(_pooled_strata(sample[:, 1:], sample[:, 0].astype(int), "far_a"))

    est, low, high = bootstrap_interval(data, statistic, resamples=inputs.resamples, seed=inputs.seed, bounds=(0.0, 1.0))
    norm_block = {"value": _finite(est), "ci_low": _finite(low), "ci_high": _finite(high),
                  "display": round_percent(est) if math.isfinite(est) else "NA",
                  "ci_display": [round_percent(low), round_percent(high)] if math.isfinite(low) else None,
                  "interval": "bootstrap normal"}
    by = {}
    for dim in ("domain", "provider"):
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for row, stratum in zip(m, strata):
            groups[stratum[dim]][0] += int(row[_C["unnecessary"]])
            groups[stratum[dim]][1] += 1
        by[dim] = {k: proportion_block(*v) for k, v in sorted(groups.items())}
    target = TARGETS["far_a"]
    return {"kpi": "FAR-A", "unit": "percent of interactions", "overall": total, "per_complexity": per_complexity,
            "normalized": norm_block, "per_domain": by["domain"], "per_provider": by["provider"],
            "target": dict(target),
            "meets_target": (total["rate"] < target["value"]) if total["published"] else None}


def _tis(m: np.ndarray, index: np.ndarray, orphan: Sequence[bool], inputs: ReportInputs) -> dict[str, Any]:
    comps = _components(m, orphan)
    counts = _component_counts(m, orphan)
    components = {}
    for k in TIS_WEIGHTS:
        block = proportion_block(*counts[k], kind="interactions")
        block["published"] = math.isfinite(comps[k]) and publishable(int(m[:, _C["interaction"]].sum()), "interactions")
        block["value"] = _finite(comps[k])
        block["display"] = round_percent(comps[k]) if block["published"] else "NA"
        block["ci_display"] = ([round_percent(block["ci_low"]), round_percent(block["ci_high"])]
                               if block["published"] and block["ci_low"] is not None else None)
        block["weight"] = TIS_WEIGHTS[k]
        components[k] = block
    n = int(m[:, _C["interaction"]].sum())

    def statistic(sample: np.ndarray) -> float:
        return _tis_of(_components(sample, orphan))

    est, low, high = bootstrap_interval(m, statistic, resamples=inputs.resamples, seed=inputs.seed, bounds=(0.0, 1.0))
    overall = _index_block(est, low, high, n, published=publishable(n, "interactions"))
    per_complexity = {}
    for i, c in enumerate(COMPLEXITIES):
        rows = m[index == i]
        if len(rows):
            e, lo, hi = bootstrap_interval(rows, lambda s: _tis_of(_components(s)), resamples=inputs.resamples,
                                           seed=inputs.seed, bounds=(0.0, 1.0))
        else:
            e = lo = hi = math.nan
        block = _index_block(e, lo, hi, len(rows), published=publishable(len(rows), "interactions"))
        per_complexity[c] = block
    pooled_values = _pooled_strata(m, index, "tis")
    for c in COMPLEXITIES:
        per_complexity[c]["pooled"] = _finite(pooled_values[c])
    data = np.column_stack([index, m])

    def norm_statistic(sample: np.ndarray) -> float:
        return _normalized_or_nan(_pooled_strata(sample[:, 1:], sample[:, 0].astype(int), "tis"))

    e, lo, hi = bootstrap_interval(data, norm_statistic, resamples=inputs.resamples, seed=inputs.seed, bounds=(0.0, 1.0))
    target = TARGETS["tis"]
    return {"kpi": "TIS", "formula": "0.35*LVP + 0.20*RC + 0.25*GA + 0.20*AD", "overall": overall,
            "components": components, "per_complexity": per_complexity,
            "normalized": _index_block(e, lo, hi, n), "target": dict(target),
            # TARGETS rows mix str and float values; "value" is a float
            "meets_target": (est >= cast(float, target["value"])) if overall["published"] else None}


def _far_h(farh: dict[str, Any]) -> dict[str, Any]:
    def block(counts: dict[str, int], tier: str | None) -> dict[str, Any]:
        b = proportion_block(counts["failed"], counts["checked"], kind="claims")
        target = {"general": TARGETS["far_h_general"], "regulated": TARGETS["far_h_regulated"]}.get(tier or "")
        b["target"] = dict(target) if target else None
        b["meets_target"] = (b["rate"] < target["value"]) if (target and b["published"]) else None
        return b

    return {"kpi": "FAR-H", "unit": "percent of claims checked", "overall": block(farh["overall"], None),
            "per_tier": {t: block(c, t) for t, c in farh["per_tier"].items()},
            "per_domain": {d: block(c, "regulated" if d in ("legal", "health", "finance") else "general")
                           for d, c in farh["per_domain"].items()},
            "source_window": farh["window"], "source_methodology_version": farh["methodology_version"]}


def _pfi(pfi: dict[str, Any]) -> dict[str, Any]:
    def block(entry: dict[str, Any]) -> dict[str, Any]:
        low, high = entry.get("ci_low"), entry.get("ci_high")
        return {"value": entry["pfi"], "ci_low": low, "ci_high": high, "display": round_index(entry["pfi"]),
                "ci_display": [round_index(low), round_index(high)] if low is not None and high is not None else None}

    value = pfi["overall"]["pfi"]

    overall = block(pfi["overall"])
    overall["rule"] = pfi["overall"].get("rule")
    return {"kpi": "PFI", "overall": overall,
            "per_attribute": {a: {**block(e), "n": e["n"], "weights": e["weights"], "deltas": e.get("deltas")}
                              for a, e in pfi["attributes"].items()},
            "targets": {"enterprise": dict(TARGETS["pfi_enterprise"]), "public": dict(TARGETS["pfi_public"])},
            "meets_enterprise": None if value is None else value >= TARGETS["pfi_enterprise"]["value"],
            "meets_public": None if value is None else value >= TARGETS["pfi_public"]["value"],
            "source_window": pfi["window"], "source_methodology_version": pfi["methodology_version"]}


def _disclosure(strata: list[dict[str, str]], inputs: ReportInputs) -> dict[str, Any]:
    n = len(strata)
    per = {dim: dict(sorted(Counter(s[dim] for s in strata).items())) for dim in ("complexity", "domain", "provider")}
    per["complexity"] = {c: per["complexity"].get(c, 0) for c in COMPLEXITIES}
    mix = {p: {"n": k, "share": k / n, "below_min_share": k / n < PROVIDER_MIN_SHARE}
           for p, k in per["provider"].items()} if n else {}
    return {"n_interactions": n, "per_stratum_n": per, "provider_mix": mix,
            "provider_min_share": PROVIDER_MIN_SHARE,
            "providers_below_min_share": sorted(p for p, v in mix.items() if v["below_min_share"]),
            "window": {"start": inputs.start, "end": inputs.end, "end_exclusive": True}}


def build_report(inputs: ReportInputs) -> dict[str, Any]:
    """Compute the report (format ``sonate.report/v1``) from ``inputs``.

    Deterministic for given inputs and ``seed``. Raises ValueError for a bad window
    (``start >= end``) or resamples under 1000.
    """
    if not inputs.start < inputs.end:
        raise ValueError(f"the window must have start < end, got {inputs.start} .. {inputs.end}")
    if inputs.resamples < BOOTSTRAP_RESAMPLES:
        raise ValueError(f"resamples must be >= {BOOTSTRAP_RESAMPLES}")
    m, strata, info = _matrix(inputs)
    index = np.array([COMPLEXITIES.index(s["complexity"]) for s in strata], dtype=int)
    window_items = [i for i in inputs.review_items if _in_window(i.get("ts", ""), inputs.start, inputs.end)]
    statuses = Counter(i.get("status") for i in window_items)
    notes = []
    if info["apologies"] > info["apologies_adjudicated"]:
        notes.append(f"{info['apologies'] - info['apologies_adjudicated']} of {info['apologies']} apologies are not "
                     "adjudicated yet and count as necessary: FAR-A is a lower bound until they are.")
    if info["eligible_for_sample"] and not info["sample_adjudicated"]:
        notes.append("No sampled allowed interaction is adjudicated: false negatives are unknown (GA counts none).")
    disclosure = _disclosure(strata, inputs)
    if disclosure["providers_below_min_share"]:
        notes.append("Providers under the 15% share rule: " + ", ".join(disclosure["providers_below_min_share"]) + ".")
    kpis: dict[str, Any] = {"far_a": _far_a(m, index, strata, inputs),
                            "tis": _tis(m, index, info["lvp_orphans"], inputs)}
    if inputs.farh is not None:
        kpis["far_h"] = _far_h(inputs.farh)
    if inputs.pfi is not None:
        kpis["pfi"] = _pfi(inputs.pfi)
    extra: dict[str, Any] = {}
    if inputs.evaluations:
        extra["evaluation_trends"] = _evaluation_trends(inputs)
    return {
        "format": FORMAT_ID,
        "methodology_version": METHODOLOGY_VERSION,
        "methodology": as_dict(),
        "generated_at": inputs.generated_at,
        "window": {"start": inputs.start, "end": inputs.end},
        "disclosure": disclosure,
        "kpis": kpis,
        "adjudication": {
            "items_in_window": len(window_items), "by_status": dict(sorted(statuses.items())),
            "apologies": info["apologies"], "apologies_adjudicated": info["apologies_adjudicated"],
            "triggers": info["triggers"], "triggers_adjudicated": info["triggers_adjudicated"],
            "allowed_eligible_for_sample": info["eligible_for_sample"],
            "sample_adjudicated": info["sample_adjudicated"],
            "false_negatives_in_sample": info["false_negatives_in_sample"],
            "false_negative_scale": info["fn_scale"],
            "agreement": {d: {**v, "display": round_index(v["ac1"])} for d, v in agreement_by_domain(window_items).items()},
        },
        "lvp": {"sampled": int(m[:, _C["lvp_sampled"]].sum()) + len(info["lvp_orphans"]),
                "sample_size_requested": inputs.lvp_sample, "seed": inputs.seed},
        "confidence": CONFIDENCE,
        "resamples": inputs.resamples,
        "sources": inputs.sources,
        "notes": notes,
        **extra,
    }


def _evaluation_trends(inputs: ReportInputs) -> dict[str, Any]:
    """The conversation-metric summaries of the stored runs generated in the window, oldest first
    (:func:`proxy.evaluation.conversation.results.trend_rows`): one row per run."""
    runs = [r for r in inputs.evaluations if _in_window(str(r.get("generated") or ""), inputs.start, inputs.end)]
    return {"conversation": {"metrics": list(TREND_METRICS), "runs": trend_rows(runs)}}
