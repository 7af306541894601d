"""Operating point of the Compliance classifier, chosen out of fold on the tuning part.

The domain classifier (``detectors/domain.py``) is *fitted* only on the examples written in
``policies/compliance.yaml``. Its ``threshold`` is *tuned* on the tuning part of the development
split (:mod:`proxy.evaluation.split`): the TruthfulQA questions and alpaca seed tasks, each labelled
by what it asks (``regulated/labels_dev.tsv``: :attr:`~proxy.evaluation.data.Item.subset`
``regulated`` or not), and the examples were written while reading which of those rows it escalated
or missed. The sealed part is never read here. So the tuning rows are "tuned on", and the honest
figure for them is a cross-validated one:

- :func:`escalated`: the engine's decision for a regulated probability ``p``: escalated when
  ``p >= threshold``, or when ``p`` lies in the band ``[threshold - margin, threshold)`` and the
  request is about the writer's own situation (``personal_escalates``,
  :func:`~proxy.guardrails.detectors.privacy_context.personal_request`).
- :func:`chosen_threshold`: the threshold on a grid of 0.01 with the lowest cost on the rows given,
  cost = the share of regulated rows missed + ``ordinary_weight`` × the share of ordinary rows
  escalated, each row counted by a logistic step of width :data:`BANDWIDTH` around the threshold
  (:func:`soft_escalated`) instead of 0 or 1. A rule that follows one row's score (the highest
  threshold keeping 92% regulated recall follows the fifth-lowest regulated row) ranged over
  0.30-0.44 across example sets 3% apart; the smoothed cost weighs every row near the threshold
  and ranged over 0.46-0.51 (tuning rows only: docs/decisions/0002-compliance-threshold.md).
- :func:`out_of_fold_threshold`: the rows fall into ``k`` folds by row hash (:func:`folds`); each
  fold is scored by the threshold chosen on the other folds, so every row is judged by a threshold
  not chosen on it. A Safety refusal pre-empts escalation in the engine and is not counted here,
  so the figures can differ by a row from ``sonate eval guardrails``.
- :func:`refuse_duplicate_examples`: stops when a description or example of the policy repeats a
  development row of any source, in either part, verbatim or nearly
  (:class:`~proxy.evaluation.split.NearDuplicates`), naming the example by domain and number only.
- :func:`compliance_rows`: writes ``artefacts/domain-threshold.rows.json`` (format
  :mod:`proxy.evaluation.provenance`): the tuning part's TruthfulQA questions and alpaca seed tasks,
  and the out-of-fold figures per source and label, which ``sonate eval guardrails`` prints beside
  the (then in-sample) tuning figures. The policy's ``threshold`` is the rule applied to all of them.

Pure scoring and selection functions take arrays; :func:`compliance_rows` reads the data directory
and the policy file and writes the rows file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from proxy.evaluation import provenance
from proxy.evaluation.data import DataError, development_index, load_builtin

ARTEFACT = "domain-threshold"
ROWS_PATH = Path(__file__).resolve().parents[1] / "guardrails" / "artefacts" / f"{ARTEFACT}{provenance.ROWS_SUFFIX}"
POLICY = Path(__file__).resolve().parents[2] / "policies" / "compliance.yaml"
GRID = np.round(np.arange(0.05, 0.96, 0.01), 2)
#: Sources whose rows carry the regulated labels (what a request asks).
SOURCES = ("truthfulqa", "alpaca_seed")
#: Folds of the out-of-fold rule.
FOLDS = 5
#: Weight of the ordinary rows escalated against the regulated rows missed in the threshold's cost.
ORDINARY_WEIGHT = 2.0
#: Width of the logistic step by which a row counts as escalated in the threshold's cost.
BANDWIDTH = 0.1


def folds(texts: list[str], k: int = FOLDS) -> np.ndarray:
    """Fold (0..k-1) of each text: the last hex digit of its row hash, modulo ``k``."""
    return np.array([int(provenance.row_hash(t)[-1], 16) % k for t in texts])


def escalated(p: np.ndarray, threshold: float, margin: float = 0.0,
              personal: np.ndarray | None = None) -> np.ndarray:
    """Bool (n,): ``p >= threshold``, or ``p`` in ``[threshold - margin, threshold)`` and ``personal``."""
    band = (p >= threshold - margin) & (p < threshold)
    return (p >= threshold) | (band & (personal if personal is not None else False))


def soft_escalated(p: np.ndarray, threshold: float, margin: float = 0.0,
                   personal: np.ndarray | None = None, bandwidth: float = BANDWIDTH) -> np.ndarray:
    """Float (n,) in (0, 1): :func:`escalated` with each step replaced by a logistic of width
    ``bandwidth``: ``sigmoid((p - threshold) / bandwidth)``, for a personal request the larger of
    that and ``sigmoid((p - threshold + margin) / bandwidth)``."""
    from scipy.special import expit

    soft = expit((p - threshold) / bandwidth)
    if personal is None:
        return np.asarray(soft, dtype=float)
    return np.asarray(np.where(personal, np.maximum(soft, expit((p - threshold + margin) / bandwidth)), soft),
                      dtype=float)


def chosen_threshold(p: np.ndarray, regulated: np.ndarray, ordinary_weight: float = ORDINARY_WEIGHT,
                     margin: float = 0.0, personal: np.ndarray | None = None,
                     bandwidth: float = BANDWIDTH) -> float:
    """The threshold of :data:`GRID` with the lowest cost on the rows of ``p`` (regulated
    probability, shape (n,)): the mean of ``1 - soft`` over the ``regulated`` rows plus
    ``ordinary_weight`` × the mean of ``soft`` over the others, ``soft`` by :func:`soft_escalated`;
    the lowest such threshold on a tie. Raises ValueError when no row is regulated or none is
    ordinary."""
    if not regulated.any() or regulated.all():
        raise ValueError("the threshold needs both regulated and ordinary rows")
    costs = []
    for t in GRID:
        soft = soft_escalated(p, float(t), margin, personal, bandwidth)
        costs.append((1 - soft[regulated]).mean() + ordinary_weight * soft[~regulated].mean())
    return float(GRID[int(np.argmin(costs))])


def out_of_fold_threshold(p: np.ndarray, regulated: np.ndarray, fold: np.ndarray,
                          ordinary_weight: float = ORDINARY_WEIGHT, margin: float = 0.0,
                          personal: np.ndarray | None = None) -> dict[str, Any]:
    """Out-of-fold escalation of the threshold rule (module docstring).

    Args:
        p: regulated probability per row, shape (n,).
        regulated: bool (n,), the row is labelled regulated.
        fold: int (n,), :func:`folds`.
        ordinary_weight: weight of the ordinary rows escalated in :func:`chosen_threshold`'s cost.
        margin, personal: the band and the personal-request flags (n,) of :func:`escalated`.

    Returns:
        ``{"thresholds": [t scoring fold 0, t scoring fold 1, ...] (each chosen on the other folds),
        "escalated": bool (n,), "regulated": {"k", "n"}, "general": {"k", "n"}}``.
    """
    out = np.zeros(len(p), dtype=bool)
    personal = np.zeros(len(p), dtype=bool) if personal is None else personal
    thresholds = []
    for f in sorted(set(fold.tolist())):
        rest, this = fold != f, fold == f
        t = chosen_threshold(p[rest], regulated[rest], ordinary_weight, margin, personal[rest])
        thresholds.append(t)
        out[this] = escalated(p[this], t, margin, personal[this])
    return {"thresholds": thresholds, "escalated": out,
            "regulated": {"k": int(out[regulated].sum()), "n": int(regulated.sum())},
            "general": {"k": int(out[~regulated].sum()), "n": int((~regulated).sum())}}


def refuse_duplicate_examples(domains: dict[str, Any], data_dir: Path) -> None:
    """Raise DataError when a description or example of ``domains`` (the policy's
    ``detector.domains``: name -> ``{"description", "examples"}``) matches a development row under
    ``data_dir``, tuning or sealed part (:func:`~proxy.evaluation.data.development_index`). The
    message names each clash by domain and 1-based example number (0: the description) and the
    row's source, never a text (a sealed row must not be shown)."""
    index, source_of = development_index(Path(data_dir))
    clashes = []
    for name, spec in domains.items():
        for n, text in enumerate([spec["description"], *spec["examples"]]):
            match = index.match(str(text))
            if match is not None:
                clashes.append(f"{name} example {n} duplicates a development row of {source_of[match]}")
    if clashes:
        raise DataError(f"{len(clashes)} Compliance example(s) match development rows (benchmark rows are never "
                        "trained on; remove or rewrite them): " + "; ".join(clashes))


def compliance_rows(data_dir: Path, policy: Path = POLICY, out: Path = ROWS_PATH,
                    ordinary_weight: float = ORDINARY_WEIGHT) -> dict[str, Any]:
    """Score the tuning part's TruthfulQA questions and alpaca seed tasks with the policy's
    classifier, run :func:`out_of_fold_threshold` and write the rows file; returns the document
    written (plus ``"summary"``, not written: the fold thresholds, the rule on all rows
    (``recommended``) and the in-sample counts at the policy's own threshold).

    Raises DataError for a data directory without TruthfulQA questions or for an example that
    repeats a development row (:func:`refuse_duplicate_examples`), OSError / ValueError for an
    unreadable or invalid policy file.
    """
    import yaml

    from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig
    from proxy.guardrails.detectors.privacy_context import personal_request

    items, _ = load_builtin(Path(data_dir), "tuning")
    rows = [i for i in items if i.dataset in SOURCES]
    if not any(i.dataset == "truthfulqa" for i in rows):
        raise DataError(f"{data_dir}: no truthfulqa questions")
    block = yaml.safe_load(Path(policy).read_text(encoding="utf-8"))["detector"]
    refuse_duplicate_examples(block["domains"], Path(data_dir))
    classifier = DomainClassifier(DomainClassifierConfig.model_validate(block))
    config = classifier.config
    texts = [i.text for i in rows]
    regulated_domains = np.array([config.domains[d].regulated for d in classifier.domains])
    p = classifier.probabilities(texts)[:, regulated_domains].sum(axis=1)
    regulated = np.array([i.subset == "regulated" for i in rows])
    personal = np.array([config.personal_escalates and personal_request(t) for t in texts])
    result = out_of_fold_threshold(p, regulated, folds(texts), ordinary_weight, config.margin, personal)
    label = "out of fold: " + " / ".join(f"{t:.2f}" for t in result["thresholds"])
    oof: dict[str, dict[str, Any]] = {}
    for key in sorted({f"{i.dataset}/{i.subset}" for i in rows}):
        mask = np.array([f"{i.dataset}/{i.subset}" == key for i in rows])
        k, n = int(result["escalated"][mask].sum()), int(mask.sum())
        oof[key] = {"k": k, "n": n, "rate": round(k / n, 4), "threshold": label}
    groups = {"truthfulqa_dev": [i.text for i in rows if i.dataset == "truthfulqa"],
              "alpaca_seed": [i.text for i in rows if i.dataset == "alpaca_seed"]}
    document = provenance.rows_document(
        ARTEFACT, "compliance", "tuned", groups, artefact_files={},
        out_of_fold=oof,
        note=f"threshold of policies/compliance.yaml chosen on these rows, the tuning part's TruthfulQA questions "
             f"and alpaca seed tasks labelled by regulated/labels_dev.tsv (lowest cost: regulated missed + {ordinary_weight:g} x ordinary "
             f"escalated, rows counted by a logistic step of width {BANDWIDTH:g}, the band's personal requests "
             "counted as escalated); examples written while reading the rows it "
             f"escalated or missed; out_of_fold: {FOLDS} folds by row hash, each scored by the threshold chosen on "
             "the others (proxy/evaluation/training_compliance.py)")
    provenance.write_rows(out, document)
    at = float(config.threshold)
    at_policy = escalated(p, at, config.margin, personal)
    document["summary"] = {
        "thresholds": result["thresholds"], "policy_threshold": at,
        "recommended": chosen_threshold(p, regulated, ordinary_weight, config.margin, personal),
        "out_of_fold": {"regulated": [result["regulated"]["k"], result["regulated"]["n"]],
                        "ordinary": [result["general"]["k"], result["general"]["n"]]},
        "in_sample": {"regulated": [int(at_policy[regulated].sum()), int(regulated.sum())],
                      "ordinary": [int(at_policy[~regulated].sum()), int((~regulated).sum())]}}
    return document
