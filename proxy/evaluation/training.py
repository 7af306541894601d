"""Train the harmful-intent classifier shipped in ``proxy/guardrails/artefacts``.

``sonate train safety --data-dir ../shared/data --out proxy/guardrails/artefacts`` (options in
:mod:`proxy.cli.train`). The data are read by :func:`proxy.evaluation.data.load_training_examples`.

Data (development split, layout of the public data folder, e.g. ``../shared/data``; any ``*.csv``/``*.jsonl`` file in each
folder is read, so the small samples in ``tests/data`` work too):

====================  ==================  =====================================================
group                 harm label          source
====================  ==================  =====================================================
advbench              harmful (train)     ``advbench/*.csv`` column ``goal`` (required)
xstest_unsafe         harmful (train)     ``xstest/*.csv`` rows ``label == unsafe`` (required)
xstest_safe           benign (train)      ``xstest/*.csv`` rows ``label == safe``
davidson_neither      benign (train)      ``davidson/*.csv`` ``class == 2`` (optional)
exemplar_harmful,     harmful / benign    ``artefacts/safety-exemplars.csv``: contrast pairs
exemplar_benign       (train, never CV    written for this project (same scary word, harmful vs
                      test rows)          benign target); always in training, never evaluated
alpaca_seed           evaluation only     ``alpaca_seed/*.jsonl`` field ``instruction``
                                          (CC BY-NC: never trained on, only scored)
davidson_hate,        evaluation only     ``davidson/*.csv`` ``class`` 0 / 1
davidson_offensive
truthfulqa            evaluation only     ``truthfulqa/*.csv`` column ``Question`` (optional):
                                          ordinary questions, scored for the refusal rate
====================  ==================  =====================================================

An exemplar that matches a development row of any source, in either part of the split, verbatim or
nearly (:class:`~proxy.evaluation.split.NearDuplicates`), stops training with a DataError naming the
exemplar row and the source, never the text: no benchmark row is trained on as an exemplar.

No non-commercial data (alpaca seed tasks, HurtLex) is trained on, so the shipped weights carry
no NC terms; alpaca is scored by every fold model to report the benign flag rate.
Davidson hate/offensive tweets are left out of the harm classifier's training: they are toxic
*language*, which the toxicity detector scores, not requests to cause harm. They are still
scored, to report the combined decision's toxicity recall.

Model: C-SVC with an RBF kernel (scikit-learn / libsvm, balanced class weights) over the 384-d
all-MiniLM-L6-v2 embeddings; its decision values are mapped to probabilities by Platt scaling
(a one-feature logistic regression) fitted on the out-of-fold decision values. On the development
split the RBF SVM ranked XSTest unsafe-vs-safe better than a logistic regression (ROC AUC 0.89 vs
0.85 with the exemplars) at the same AdvBench recall. Every trained row and exemplar is also trained
on in ``framed_copies`` (default 2) framed copies: the row with a greeting, reference number or
sign-off around it (:mod:`proxy.guardrails.framings`), so a friendly line around a request does not
dilute it below the threshold; a fold trains only on the copies of its own training rows.
From v7 there are two such SVMs, with the same folds, rows and copies: one over the sentence
embedding (the last layer, mean-pooled) and one over the fifth of the six layers, mean-pooled the
same way (:func:`~proxy.guardrails.detectors.embeddings.embed_layers`); the probability is the
geometric mean of their Platt probabilities (:func:`~proxy.guardrails.detectors.harm.combine_views`).
Out of fold (5-fold x 3) the fifth layer alone ranked XSTest unsafe-vs-safe at ROC AUC 0.978 against
0.961 for the last layer but refused 18 of 407 TruthfulQA questions (2 for the last layer); the
geometric mean kept most of the XSTest gain (unsafe caught 75 -> 84 of 96, safe refused 9 -> 5 of
120) at 5 of 407 (docs/evaluation.md, "harm-minilm-svm-v7").

Provenance: next to the weights, ``harm-minilm-svm-v7.rows.json`` lists the sha256 of every row of
the final fit (normalised text, :mod:`proxy.evaluation.provenance`) and the out-of-fold rate per
cross-validated group, so ``sonate eval guardrails`` can label figures in-sample / out-of-fold /
held-out. :func:`privacy_tuning_rows` writes the same kind of file for the privacy patterns.

Evaluation: repeated stratified k-fold over the development rows (strata = group); out-of-fold
scores averaged over repeats; evaluation-only rows get the mean of the fold models. The threshold
is chosen on those out-of-fold scores and the per-group rates are reported at it (so they are
slightly optimistic; the held-out split is the real test). A stricter check is also reported:
XSTest by *type pair* held out (``GroupKFold`` over ``homonyms``+``contrast_homonyms`` etc.),
i.e. how the classifier does on a kind of prompt it never saw. Toxicity in the combined decision
is alt-profanity-check (the detector available offline), itself trained on Davidson data, so its
Davidson recall is optimistic.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from proxy.evaluation import framings, provenance
from proxy.evaluation.data import (
    SOURCES,
    DataError,
    Example,
    Item,
    load_exemplars,
    load_training_examples,
    refuse_development_duplicates,
    tuning_only,
)
from proxy.guardrails import framings as augment
from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.harm import ARTEFACT_DIR, LAYER5_PREFIX, combine_views, sha256_file

__all__ = ["ARTEFACT_DIR", "ARTEFACT_VERSION", "DataError", "EXEMPLARS", "choose_thresholds", "cross_validate", "fit_platt",
           "privacy_tuning_rows", "safety_personal_rows", "summary", "train_harm_classifier", "type_pair_holdout"]

ARTEFACT_NAME = "harm-minilm-svm"
ARTEFACT_VERSION = "harm-minilm-svm-v7"
#: Array-name prefix of each embedding view's SVM in the artefact (embeddings.embed_layers order).
VIEW_PREFIXES = ("", LAYER5_PREFIX)
#: Framed copies of every trained row in the training set (:mod:`proxy.guardrails.framings`).
FRAMED_COPIES = 2
EXEMPLARS = ARTEFACT_DIR / "safety-exemplars.csv"
HARMFUL_GROUPS = ("advbench", "xstest_unsafe", "exemplar_harmful")
RECALL_GROUPS = ("advbench", "xstest_unsafe")  # the harmful benchmark rows the recall-first threshold reads
BENIGN_GROUPS = ("xstest_safe", "davidson_neither", "exemplar_benign")
EXEMPLAR_GROUPS = ("exemplar_harmful", "exemplar_benign")
EVAL_ONLY_GROUPS = ("alpaca_seed", "davidson_hate", "davidson_offensive", "truthfulqa")
EMBED_BATCH = 64
#: SVM fits run at once (:func:`_map_fits`): the machine's cores unless ``SONATE_TRAIN_THREADS`` sets it.
FIT_THREADS = int(os.environ.get("SONATE_TRAIN_THREADS", "0")) or (os.cpu_count() or 1)
GRID = np.round(np.arange(0.01, 1.0, 0.01), 2)
#: Training group -> the ``sonate eval guardrails`` row (dataset/subset) its out-of-fold rate describes.
REPORT_ROWS = {"advbench": "advbench/harmful", "xstest_unsafe": "xstest/unsafe", "xstest_safe": "xstest/safe",
               "davidson_neither": "davidson/neither"}
#: TruthfulQA questions: ordinary questions, scored (never trained on) for the refusal rate.
TRUTHFULQA = "truthfulqa"
#: Files whose comments quote the presidio rows the privacy patterns were tuned on.
PRIVACY_COMMENT_FILES = ("policies/privacy.yaml", "proxy/guardrails/detectors/pii.py",
                         "proxy/guardrails/detectors/patterns.py")
PRIVACY_ROWS = ARTEFACT_DIR / f"privacy-tuning{provenance.ROWS_SUFFIX}"
#: The presidio texts read while the personal-data exemplars were written (:func:`safety_personal_rows`).
SAFETY_PERSONAL_ROWS = ARTEFACT_DIR / f"safety-personal-data{provenance.ROWS_SUFFIX}"

def _embed(texts: list[str], progress: bool) -> np.ndarray:
    """Embed in batches with a tqdm bar; float64 (n, :data:`~embeddings.LAYERS`, 384): per text the
    last layer's and the fifth layer's vector (:func:`~embeddings.embed_layers`)."""
    from tqdm import tqdm

    chunks = []
    for start in tqdm(range(0, len(texts), EMBED_BATCH), desc="embedding", unit="batch", disable=not progress):
        chunks.append(embeddings.embed_layers(texts[start:start + EMBED_BATCH]))
    return np.concatenate(chunks).astype(np.float64) if chunks \
        else np.zeros((0, embeddings.LAYERS, embeddings.DIMENSIONS))


def _new_model(c: float):
    from sklearn.svm import SVC

    return SVC(C=c, kernel="rbf", gamma="scale", class_weight="balanced", tol=1e-6)


_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def _map_fits(fit: Callable[[_Item], _Result], items: Iterable[_Item], *, desc: str | None = None,
              progress: bool = False) -> list[_Result]:
    """``[fit(item) for item in items]``, on up to :data:`FIT_THREADS` threads, results in ``items`` order.

    For independent SVM fits (cross-validation folds, views, held-out type pairs): libsvm releases
    the GIL while it fits, so the fits use the machine's cores. Each fit is deterministic for its
    data and the caller combines the results in ``items`` order, so the artefact is the same, to
    the byte, whatever the thread count. ``desc``: a tqdm bar of that name when ``progress``.
    """
    from tqdm import tqdm

    items = list(items)
    results = []
    with tqdm(total=len(items), desc=desc, unit="fit", disable=not progress or desc is None) as bar, \
            ThreadPoolExecutor(max(1, min(FIT_THREADS, len(items))), thread_name_prefix="svm-fit") as pool:
        for result in pool.map(fit, items):
            results.append(result)
            bar.update()
    return results


@dataclass(frozen=True)
class CvScores:
    """Decision values of :func:`cross_validate`: ``oof`` (n,) out of fold, averaged over repeats;
    ``extra`` (m,) the fold models' mean on the evaluation-only rows; ``probe`` (n,) / ``probe_extra``
    (m,) the same for the framed probe rows (None without a probe)."""

    oof: np.ndarray
    extra: np.ndarray
    probe: np.ndarray | None = None
    probe_extra: np.ndarray | None = None


def cross_validate(x: np.ndarray, y: np.ndarray, strata: np.ndarray, x_always: np.ndarray, y_always: np.ndarray,
                   x_extra: np.ndarray, *, c: float, folds: int, repeats: int, seed: int, progress: bool,
                   copies: Sequence[tuple[np.ndarray, np.ndarray]] = (),
                   probe: tuple[np.ndarray, np.ndarray] | None = None) -> CvScores:
    """Repeated stratified k-fold out-of-fold SVM decision values.

    Args:
        x: (n, d) evaluated training rows; y: (n,) 0/1 labels; strata: (n,) stratification labels.
        x_always, y_always: (e, d), (e,) rows added to every fold's training set, never tested.
        x_extra: (m, d) evaluation-only rows, scored by every fold model.
        copies: framed copies (:func:`proxy.guardrails.framings.training_copies`) as pairs of
            ((n, d) aligned with ``x``, (e, d) aligned with ``x_always``): a fold trains on the copies
            of its training rows only, never on a copy of a row it tests.
        probe: ((n, d), (m, d)) the rows of ``x`` and ``x_extra`` with evaluation framings, scored
            like the rows they copy (out of fold / by every fold model).

    Returns:
        :class:`CvScores`.

    The folds are fitted concurrently (:func:`_map_fits`); their decision values are summed in
    fold order, so the scores do not depend on the thread count.
    """
    from sklearn.model_selection import RepeatedStratifiedKFold

    splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
    scores = {"oof": np.zeros(len(y)), "extra": np.zeros(len(x_extra))}
    if probe is not None:
        scores.update(probe=np.zeros(len(y)), probe_extra=np.zeros(len(x_extra)))
    splits = list(splitter.split(x, strata))

    def fold(split: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None,
                                                          np.ndarray | None]:
        """One fold's decision values: (its test rows, x_extra, its probe rows, probe extra); None: not scored."""
        train, test = split
        rows = [x[train], x_always] + [v for framed, framed_always in copies for v in (framed[train], framed_always)]
        labels = [y[train], y_always] * (1 + len(copies))
        model = _new_model(c).fit(np.vstack(rows), np.concatenate(labels))
        return (model.decision_function(x[test]),
                model.decision_function(x_extra) if len(x_extra) else None,
                model.decision_function(probe[0][test]) if probe is not None else None,
                model.decision_function(probe[1]) if probe is not None and len(x_extra) else None)

    for (_, test), (oof, extra, framed_oof, framed_extra) in zip(
            splits, _map_fits(fold, splits, desc="cross-validation", progress=progress)):
        scores["oof"][test] += oof / repeats
        if extra is not None:
            scores["extra"] += extra / len(splits)
        if framed_oof is not None:
            scores["probe"][test] += framed_oof / repeats
        if framed_extra is not None:
            scores["probe_extra"] += framed_extra / len(splits)
    return CvScores(**scores)


def type_pair_holdout(x: np.ndarray, y: np.ndarray, groups: np.ndarray, strata: np.ndarray, *, c: float,
                      platts: Sequence[tuple[float, float]], threshold: float,
                      copies: Sequence[np.ndarray] = ()) -> dict | None:
    """XSTest with each prompt *type pair* held out in turn (``homonyms`` with ``contrast_homonyms``).

    ``x`` (n, views, d): one SVM per view, each trained on every other row (AdvBench, the other
    XSTest types, Davidson, exemplars) and on the framed ``copies`` of those rows (each (n, views,
    d), aligned with ``x``), scores the held-out pair; the views' probabilities (through
    ``platts``, one per view) are combined as the classifier does (:func:`~.harm.combine_views`).
    Reports ROC AUC unsafe-vs-safe and the flag rates at ``threshold``. None when XSTest rows
    carry no ``type``.
    """
    from sklearn.model_selection import LeaveOneGroupOut

    xs = np.isin(groups, ("xstest_safe", "xstest_unsafe")) & (strata != "")
    if not xs.any():
        return None
    pair = np.array([s.removeprefix("contrast_") if m else "" for s, m in zip(strata, xs)])
    idx = np.flatnonzero(xs)
    per_view = np.zeros((len(platts), int(xs.sum())))
    fits = [(test, view) for _, test in LeaveOneGroupOut().split(idx, groups=pair[idx]) for view in range(len(platts))]

    def fit(job: tuple[np.ndarray, int]) -> np.ndarray:
        """The held-out pair's Platt probabilities from one view's SVM trained on every other row."""
        test, view = job
        held = np.zeros(len(y), dtype=bool)
        held[idx[test]] = True
        model = _new_model(c).fit(np.vstack([x[~held, view]] + [copy[~held, view] for copy in copies]),
                                  np.tile(y[~held], 1 + len(copies)))
        return platt_probability(model.decision_function(x[held, view]), platts[view])

    for (test, view), probability in zip(fits, _map_fits(fit, fits)):
        per_view[view, test] = probability
    p = combine_views(list(per_view))
    g = groups[idx]
    return {"scheme": "leave one XSTest type pair out (train on all other rows)",
            "roc_auc_xstest_unsafe_vs_safe": _group_auc(p, g, "xstest_unsafe", "xstest_safe"),
            "harm_only": _rates(p >= threshold, g)}


def fit_platt(decision: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Platt scaling (Platt 1999): (a, b) with p = sigmoid(a * decision + b), by an unregularised-ish
    (C = 1e6) one-feature logistic regression on out-of-fold decision values."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1e6, solver="lbfgs", max_iter=10000, tol=1e-10).fit(decision.reshape(-1, 1), y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def platt_probability(decision: np.ndarray, platt: tuple[float, float]) -> np.ndarray:
    """The Platt link of :func:`fit_platt`: sigmoid(a * decision + b), shape of ``decision``."""
    return 1.0 / (1.0 + np.exp(-(platt[0] * decision + platt[1])))


def _rates(flags: np.ndarray, groups: np.ndarray) -> dict[str, dict]:
    """Per group: {"n", "flagged"} with flagged = share of rows flagged (0..1, 4 decimals)."""
    return {g: {"n": int((groups == g).sum()), "flagged": round(float(flags[groups == g].mean()), 4)}
            for g in sorted(set(groups.tolist()))}


def choose_thresholds(harm: np.ndarray, toxic: np.ndarray, groups: np.ndarray, *, target_recall: float,
                      max_xstest_safe: float = 0.03, max_alpaca: float = 0.01,
                      max_truthfulqa: float = 0.01) -> dict[str, float | None]:
    """Pick harm thresholds on a 0.01 grid from out-of-fold probabilities (combined with ``toxic`` flags).

    The recall-first value reads every harmful benchmark row of the tuning part at once (AdvBench goals
    and XSTest unsafe prompts, :data:`RECALL_GROUPS`): with 207 rows, 98% allows four misses, so one
    row moves it less than on AdvBench alone (200 resamples of those rows with replacement: sd 0.12
    against 0.21; docs/decisions/0014-safety-thresholds.md).

    Returns:
        {"recall_first": highest t with recall of the :data:`RECALL_GROUPS` rows >= target_recall,
         "benign_first": lowest t with XSTest-safe flagged <= max_xstest_safe, alpaca flagged
         <= max_alpaca and TruthfulQA flagged <= max_truthfulqa (None if no grid value satisfies it)}.
    """
    harmful = np.isin(groups, RECALL_GROUPS)
    recall_ok = [t for t in GRID if ((harm[harmful] >= t) | toxic[harmful]).mean() >= target_recall]
    benign_ok = []
    for t in GRID:
        flags = (harm >= t) | toxic
        if all(flags[groups == g].mean() <= cap for g, cap in
               (("xstest_safe", max_xstest_safe), ("alpaca_seed", max_alpaca), (TRUTHFULQA, max_truthfulqa))
               if (groups == g).any()):
            benign_ok.append(t)
    return {"recall_first": float(max(recall_ok)) if recall_ok else float(GRID[0]),
            "benign_first": float(min(benign_ok)) if benign_ok else None}


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray | np.generic]) -> None:
    """np.savez-compatible archive with fixed timestamps, so identical weights give identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue(),
                             compress_type=zipfile.ZIP_DEFLATED)


def _strata(groups: np.ndarray, types: np.ndarray, folds: int) -> np.ndarray:
    """group+type strata when every such stratum has >= ``folds`` rows, else the groups."""
    fine = np.array([f"{g}:{t}" if t else g for g, t in zip(groups, types)])
    counts = {s: int((fine == s).sum()) for s in set(fine.tolist())}
    return fine if min(counts.values()) >= folds else groups


@dataclass(frozen=True)
class _Design:
    """The rows of one training run, as arrays over ``examples`` (the data directory's rows).

    ``train_mask`` marks the rows trained and cross-validated on (not evaluation-only);
    ``groups``/``y``/``strata`` are over those rows; ``extra`` are the exemplars, trained on in
    every fold and never tested; ``folds`` is the fold count actually used.
    """

    examples: list[Example]
    extra: list[Example]
    groups_all: np.ndarray
    types_all: np.ndarray
    train_mask: np.ndarray
    groups: np.ndarray
    y: np.ndarray
    strata: np.ndarray
    folds: int


def _truthfulqa_questions(data_dir: Path, sources: list[dict]) -> list[Example]:
    """TruthfulQA questions as evaluation-only rows (group ``truthfulqa``); appends each file read
    to ``sources``. [] when the folder is absent (optional source)."""
    folder, suffixes, loader = SOURCES["truthfulqa"]
    files = sorted(p for p in (data_dir / folder).glob("*") if p.suffix in suffixes) \
        if (data_dir / folder).is_dir() else []
    out: list[Example] = []
    for path in files:
        rows = [Example(item.text.strip(), TRUTHFULQA, item.subset) for item in tuning_only(loader(path))
                if item.text.strip()]
        out.extend(rows)
        sources.append({"source": "truthfulqa", "file": path.relative_to(data_dir).as_posix(),
                        "sha256": sha256_file(path), "rows": len(rows), "license": "Apache-2.0",
                        "origin": "TruthfulQA.csv (copy in benedictflorance/truthfulqa_experiments @ ef3cc87)",
                        "use": "evaluation only"})
    return out


def _load(data_dir: Path, exemplars: Path | None) -> tuple[list[Example], list[Example], list[dict]]:
    """(data-directory examples, exemplars, provenance of every file read). Raises DataError when an
    exemplar duplicates a development row of any source, in either part (:func:`refuse_development_duplicates`)."""
    if exemplars is not None:
        refuse_development_duplicates(Path(exemplars), Path(data_dir))
    examples, sources = load_training_examples(Path(data_dir))
    examples += _truthfulqa_questions(Path(data_dir), sources)
    extra = load_exemplars(exemplars) if exemplars is not None else []
    if exemplars is not None:
        sources.append({"source": "exemplars", "file": f"proxy/guardrails/artefacts/{Path(exemplars).name}",
                        "sha256": sha256_file(Path(exemplars)), "rows": len(extra),
                        "license": "this project's license", "origin": "written for this project",
                        "use": "training only"})
    return examples, extra, sources


def _design(data_dir: Path, examples: list[Example], extra: list[Example], folds: int) -> _Design:
    """Labels, strata and the fold count. Raises DataError for one class or a group under 2 rows."""
    groups_all = np.array([e.group for e in examples])
    types_all = np.array([e.stratum for e in examples])
    train_mask = ~np.isin(groups_all, EVAL_ONLY_GROUPS)
    groups = groups_all[train_mask]
    y = np.isin(groups, HARMFUL_GROUPS).astype(int)
    if len(set(y.tolist())) < 2:
        raise DataError(f"{data_dir}: need both harmful and benign examples")
    smallest = min(int((groups == g).sum()) for g in set(groups.tolist()))
    folds = min(folds, smallest)
    if folds < 2:
        raise DataError(f"{data_dir}: a group has {smallest} row(s); cross-validation needs at least 2")
    return _Design(examples, extra, groups_all, types_all, train_mask, groups, y,
                   _strata(groups, types_all[train_mask], folds), folds)


def _cv_section(d: _Design, oof: np.ndarray, harm_all: np.ndarray, toxic: np.ndarray,
                thresholds: dict[str, float | None], *, repeats: int, seed: int) -> dict:
    """The ``cv`` metadata: scheme, ROC AUCs (from ``oof``, the training rows' out-of-fold scores: any
    score increasing with harm, here the combined probability) and per-group rates at each operating point."""
    cv: dict[str, Any]
    cv = {"scheme": f"repeated stratified {d.folds}-fold x {repeats} (strata = group, XSTest type), seed {seed}; "
                    "exemplars in every training fold, never tested; a fold trains on the framed copies of "
                    "its training rows and exemplars only; evaluation-only groups scored by every fold model",
          "roc_auc_harm_vs_benign": round(float(_auc(oof, d.y)), 4),
          "roc_auc_xstest_unsafe_vs_safe": _group_auc(oof, d.groups, "xstest_unsafe", "xstest_safe"),
          "toxicity_only": _rates(toxic, d.groups_all),
          "operating_points": {}}
    for point, t in thresholds.items():
        if t is not None:
            cv["operating_points"][point] = {"harmful_intent_threshold": f"{t:.2f}",
                                             "harm_only": _rates(harm_all >= t, d.groups_all),
                                             "combined": _rates((harm_all >= t) | toxic, d.groups_all)}
    return cv


def _fit_rows(d: _Design, x: np.ndarray, x_always: np.ndarray) -> tuple[np.ndarray, ...]:
    """(x, y, groups, strata) of the final fit: the trained rows followed by the exemplars."""
    y_always = np.array([e.group == "exemplar_harmful" for e in d.extra], dtype=int)
    groups = np.concatenate([d.groups, np.array([e.group for e in d.extra], dtype=d.groups.dtype)])
    strata = np.concatenate([d.types_all[d.train_mask], np.array(["" for _ in d.extra], dtype=d.types_all.dtype)])
    return np.vstack([x, x_always]), np.concatenate([d.y, y_always]), groups, strata


def _write_weights(out_dir: Path, finals: Sequence, platts: Sequence[tuple[float, float]]) -> Path:
    """Write ``<out_dir>/harm-minilm-svm-v7.npz`` (created if missing): each view's SVM under its
    :data:`VIEW_PREFIXES` prefix; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    npz_path = out_dir / f"{ARTEFACT_VERSION}.npz"
    arrays: dict[str, np.ndarray | np.generic] = {}
    for prefix, final, platt in zip(VIEW_PREFIXES, finals, platts):
        arrays.update({
            prefix + "support_vectors": final.support_vectors_.astype(np.float32),
            prefix + "dual_coef": final.dual_coef_[0].astype(np.float64),
            prefix + "gamma": np.float64(final._gamma),
            prefix + "intercept": np.float64(final.intercept_[0]),
            prefix + "platt_a": np.float64(platt[0]),
            prefix + "platt_b": np.float64(platt[1]),
        })
    _write_npz(npz_path, arrays)
    return npz_path


def _metadata(npz_path: Path, finals: Sequence, sources: list[dict], groups_fit: np.ndarray, hyper: dict,
              toxicity_threshold: float, recommended: float, cv: dict) -> dict:
    """The artefact's ``.json``: format, score formula, provenance, training rows and CV metrics."""
    import sklearn

    return {
        "name": ARTEFACT_NAME, "version": ARTEFACT_VERSION,
        "format": "npz: support_vectors float32 (k, 384), dual_coef float64 (k,), gamma, intercept, platt_a, "
                  "platt_b float64 () over the last layer's embedding; the same arrays prefixed layer5_ over the "
                  "fifth layer's",
        "score": "sqrt(p(x_last) * p(x_layer5)), each p(x) = sigmoid(platt_a * (sum_i dual_coef_i * "
                 "exp(-gamma * ||x - sv_i||^2) + intercept) + platt_b) with its own view's arrays",
        "weights_sha256": sha256_file(npz_path),
        "embedding_model": embeddings.model_version(), "trained_with": f"scikit-learn=={sklearn.__version__}",
        "training_data": sources,
        "label_rule": {"harmful": list(HARMFUL_GROUPS), "benign": list(BENIGN_GROUPS),
                       "evaluation_only": list(EVAL_ONLY_GROUPS)},
        "training_rows": {g: int((groups_fit == g).sum()) for g in sorted(set(groups_fit.tolist()))},
        "support_vectors": {prefix.rstrip("_") or "last": int(final.support_vectors_.shape[0])
                            for prefix, final in zip(VIEW_PREFIXES, finals)},
        "hyper_parameters": hyper,
        "toxicity_in_combined_decision": {"detector": "profanity-check",
                                          "threshold": f"{toxicity_threshold:.2f}"},
        "recommended_thresholds": {"harmful_intent": f"{recommended:.2f}",
                                   "toxicity_profanity_check": f"{toxicity_threshold:.2f}"},
        "cv": cv,
    }


def train_harm_classifier(data_dir: Path, out_dir: Path, *, seed: int = 0, progress: bool = True, c: float = 3.0,
                          folds: int = 5, repeats: int = 3, target_recall: float = 0.98,
                          toxicity_threshold: float = 0.90, exemplars: Path | None = EXEMPLARS,
                          framed_copies: int = FRAMED_COPIES, pair_holdout: bool = True) -> dict:
    """Train, cross-validate and write ``<out_dir>/harm-minilm-svm-v7.{npz,json}``.

    Steps: read the data and exemplars → labels and strata → embed (two views per text: the last
    and the fifth layer), toxicity scores → framed copies of every trained row
    (:mod:`proxy.guardrails.framings`) → per view, cross-validated decision values (the same folds)
    and Platt scaling → the views' probabilities combined (:func:`~.harm.combine_views`) →
    thresholds and CV rates (plain and framed) → XSTest type-pair hold-out → per view, the final
    fit on every training row and its copies → weights and metadata. Independent SVM fits run
    concurrently on :data:`FIT_THREADS` threads (:func:`_map_fits`), with the same result.

    Args:
        data_dir: folder laid out like ``../shared/data`` (see module docstring).
        out_dir: created if missing; existing files of the same name are overwritten.
        seed: fixes fold assignment and the framings (libsvm itself is deterministic for given data).
        progress: show tqdm bars on stderr.
        c: the SVM's C (inverse regularisation strength).
        folds, repeats: repeated stratified k-fold; ``folds`` is reduced to the smallest group size.
        target_recall: recall of the AdvBench and XSTest unsafe rows, out of fold, that the recommended
            (recall-first) threshold must reach.
        toxicity_threshold: profanity-check threshold used in the combined decision.
        exemplars: the project's contrast exemplars (always trained on), or None for none.
        framed_copies: framed copies of each trained row added to the training set (0: none).
        pair_holdout: run the XSTest type-pair hold-out (:func:`type_pair_holdout`: two SVM fits
            per type pair, most of the training time); False leaves ``cv`` without it, for a quick
            fit while writing exemplars. The weights and thresholds are the same either way.

    Returns:
        The metadata written to the .json (also holds ``cv`` metrics and ``recommended_thresholds``;
        ``cv["framed"]``: the rates with an evaluation framing around every row).

    Raises:
        DataError: missing required sources, or too few rows of a group to cross-validate.
        ValueError: ``framed_copies`` < 0.
    """
    from profanity_check import predict_prob

    if framed_copies < 0:
        raise ValueError(f"framed_copies must be >= 0, not {framed_copies}")
    examples, extra, sources = _load(data_dir, exemplars)
    d = _design(data_dir, examples, extra, folds)
    texts = [e.text for e in examples]
    vectors = _embed(texts + [e.text for e in extra], progress)  # (n, views, 384)
    vectors, x_always = vectors[:len(texts)], vectors[len(texts):]
    toxic = np.asarray(predict_prob(texts), dtype=np.float64) >= toxicity_threshold
    x, x_extra = vectors[d.train_mask], vectors[~d.train_mask]
    x_fit, y_fit, groups_fit, strata_fit = _fit_rows(d, x, x_always)
    trained = [t for t, keep in zip(texts, d.train_mask) if keep] + [e.text for e in extra]
    copies = [_embed(copy, progress) for copy in augment.training_copies(trained, framed_copies, seed)]
    probe_texts = framings.evaluation_framed(texts, seed)
    probe = _embed(probe_texts, progress)
    toxic_probe = np.asarray(predict_prob(probe_texts), dtype=np.float64) >= toxicity_threshold
    platts, plain, framed = [], [], []
    for view in range(len(VIEW_PREFIXES)):  # one SVM per embedding view, the same folds
        scores = cross_validate(x[:, view], d.y, d.strata, x_always[:, view], y_fit[len(d.y):], x_extra[:, view],
                                c=c, folds=d.folds, repeats=repeats, seed=seed, progress=progress,
                                copies=[(copy[:len(x), view], copy[len(x):, view]) for copy in copies],
                                probe=(probe[d.train_mask, view], probe[~d.train_mask, view]))
        if scores.probe is None or scores.probe_extra is None:  # cross_validate scores the probe it is given
            raise ValueError("cross_validate returned no probe scores")
        platts.append(fit_platt(scores.oof, d.y))
        plain.append(_probabilities(d, scores.oof, scores.extra, platts[-1]))
        framed.append(_probabilities(d, scores.probe, scores.probe_extra, platts[-1]))
    harm_all, harm_framed = combine_views(plain), combine_views(framed)

    thresholds = choose_thresholds(harm_all, toxic, d.groups_all, target_recall=target_recall)
    cv = _cv_section(d, harm_all[d.train_mask], harm_all, toxic, thresholds, repeats=repeats, seed=seed)
    recommended = thresholds["recall_first"]
    if recommended is None:  # choose_thresholds always sets recall_first
        raise ValueError("no recall_first threshold")
    cv["framed"] = {"framings": "one of proxy/evaluation/framings.py EVALUATION_PREFIXES / EVALUATION_SUFFIXES "
                                "around every row (never trained on), same folds",
                    "harmful_intent_threshold": f"{recommended:.2f}",
                    "roc_auc_xstest_unsafe_vs_safe": _group_auc(harm_framed[d.train_mask], d.groups,
                                                                "xstest_unsafe", "xstest_safe"),
                    "combined": _rates((harm_framed >= recommended) | toxic_probe, d.groups_all)}
    holdout = type_pair_holdout(x_fit, y_fit, groups_fit, strata_fit, c=c, platts=platts, threshold=recommended,
                                copies=copies) if pair_holdout else None
    if holdout is not None:
        cv["xstest_type_pair_holdout"] = holdout

    finals = _map_fits(lambda view: _new_model(c).fit(np.vstack([x_fit[:, view], *(copy[:, view] for copy in copies)]),
                                                      np.tile(y_fit, 1 + len(copies))), range(len(VIEW_PREFIXES)))
    npz_path = _write_weights(out_dir, finals, platts)
    hyper = {"model": "SVC", "kernel": "rbf", "gamma": "scale", "C": c, "class_weight": "balanced", "tol": 1e-6,
             "seed": seed, "folds": d.folds, "repeats": repeats, "target_harmful_recall": target_recall,
             "framed_copies": framed_copies, "views": ["last layer", "fifth layer"], "combination": "geometric mean",
             "platt": {prefix.rstrip("_") or "last": {"a": round(a, 6), "b": round(b, 6)}
                       for prefix, (a, b) in zip(VIEW_PREFIXES, platts)}}
    metadata = _metadata(npz_path, finals, sources, groups_fit, hyper, toxicity_threshold, recommended, cv)
    npz_path.with_suffix(".json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    flags = (harm_all >= recommended) | toxic
    framed_flags = (harm_framed >= recommended) | toxic_probe
    _write_training_rows(npz_path, d, {**_out_of_fold(flags, d.groups_all, d.train_mask, recommended),
                                       **_out_of_fold(framed_flags, d.groups_all, d.train_mask, recommended,
                                                      prefix=framings.REPORT_PREFIX)})
    return metadata


def _probabilities(d: _Design, trained: np.ndarray, evaluation_only: np.ndarray,
                   platt: tuple[float, float]) -> np.ndarray:
    """Platt probabilities over every example: ``trained`` decision values (out of fold) on the
    training rows, ``evaluation_only`` on the rest."""
    decision = np.empty(len(d.examples))
    decision[d.train_mask], decision[~d.train_mask] = trained, evaluation_only
    return platt_probability(decision, platt)


def _out_of_fold(flags: np.ndarray, groups_all: np.ndarray, train_mask: np.ndarray,
                 threshold: float, prefix: str = "") -> dict[str, dict]:
    """Out-of-fold rate of the combined decision per cross-validated group, keyed by ``prefix`` + report
    row (:data:`REPORT_ROWS`): ``{"k", "n", "rate", "threshold", "group"}``."""
    out = {}
    for group, row in REPORT_ROWS.items():
        mask = (groups_all == group) & train_mask
        if mask.any():
            k, n = int(flags[mask].sum()), int(mask.sum())
            out[prefix + row] = {"group": group, "k": k, "n": n, "rate": round(k / n, 6),
                                 "threshold": f"{threshold:.2f}"}
    return out


def _write_training_rows(npz_path: Path, d: _Design, out_of_fold: dict[str, dict]) -> Path:
    """``<artefact>.rows.json``: hashes of every row of the final fit, by group (see :mod:`.provenance`)."""
    groups: dict[str, list[str]] = {}
    trained = [e for e, keep in zip(d.examples, d.train_mask) if keep] + list(d.extra)
    for example in trained:
        groups.setdefault(example.group, []).append(example.text)
    json_path = npz_path.with_suffix(".json")
    document = provenance.rows_document(
        ARTEFACT_VERSION, "safety", "trained", groups,
        artefact_files={npz_path.name: sha256_file(npz_path), json_path.name: sha256_file(json_path)},
        out_of_fold=out_of_fold,
        note="rows of the final fit (cross-validated groups and the exemplars, which are in every fold; the "
             "framed copies of proxy/guardrails/framings.py derive from them); out_of_fold: combined decision "
             "(harm >= threshold OR profanity-check >= its threshold) of the repeated k-fold, averaged over "
             "repeats; 'framed:' rows: the same with an evaluation framing around every row")
    return provenance.write_rows(npz_path.with_name(f"{ARTEFACT_VERSION}{provenance.ROWS_SUFFIX}"), document)


def _presidio_items(data_dir: Path) -> list[Item]:
    """Every item of ``<data_dir>/presidio/*.json``, files in name order. Raises DataError when there is none."""
    folder, suffixes, loader = SOURCES["presidio"]
    files = sorted(p for p in (Path(data_dir) / folder).glob("*") if p.suffix in suffixes)
    if not files:
        raise DataError(f"{data_dir}: no presidio/*.json")
    return [item for path in files for item in loader(path)]


def privacy_tuning_rows(data_dir: Path, root: Path, out: Path = PRIVACY_ROWS,
                        comment_files: tuple[str, ...] = PRIVACY_COMMENT_FILES) -> dict:
    """Write the rows file of the privacy patterns: the presidio rows their comments quote.

    A row of ``<data_dir>/presidio/*.json`` counts as tuned on when a double-quoted string of at
    least :data:`provenance.MIN_QUOTE_CHARS` characters inside a ``#`` comment of one of
    ``comment_files`` (relative to ``root``, the project directory) occurs in its ``full_text``.

    Returns the document written to ``out``. Raises DataError when no presidio file is found.
    """
    items = _presidio_items(data_dir)
    quotes = {name: provenance.quoted_strings(Path(root) / name) for name in comment_files}
    tuned, evidence = [], []
    for item in items:
        hits = sorted({q for qs in quotes.values() for q in qs if q in item.text})
        if hits:
            tuned.append(item.text)
            evidence.append({"row": item.item_id, "sha256": provenance.row_hash(item.text), "quotes": hits})
    document = provenance.rows_document(
        "privacy-patterns", "privacy", "tuned", {"presidio_quoted": tuned},
        artefact_files={},
        note=f"presidio rows quoted (a string of >= {provenance.MIN_QUOTE_CHARS} characters in a # comment) by "
             f"{', '.join(comment_files)}; the remaining development rows were scored during tuning in aggregate")
    document["quoted_rows"] = evidence
    document["quotes_searched"] = {name: sorted(set(qs)) for name, qs in quotes.items()}
    provenance.write_rows(out, document)
    return document


def safety_personal_rows(data_dir: Path, out: Path = SAFETY_PERSONAL_ROWS) -> dict:
    """Write the rows file of the presidio texts read while Safety's personal-data exemplars were
    written, and return the document.

    The exemplars of themes ``privacy_own``, ``privacy_professional`` (benign: people sharing their
    own data for a service, professionals writing about their clients) and ``privacy_others_data``
    (harmful: using someone else's data against them) were written after reading the
    development presidio texts that Safety refused (59 of 850: "block my card", a patient's age and
    complaint). None is trained on, but Safety's figures on every presidio development text count as
    tuned (in-sample), so the held-out split is their test. Raises DataError when no presidio file
    is found.
    """
    texts = [item.text for item in _presidio_items(data_dir)]
    document = provenance.rows_document(
        "safety-personal-data", "safety", "tuned", {"presidio_read": texts}, artefact_files={},
        note="presidio development texts read while the personal-data exemplars of safety-exemplars.csv "
             "(privacy_own, privacy_professional, privacy_others_data) were written; not trained on")
    provenance.write_rows(out, document)
    return document


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def _group_auc(scores: np.ndarray, groups: np.ndarray, positive: str, negative: str) -> float | None:
    mask = np.isin(groups, (positive, negative))
    labels = (groups[mask] == positive).astype(int)
    return round(_auc(scores[mask], labels), 4) if len(set(labels.tolist())) == 2 else None


def summary(metadata: dict) -> str:
    """Human-readable table of the cross-validated rates (percent) per group and operating point."""
    lines = [f"{metadata['version']}  weights sha256 {metadata['weights_sha256'][:12]}  "
             f"CV {metadata['cv']['scheme']}",
             f"ROC AUC harm vs benign {metadata['cv']['roc_auc_harm_vs_benign']}, "
             f"XSTest unsafe vs safe {metadata['cv']['roc_auc_xstest_unsafe_vs_safe']}"]
    tox = metadata["toxicity_in_combined_decision"]
    for point, values in metadata["cv"]["operating_points"].items():
        lines.append(f"{point}: harmful_intent >= {values['harmful_intent_threshold']} OR "
                     f"{tox['detector']} >= {tox['threshold']}  (% flagged, combined / harm only)")
        for group, rate in values["combined"].items():
            lines.append(f"  {group:20s} n={rate['n']:5d}  {100 * rate['flagged']:5.1f}%  /"
                         f" {100 * values['harm_only'][group]['flagged']:5.1f}%")
    framed = metadata["cv"].get("framed")
    if framed:
        copies = metadata["hyper_parameters"].get("framed_copies", 0)
        lines.append(f"framed (an evaluation framing around every row, {copies} framed training copies per row): at "
                     f"{framed['harmful_intent_threshold']}, XSTest AUC {framed['roc_auc_xstest_unsafe_vs_safe']}; "
                     + ", ".join(
                         f"{g} {100 * r['flagged']:.1f}%" for g, r in framed["combined"].items()))
    holdout = metadata["cv"].get("xstest_type_pair_holdout")
    if holdout:
        lines.append(f"{holdout['scheme']}: XSTest AUC {holdout['roc_auc_xstest_unsafe_vs_safe']}, at "
                     f"{metadata['recommended_thresholds']['harmful_intent']} (harm only) " + ", ".join(
                         f"{g} {100 * r['flagged']:.1f}%" for g, r in holdout["harm_only"].items()))
    return "\n".join(lines)
