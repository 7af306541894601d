"""Operating point of the Compliance classifier and the rows it was tuned on (issue 10 item 3).

The domain classifier (``detectors/domain.py``) is *fitted* only on the examples written in
``policies/compliance.yaml``. Its ``threshold`` was *tuned* on the development split: the 169
examples added on 2026-11-23 were written while reading which TruthfulQA questions and alpaca
seed tasks it escalated or missed, and the threshold is the highest that keeps the regulated
TruthfulQA questions' escalation at the target. So those development rows are "tuned on", and
the honest figure for them is a cross-validated one:

- :func:`two_fold_threshold`: the TruthfulQA questions are split in two halves by row hash
  (:func:`proxy.evaluation.provenance.row_hash`, parity of its last hex digit); the threshold is
  chosen on one half (the highest on a grid of 0.01 whose regulated recall reaches
  ``target_recall``) and applied to the other, and vice versa. Every question is scored by a
  threshold not chosen on it (out of fold). The decision counted is the classifier's alone
  (regulated probability ≥ threshold), not the engine's (a Safety refusal pre-empts escalation,
  the band's notice / personal-advice rule), so it can differ by a row or two from
  ``sonate eval guardrails``.
- :func:`compliance_rows`: writes ``artefacts/domain-threshold.rows.json`` (format
  :mod:`proxy.evaluation.provenance`): every development TruthfulQA question and alpaca seed task,
  and the out-of-fold figures of the TruthfulQA rows, which ``sonate eval guardrails`` prints
  beside the (then in-sample) development figures.

Pure scoring and selection functions (:func:`two_fold_threshold`) take arrays; :func:`compliance_rows`
reads the data directory and the policy file and writes the rows file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from proxy.evaluation import provenance
from proxy.evaluation.data import REGULATED_CATEGORIES, DataError, load_builtin

ARTEFACT = "domain-threshold"
ROWS_PATH = Path(__file__).resolve().parents[1] / "guardrails" / "artefacts" / f"{ARTEFACT}{provenance.ROWS_SUFFIX}"
POLICY = Path(__file__).resolve().parents[2] / "policies" / "compliance.yaml"
GRID = np.round(np.arange(0.05, 0.96, 0.01), 2)


def halves(texts: list[str]) -> np.ndarray:
    """Half (0 or 1) of each text: parity of the last hex digit of its row hash."""
    return np.array([int(provenance.row_hash(t)[-1], 16) % 2 for t in texts])


def chosen_threshold(p: np.ndarray, regulated: np.ndarray, target_recall: float) -> float:
    """The highest threshold of :data:`GRID` whose recall on the ``regulated`` rows of ``p``
    (regulated probability, shape (n,)) is ≥ ``target_recall``; the lowest grid value when none is.
    Raises ValueError when no row is regulated."""
    if not regulated.any():
        raise ValueError("no regulated row to choose a threshold on")
    ok = [t for t in GRID if (p[regulated] >= t).mean() >= target_recall]
    return float(max(ok)) if ok else float(GRID[0])


def two_fold_threshold(p: np.ndarray, regulated: np.ndarray, half: np.ndarray,
                       target_recall: float) -> dict[str, Any]:
    """Out-of-fold escalation of the threshold rule (module docstring).

    Args:
        p: regulated probability per question, shape (n,).
        regulated: bool (n,), the question's category is regulated.
        half: 0/1 (n,), :func:`halves`.
        target_recall: regulated recall the chosen threshold must reach on its tuning half.

    Returns:
        ``{"thresholds": [t chosen on half 0, t chosen on half 1], "escalated": bool (n,),
        "regulated": {"k", "n"}, "general": {"k", "n"}}``.
    """
    escalated = np.zeros(len(p), dtype=bool)
    thresholds = []
    for h in (0, 1):
        t = chosen_threshold(p[half == h], regulated[half == h], target_recall)
        thresholds.append(t)
        other = half != h
        escalated[other] = p[other] >= t
    return {"thresholds": thresholds, "escalated": escalated,
            "regulated": {"k": int(escalated[regulated].sum()), "n": int(regulated.sum())},
            "general": {"k": int(escalated[~regulated].sum()), "n": int((~regulated).sum())}}


def compliance_rows(data_dir: Path, policy: Path = POLICY, out: Path = ROWS_PATH,
                    target_recall: float = 0.90) -> dict[str, Any]:
    """Score the development TruthfulQA questions with the policy's classifier, run
    :func:`two_fold_threshold` and write the rows file; returns the document written (plus
    ``"summary"``: the thresholds and the in-sample rates at the policy's own threshold, not written).

    Raises DataError for a data directory without TruthfulQA questions, OSError / ValueError for
    an unreadable or invalid policy file.
    """
    import yaml

    from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

    items, _ = load_builtin(Path(data_dir))
    questions = [i for i in items if i.dataset == "truthfulqa"]
    if not questions:
        raise DataError(f"{data_dir}: no truthfulqa questions")
    block = yaml.safe_load(Path(policy).read_text(encoding="utf-8"))["detector"]
    classifier = DomainClassifier(DomainClassifierConfig.model_validate(block))
    texts = [q.text for q in questions]
    regulated_domains = np.array([classifier.config.domains[d].regulated for d in classifier.domains])
    p = classifier.probabilities(texts)[:, regulated_domains].sum(axis=1)
    regulated = np.array([q.category in REGULATED_CATEGORIES for q in questions])
    result = two_fold_threshold(p, regulated, halves(texts), target_recall)
    oof = {f"truthfulqa/{name}": {**result[name], "rate": round(result[name]["k"] / result[name]["n"], 4),
                                  "threshold": "2-fold: " + " / ".join(f"{t:.2f}" for t in result["thresholds"])}
           for name in ("regulated", "general") if result[name]["n"]}
    groups = {"truthfulqa_dev": texts,
              "alpaca_seed": [i.text for i in items if i.dataset == "alpaca_seed"]}
    document = provenance.rows_document(
        ARTEFACT, "compliance", "tuned", groups, artefact_files={},
        out_of_fold=oof,
        note=f"threshold of policies/compliance.yaml chosen on these TruthfulQA questions (regulated recall >= "
             f"{target_recall:.2f}), examples written while reading the questions and alpaca seed tasks it "
             "escalated or missed; out_of_fold: threshold chosen on one half (row-hash parity), applied to the "
             "other (proxy/evaluation/training_compliance.py)")
    provenance.write_rows(out, document)
    at = float(classifier.config.threshold)
    document["summary"] = {
        "thresholds": result["thresholds"], "policy_threshold": at,
        "in_sample": {"regulated": [int((p[regulated] >= at).sum()), int(regulated.sum())],
                      "general": [int((p[~regulated] >= at).sum()), int((~regulated).sum())]}}
    return document
