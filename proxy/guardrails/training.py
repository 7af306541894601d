"""Train the harmful-intent classifier shipped in ``proxy/guardrails/artefacts``.

``sonate train safety --data-dir ../shared/data --out proxy/guardrails/artefacts``
(or ``python -m proxy.guardrails.training --data-dir ... --out ...``).

Data (development split, layout of ``/work/shared/data``; any ``*.csv``/``*.jsonl`` file in each
folder is read, so the small samples in ``tests/data`` work too):

====================  ==================  =====================================================
group                 harm label          source
====================  ==================  =====================================================
advbench              harmful (train)     ``advbench/*.csv`` column ``goal`` (required)
xstest_unsafe         harmful (train)     ``xstest/*.csv`` rows ``label == unsafe`` (required)
xstest_safe           benign (train)      ``xstest/*.csv`` rows ``label == safe``
alpaca_seed           benign (train)      ``alpaca_seed/*.jsonl`` field ``instruction`` (optional)
davidson_neither      benign (train)      ``davidson/*.csv`` ``class == 2`` (optional)
davidson_hate,        evaluation only     ``davidson/*.csv`` ``class`` 0 / 1
davidson_offensive
====================  ==================  =====================================================

Davidson hate/offensive tweets are deliberately left out of the harm classifier's training:
they are toxic *language*, which the toxicity detector scores, not requests to cause harm.
Labelled benign they would teach the classifier that slurs and threats are harmless; labelled
harmful they would teach it that profanity is intent, raising false refusals (cross-validation
on the development split showed no gain either way). They are still scored, to report the
combined decision's toxicity recall.

Model: L2-regularised logistic regression (scikit-learn, lbfgs, balanced class weights) over the
384-d all-MiniLM-L6-v2 embeddings. Evaluation: repeated stratified k-fold (strata = group),
out-of-fold probabilities averaged over repeats; the threshold is chosen on those out-of-fold
scores and the per-group rates are reported at it (they are therefore slightly optimistic; the
held-out split is the real test). Toxicity in the combined decision is alt-profanity-check (the
detector available offline), which was itself trained on Davidson data, so its Davidson recall
is optimistic.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.harm import ARTEFACT_DIR, sha256_file

ARTEFACT_NAME = "harm-minilm-lr"
ARTEFACT_VERSION = "harm-minilm-lr-v1"
HARMFUL_GROUPS = ("advbench", "xstest_unsafe")
BENIGN_GROUPS = ("xstest_safe", "alpaca_seed", "davidson_neither")
EVAL_ONLY_GROUPS = ("davidson_hate", "davidson_offensive")
DAVIDSON_CLASSES = {"0": "davidson_hate", "1": "davidson_offensive", "2": "davidson_neither"}
EMBED_BATCH = 64
GRID = np.round(np.arange(0.01, 1.0, 0.01), 2)

SOURCE_INFO = {
    "advbench": {"pattern": "advbench/*.csv", "required": True, "license": "MIT",
                 "origin": "llm-attacks AdvBench harmful_behaviors.csv (copy in YancyKahn/PocoGCG @ 131c890)"},
    "xstest": {"pattern": "xstest/*.csv", "required": True, "license": "CC BY 4.0",
               "origin": "paul-rottger/exaggerated-safety @ d7bb5bd"},
    "alpaca_seed": {"pattern": "alpaca_seed/*.jsonl", "required": False, "license": "CC BY-NC 4.0",
                    "origin": "tatsu-lab/stanford_alpaca seed_tasks.jsonl"},
    "davidson": {"pattern": "davidson/*.csv", "required": False, "license": "MIT",
                 "origin": "t-davidson/hate-speech-and-offensive-language @ cb50f7e"},
}


class DataError(ValueError):
    """The training data directory lacks a required source or a file is malformed."""


@dataclass(frozen=True)
class Example:
    """One labelled text. ``group`` is one of the group names in the module docstring."""

    text: str
    group: str


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _column(row: dict[str, str], name: str, path: Path) -> str:
    if name not in row:
        raise DataError(f"{path}: missing column {name!r}")
    return (row[name] or "").strip()


def _examples_from(source: str, path: Path) -> list[Example]:
    """Parse one data file into examples (empty texts skipped). Raises DataError on bad format."""
    out: list[Example] = []
    if source == "advbench":
        out = [Example(_column(r, "goal", path), "advbench") for r in _read_csv(path)]
    elif source == "xstest":
        for row in _read_csv(path):
            label = _column(row, "label", path)
            if label not in ("safe", "unsafe"):
                raise DataError(f"{path}: unexpected XSTest label {label!r}")
            out.append(Example(_column(row, "prompt", path), f"xstest_{label}"))
    elif source == "davidson":
        for row in _read_csv(path):
            cls = _column(row, "class", path)
            if cls not in DAVIDSON_CLASSES:
                raise DataError(f"{path}: unexpected Davidson class {cls!r}")
            out.append(Example(_column(row, "tweet", path), DAVIDSON_CLASSES[cls]))
    elif source == "alpaca_seed":
        with open(path, encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        out.append(Example(str(json.loads(line)["instruction"]).strip(), "alpaca_seed"))
                    except (ValueError, KeyError) as exc:
                        raise DataError(f"{path}:{line_no}: {exc}") from exc
    return [e for e in out if e.text]


def load_examples(data_dir: Path) -> tuple[list[Example], list[dict]]:
    """Read every source under ``data_dir``.

    Returns:
        (examples, sources) where ``sources`` lists, per file read, its path relative to
        ``data_dir``, sha256, row count, license and origin (for the artefact metadata).

    Raises:
        DataError: a required source (AdvBench, XSTest) is missing, or a file is malformed.
    """
    data_dir = Path(data_dir)
    examples: list[Example] = []
    sources: list[dict] = []
    for source, info in SOURCE_INFO.items():
        files = sorted(data_dir.glob(info["pattern"]))
        if not files and info["required"]:
            raise DataError(f"{data_dir}: no files match {info['pattern']} (required source {source})")
        for path in files:
            rows = _examples_from(source, path)
            examples.extend(rows)
            sources.append({
                "source": source, "file": path.relative_to(data_dir).as_posix(), "sha256": sha256_file(path),
                "rows": len(rows), "license": info["license"], "origin": info["origin"],
            })
    return examples, sources


def _embed(texts: list[str], progress: bool) -> np.ndarray:
    """Embed in batches with a tqdm bar; float64 (n, 384)."""
    from tqdm import tqdm

    chunks = []
    for start in tqdm(range(0, len(texts), EMBED_BATCH), desc="embedding", unit="batch", disable=not progress):
        chunks.append(embeddings.embed(texts[start:start + EMBED_BATCH]))
    return np.vstack(chunks).astype(np.float64) if chunks else np.zeros((0, embeddings.DIMENSIONS))


def _new_model(c: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, class_weight="balanced", solver="lbfgs", max_iter=10000, tol=1e-8,
                              random_state=seed)


def cross_validate(x: np.ndarray, y: np.ndarray, groups: np.ndarray, x_extra: np.ndarray, *, c: float,
                   folds: int, repeats: int, seed: int, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Repeated stratified k-fold out-of-fold probabilities.

    Args:
        x: (n, d) training features; y: (n,) 0/1 labels; groups: (n,) strata.
        x_extra: (m, d) evaluation-only rows, scored by every fold model.

    Returns:
        (oof (n,), extra (m,)): out-of-fold probabilities averaged over repeats, and the mean
        probability of the fold models on ``x_extra``.
    """
    from sklearn.model_selection import RepeatedStratifiedKFold
    from tqdm import tqdm

    splitter = RepeatedStratifiedKFold(n_splits=folds, n_repeats=repeats, random_state=seed)
    oof = np.zeros(len(y))
    extra = np.zeros(len(x_extra))
    splits = list(splitter.split(x, groups))
    for train, test in tqdm(splits, desc="cross-validation", unit="fold", disable=not progress):
        model = _new_model(c, seed).fit(x[train], y[train])
        oof[test] += model.predict_proba(x[test])[:, 1] / repeats
        if len(x_extra):
            extra += model.predict_proba(x_extra)[:, 1] / len(splits)
    return oof, extra


def _rates(flags: np.ndarray, groups: np.ndarray) -> dict[str, dict]:
    """Per group: {"n", "flagged"} with flagged = share of rows flagged (0..1, 4 decimals)."""
    return {g: {"n": int((groups == g).sum()), "flagged": round(float(flags[groups == g].mean()), 4)}
            for g in sorted(set(groups.tolist()))}


def choose_thresholds(harm: np.ndarray, toxic: np.ndarray, groups: np.ndarray, *, target_recall: float,
                      max_xstest_safe: float = 0.03, max_alpaca: float = 0.01) -> dict[str, float | None]:
    """Pick harm thresholds on a 0.01 grid from out-of-fold scores (combined with ``toxic`` flags).

    Returns:
        {"recall_first": highest t with AdvBench recall >= target_recall,
         "benign_first": lowest t with XSTest-safe flagged <= max_xstest_safe and alpaca flagged
         <= max_alpaca (None if no grid value satisfies it)}.
    """
    adv = groups == "advbench"
    recall_ok = [t for t in GRID if ((harm[adv] >= t) | toxic[adv]).mean() >= target_recall]
    benign_ok = []
    for t in GRID:
        flags = (harm >= t) | toxic
        if all(flags[groups == g].mean() <= cap for g, cap in
               (("xstest_safe", max_xstest_safe), ("alpaca_seed", max_alpaca)) if (groups == g).any()):
            benign_ok.append(t)
    return {"recall_first": float(max(recall_ok)) if recall_ok else float(GRID[0]),
            "benign_first": float(min(benign_ok)) if benign_ok else None}


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez-compatible archive with fixed timestamps, so identical weights give identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())


def train_harm_classifier(data_dir: Path, out_dir: Path, *, seed: int = 0, progress: bool = True, c: float = 1.0,
                          folds: int = 5, repeats: int = 3, target_recall: float = 0.97,
                          toxicity_threshold: float = 0.80) -> dict:
    """Train, cross-validate and write ``<out_dir>/harm-minilm-lr-v1.{npz,json}``.

    Args:
        data_dir: folder laid out like ``/work/shared/data`` (see module docstring).
        out_dir: created if missing; existing files of the same name are overwritten.
        seed: fixes fold assignment and the solver (results are deterministic for given data).
        progress: show tqdm bars on stderr.
        c: inverse L2 regularisation strength of the logistic regression.
        folds, repeats: repeated stratified k-fold; ``folds`` is reduced to the smallest group size.
        target_recall: AdvBench recall the recommended (recall-first) threshold must reach in CV.
        toxicity_threshold: profanity-check threshold used in the combined decision.

    Returns:
        The metadata written to the .json (also holds ``cv`` metrics and ``recommended_thresholds``).

    Raises:
        DataError: missing required sources, or too few rows of a group to cross-validate.
    """
    from profanity_check import predict_prob

    examples, sources = load_examples(Path(data_dir))
    groups_all = np.array([e.group for e in examples])
    train_mask = ~np.isin(groups_all, EVAL_ONLY_GROUPS)
    groups = groups_all[train_mask]
    y = np.isin(groups, HARMFUL_GROUPS).astype(int)
    if len(set(y.tolist())) < 2:
        raise DataError(f"{data_dir}: need both harmful and benign examples")
    smallest = min(int((groups == g).sum()) for g in set(groups.tolist()))
    folds = min(folds, smallest)
    if folds < 2:
        raise DataError(f"{data_dir}: a group has {smallest} row(s); cross-validation needs at least 2")

    texts = [e.text for e in examples]
    vectors = _embed(texts, progress)
    toxic_p = np.asarray(predict_prob(texts), dtype=np.float64)
    x, x_extra = vectors[train_mask], vectors[~train_mask]
    oof, extra = cross_validate(x, y, groups, x_extra, c=c, folds=folds, repeats=repeats, seed=seed,
                                progress=progress)

    harm_all = np.empty(len(examples))
    harm_all[train_mask], harm_all[~train_mask] = oof, extra
    toxic = toxic_p >= toxicity_threshold
    thresholds = choose_thresholds(harm_all, toxic, groups_all, target_recall=target_recall)
    cv = {"scheme": f"repeated stratified {folds}-fold x {repeats} (strata = group), seed {seed}",
          "roc_auc_harm_vs_benign": round(float(_auc(oof, y)), 4),
          "roc_auc_xstest_unsafe_vs_safe": _group_auc(oof, groups, "xstest_unsafe", "xstest_safe"),
          "toxicity_only": _rates(toxic, groups_all),
          "operating_points": {}}
    for point, t in thresholds.items():
        if t is not None:
            cv["operating_points"][point] = {"harmful_intent_threshold": f"{t:.2f}",
                                             "harm_only": _rates(harm_all >= t, groups_all),
                                             "combined": _rates((harm_all >= t) | toxic, groups_all)}

    final = _new_model(c, seed).fit(x, y)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    npz_path, json_path = out_dir / f"{ARTEFACT_VERSION}.npz", out_dir / f"{ARTEFACT_VERSION}.json"
    _write_npz(npz_path, {"coef": final.coef_[0].astype(np.float64),
                          "intercept": np.float64(final.intercept_[0])})
    import sklearn

    metadata = {
        "name": ARTEFACT_NAME, "version": ARTEFACT_VERSION, "format": "npz: coef float64 (384,), intercept float64 ()",
        "score": "sigmoid(embedding . coef + intercept)", "weights_sha256": sha256_file(npz_path),
        "embedding_model": embeddings.model_version(), "trained_with": f"scikit-learn=={sklearn.__version__}",
        "training_data": sources,
        "label_rule": {"harmful": list(HARMFUL_GROUPS), "benign": list(BENIGN_GROUPS),
                       "evaluation_only": list(EVAL_ONLY_GROUPS)},
        "training_rows": {g: int((groups == g).sum()) for g in sorted(set(groups.tolist()))},
        "hyper_parameters": {"model": "LogisticRegression", "C": c, "class_weight": "balanced",
                             "solver": "lbfgs", "tol": 1e-8, "seed": seed, "folds": folds, "repeats": repeats,
                             "target_advbench_recall": target_recall},
        "toxicity_in_combined_decision": {"detector": "profanity-check",
                                          "threshold": f"{toxicity_threshold:.2f}"},
        "recommended_thresholds": {"harmful_intent": cv["operating_points"]["recall_first"]["harmful_intent_threshold"],
                                   "toxicity_profanity_check": f"{toxicity_threshold:.2f}"},
        "cv": cv,
    }
    json_path.write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return metadata


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
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``train safety`` options to ``parser``."""
    parser.add_argument("--data-dir", type=Path, required=True, help="development data (layout of shared/data)")
    parser.add_argument("--out", type=Path, default=ARTEFACT_DIR, help=f"artefact directory (default {ARTEFACT_DIR})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--c", type=float, default=1.0, help="inverse L2 regularisation (default 1.0)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-recall", type=float, default=0.97, help="AdvBench recall for the threshold")
    parser.add_argument("--toxicity-threshold", type=float, default=0.80)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    """Train from parsed arguments; print the CV summary. Returns 0, or 2 on a data error."""
    try:
        metadata = train_harm_classifier(args.data_dir, args.out, seed=args.seed, progress=not args.no_progress,
                                         c=args.c, folds=args.folds, repeats=args.repeats,
                                         target_recall=args.target_recall, toxicity_threshold=args.toxicity_threshold)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary(metadata))
    print(f"wrote {Path(args.out) / ARTEFACT_VERSION}.npz and .json")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m proxy.guardrails.training`` entry point."""
    parser = argparse.ArgumentParser(prog="python -m proxy.guardrails.training", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
