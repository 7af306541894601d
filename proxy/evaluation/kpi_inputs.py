"""The JSON inputs ``sonate report`` accepts from the evaluation commands, and their checks.

- ``--farh-results``: the output of ``sonate eval hallucination`` (format ``sonate.farh/v1``,
  :data:`proxy.evaluation.hallucination.FARH_RESULT_FORMAT`). The report uses ``overall``,
  ``per_tier`` and ``per_domain`` (``checked``/``failed`` counts) and recomputes every rate and
  Wilson interval itself.
- ``--pfi-results``: the output of ``sonate eval fairness`` (format ``sonate.pfi/v1``,
  :data:`proxy.evaluation.fairness.PFI_RESULT_FORMAT`). The report recomputes each axis's PFI from the
  file's observations and refuses a file whose stated PFI disagrees.

Pure: callers pass parsed JSON. Every loader raises :class:`InputError` naming the field.
"""

from __future__ import annotations

import math
from typing import Any

from proxy.evaluation.fairness import Observation, axis_pfi

__all__ = ["FARH_FORMAT", "PFI_FORMAT", "PFI_INPUT_FORMAT", "InputError", "check_farh", "check_pfi"]

FARH_FORMAT = "sonate.farh/v1"
PFI_FORMAT = "sonate.pfi/v1"

PFI_INPUT_FORMAT = "see proxy.evaluation.fairness.PFI_RESULT_FORMAT (sonate.pfi/v1, written by `sonate eval fairness`)"


class InputError(ValueError):
    """An input file does not follow its format; the message names the field."""


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def _number(value: Any, where: str, *, nullable: bool = False) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _rate_counts(block: Any, where: str) -> dict[str, int]:
    if not isinstance(block, dict):
        raise InputError(f"{where} must be an object with checked and failed")
    checked = _count(block.get("checked"), f"{where}.checked")
    failed = _count(block.get("failed"), f"{where}.failed")
    if failed > checked:
        raise InputError(f"{where}: failed ({failed}) exceeds checked ({checked})")
    return {"checked": checked, "failed": failed}


def check_farh(doc: Any) -> dict[str, Any]:
    """Validate a ``sonate.farh/v1`` document; return its counts.

    Returns ``{"overall": {checked, failed}, "per_tier": {tier: {...}}, "per_domain": {...},
    "window": {...}, "methodology_version": str}``. Raises :class:`InputError`.
    """
    if not isinstance(doc, dict) or doc.get("format") != FARH_FORMAT:
        raise InputError(f"FAR-H results must be a JSON object with \"format\": \"{FARH_FORMAT}\"")
    out: dict[str, Any] = {"overall": _rate_counts(doc.get("overall"), "overall")}
    for section in ("per_tier", "per_domain"):
        blocks = doc.get(section, {})
        if not isinstance(blocks, dict):
            raise InputError(f"{section} must be an object")
        out[section] = {k: _rate_counts(v, f"{section}.{k}") for k, v in blocks.items()}
    window = doc.get("window") or {}
    out["window"] = {"start": window.get("start"), "end": window.get("end")}
    out["methodology_version"] = doc.get("methodology_version")
    return out


def check_pfi(doc: Any) -> dict[str, Any]:
    """Validate a ``sonate.pfi/v1`` document (:data:`proxy.evaluation.fairness.PFI_RESULT_FORMAT`).

    The PFI of every axis is recomputed from the document's ``observations`` with
    ``outcome_weights`` (:func:`proxy.evaluation.fairness.axis_pfi`, built on
    :func:`proxy.kpi.stats.pfi`); a stated ``per_axis.<axis>.pfi`` that differs by more than
    1e-6 is refused. Returns ``{"attributes": {axis: {pfi, ci_low, ci_high, n, weights,
    deltas}}, "overall": {pfi, ci_low, ci_high, rule}, "window", "methodology_version"}``.
    Raises :class:`InputError`.
    """
    if not isinstance(doc, dict) or doc.get("format") != PFI_FORMAT:
        raise InputError(f"PFI results must be a JSON object with \"format\": \"{PFI_FORMAT}\"")
    weights, per_axis, raw = doc.get("outcome_weights"), doc.get("per_axis"), doc.get("observations")
    if not isinstance(weights, dict) or not isinstance(per_axis, dict) or not isinstance(raw, list):
        raise InputError("PFI results need outcome_weights, per_axis and observations")
    try:
        observations = [Observation(**o) for o in raw]
        recomputed = axis_pfi(observations, weights)
    except (TypeError, ValueError) as exc:
        raise InputError(f"observations/outcome_weights: {exc}") from None
    out: dict[str, Any] = {"attributes": {}}
    for axis, block in per_axis.items():
        if not isinstance(block, dict):
            raise InputError(f"per_axis.{axis} must be an object")
        stated = _number(block.get("pfi"), f"per_axis.{axis}.pfi", nullable=True)
        value = recomputed.get(axis)
        if stated is not None and (value is None or abs(stated - value) > 1e-6):
            raise InputError(f"per_axis.{axis}.pfi is {stated} but its observations give {value}")
        out["attributes"][axis] = {
            "pfi": value, "n": _count(block.get("n", 0), f"per_axis.{axis}.n"),
            "ci_low": _number(block.get("ci_low"), f"per_axis.{axis}.ci_low", nullable=True),
            "ci_high": _number(block.get("ci_high"), f"per_axis.{axis}.ci_high", nullable=True),
            "weights": weights, "deltas": block.get("deltas"),
        }
    overall = doc.get("overall") or {}
    values = [a["pfi"] for a in out["attributes"].values() if a["pfi"] is not None]
    minimum = min(values) if values else None
    stated = _number(overall.get("pfi"), "overall.pfi", nullable=True)
    if stated is not None and (minimum is None or abs(stated - minimum) > 1e-6):
        raise InputError(f"overall.pfi is {stated} but the minimum over the axes is {minimum}")
    out["overall"] = {"pfi": minimum, "ci_low": _number(overall.get("ci_low"), "overall.ci_low", nullable=True),
                      "ci_high": _number(overall.get("ci_high"), "overall.ci_high", nullable=True),
                      "rule": f"min over attributes ({overall.get('binding_axis')})"}
    window = doc.get("window") or {}
    out["window"] = {"start": window.get("start"), "end": window.get("end")}
    out["methodology_version"] = doc.get("methodology_version")
    return out
