"""Train Privacy's person head: is a PERSON mention a private individual or a public figure?

``sonate train privacy-person --data-dir ../shared/data`` writes ``artefacts/person-head.npz``
(the arrays :class:`~proxy.guardrails.detectors.privacy_person.PersonHead` reads), its metadata
``person-head.json`` and ``person-head.rows.json`` (the rows trained on,
:mod:`proxy.evaluation.provenance`).

Rows: the PERSON spans of the **tuning part** of the presidio development rows, labelled private
or public by reading (:data:`proxy.evaluation.scorecard.PERSON_LABELS`; the sealed part is never
read here), and every marked mention of ``artefacts/person-mentions.csv``: texts written for this
project in which each name is marked ``[[Name|pr]]`` (private) or ``[[Name|pu]]`` (public) —
bios in record form, riddles, fact checks, reviews, fiction, eponyms against customer records,
chat transcripts, wills, forms, notes and messages, and texts naming both kinds of person.

Model: standardised features (:func:`~proxy.guardrails.detectors.privacy_person.mention_features`
over the privacy policy's own spaCy pipeline and the MiniLM sentence embedding of each text) and an L2 logistic regression (scikit-learn,
``C`` = 0.1 by default, balanced class weights). Threshold: out of fold (5-fold ``GroupKFold``,
a text's mentions in one fold), the highest threshold whose private recall on the presidio rows
is at least ``target_recall``; the out-of-fold figures at it go into the metadata.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from proxy.evaluation import provenance
from proxy.evaluation.data import DataError, development_index, load_builtin
from proxy.guardrails.detectors.privacy_person import ARTEFACT, FEATURES, mention_features

MENTIONS = ARTEFACT.with_name("person-mentions.csv")
POLICY = Path(__file__).resolve().parents[2] / "policies" / "privacy.yaml"
_MARK = re.compile(r"\[\[([^\]|]+)\|(pr|pu)\]\]")


@dataclass(frozen=True)
class Mention:
    """One labelled mention: ``text[start:end]`` names a private person (``private``) or not;
    ``group`` is ``presidio`` or ``written``."""

    text: str
    start: int
    end: int
    private: bool
    group: str


def parse_marked(text: str) -> tuple[str, list[tuple[int, int, bool]]]:
    """``text`` without its ``[[Name|pr]]`` / ``[[Name|pu]]`` marks, and ``(start, end, private)``
    of each marked name in the plain text."""
    plain, spans, last = [], [], 0
    length = 0
    for match in _MARK.finditer(text):
        before = text[last:match.start()]
        plain.append(before)
        length += len(before)
        name = match.group(1)
        spans.append((length, length + len(name), match.group(2) == "pr"))
        plain.append(name)
        length += len(name)
        last = match.end()
    plain.append(text[last:])
    return "".join(plain), spans


def load_mentions(data_dir: Path, written: Path = MENTIONS) -> list[Mention]:
    """The labelled mentions: presidio tuning rows (labelled spans only) then the written texts.

    Raises DataError when there are no presidio rows, or ``written`` is missing, has a text without
    a mark, or has a text that repeats a development row of any source or part, verbatim or nearly
    (:func:`~proxy.evaluation.data.development_index`; the message names the row, never the text).
    """
    from proxy.evaluation.scorecard import read_person_labels

    written_mentions: list[Mention] = []
    if not Path(written).is_file():
        raise DataError(f"{written}: not found")
    index, source_of = development_index(Path(data_dir))
    clashes = []
    with open(written, encoding="utf-8", newline="") as handle:
        for n, row in enumerate(csv.DictReader(handle), 1):
            plain, spans = parse_marked(row["text"])
            if not spans:
                raise DataError(f"{written}: row {n}: no [[Name|pr]] or [[Name|pu]] mark")
            match = index.match(plain)
            if match is not None:  # never the text: the row may be sealed
                clashes.append(f"row {n} duplicates a development row of {source_of[match]}")
            written_mentions.extend(Mention(plain, a, b, private, "written") for a, b, private in spans)
    if clashes:
        raise DataError(f"{written}: {len(clashes)} written text(s) match development rows (benchmark rows are "
                        "never trained on; remove or rewrite them): " + "; ".join(clashes))
    labels = read_person_labels()
    items, _ = load_builtin(Path(data_dir), "tuning")
    mentions: list[Mention] = []
    for item in (i for i in items if i.dataset == "presidio"):
        file, _, row_id = item.item_id.rpartition(":")
        for span in item.spans:
            label = labels.get((file, int(row_id), span.start, span.end)) if span.entity_type == "PERSON" else None
            if label is not None and item.text[span.start:span.end].strip():
                mentions.append(Mention(item.text, span.start, span.end, label == "private", "presidio"))
    if not mentions:
        raise DataError(f"{data_dir}: no labelled presidio PERSON spans in the tuning part")
    return mentions + written_mentions


def _pipeline():
    """(spaCy pipeline, context rule) of the shipped privacy policy, as the detector builds them."""
    import spacy
    import yaml

    from proxy.guardrails.detectors.pii import PiiDetectorConfig, _spacy_model_path
    from proxy.guardrails.detectors.privacy_context import ContextRule

    config = PiiDetectorConfig.model_validate(yaml.safe_load(POLICY.read_text(encoding="utf-8"))["detector"])
    return spacy.load(_spacy_model_path(config.spacy_model)), ContextRule.from_config(config.context)


def featurise(mentions: list[Mention], progress: bool = True) -> np.ndarray:
    """Features of every mention, float32 (len(mentions), FEATURES): one parse per distinct text."""
    from tqdm import tqdm

    from proxy.guardrails.detectors.embeddings import embed
    from proxy.guardrails.detectors.privacy_context import text_mood

    nlp, rule = _pipeline()
    texts = list(dict.fromkeys(m.text for m in mentions))
    sentences = dict(zip(texts, embed(texts, remember=False)))
    parsed = {}
    for text, doc in zip(texts, tqdm(nlp.pipe(texts), total=len(texts), desc="parse", disable=not progress)):
        parsed[text] = (doc, rule.personal_cues(text), text_mood(doc))
    return np.stack([mention_features(parsed[m.text][0], m.start, m.end, parsed[m.text][1], parsed[m.text][2],
                                      sentences[m.text]) for m in mentions])


def _model(c: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=5000))


def _threshold(p: np.ndarray, private: np.ndarray, target_recall: float) -> float:
    """The highest threshold (two decimals) keeping recall of ``private`` rows ≥ ``target_recall``."""
    for t in np.arange(0.99, 0.0, -0.01):
        if (p[private] >= t).mean() >= target_recall:
            return round(float(t), 2)
    return 0.01


def train_person_head(data_dir: Path, out: Path = ARTEFACT, *, c: float = 0.1, target_recall: float = 0.97,
                      progress: bool = True) -> dict[str, Any]:
    """Fit, choose the threshold out of fold, write the artefact, metadata and rows file.

    Returns the metadata written. Raises DataError for missing data.
    """
    from sklearn.model_selection import GroupKFold

    from proxy.evaluation.metrics import proportion
    from proxy.evaluation.training import _write_npz
    from proxy.guardrails.detectors.harm import sha256_file

    mentions = load_mentions(data_dir)
    x = featurise(mentions, progress)
    y = np.array([m.private for m in mentions])
    texts = {t: i for i, t in enumerate(dict.fromkeys(m.text for m in mentions))}
    groups = np.array([texts[m.text] for m in mentions])
    oof = np.zeros(len(mentions))
    for train, test in GroupKFold(5).split(x, y, groups):
        oof[test] = _model(c).fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    presidio = np.array([m.group == "presidio" for m in mentions])
    threshold = _threshold(oof[presidio], y[presidio], target_recall)
    final = _model(c).fit(x, y)
    scaler, regression = final.steps[0][1], final.steps[1][1]
    out = Path(out)
    _write_npz(out, {"mean": scaler.mean_.astype(np.float32), "scale": scaler.scale_.astype(np.float32),
                     "coef": regression.coef_[0].astype(np.float32),
                     "intercept": np.float64(regression.intercept_[0]), "threshold": np.float64(threshold)})

    def rate(mask: np.ndarray, private: bool) -> dict[str, Any]:
        chosen = mask & (y == private)
        hits = (oof[chosen] >= threshold) if private else (oof[chosen] < threshold)
        return proportion(int(hits.sum()), int(chosen.sum())).as_dict()

    out_of_fold = {f"{g}/{side}": rate(mask, side == "private_hidden")
                   for g, mask in (("presidio", presidio), ("written", ~presidio))
                   for side in ("private_hidden", "public_left")}
    metadata: dict[str, Any] = {"name": "person-head", "features": FEATURES, "c": c, "threshold": threshold,
                "threshold_rule": f"highest threshold with out-of-fold private recall >= {target_recall} on the "
                                  "presidio tuning mentions (5-fold GroupKFold by text)",
                "rows": {"presidio": int(presidio.sum()), "written": int((~presidio).sum()),
                         "private": int(y.sum()), "public": int((~y).sum())},
                "out_of_fold": out_of_fold, "weights_sha256": sha256_file(out)}
    out.with_suffix(".json").write_text(json.dumps(metadata, indent=1) + "\n", encoding="utf-8")
    document = provenance.rows_document(
        "person-head", "privacy", "trained",
        {"presidio_tuning": sorted({m.text for m in mentions if m.group == "presidio"}),
         "written": sorted({m.text for m in mentions if m.group == "written"})},
        artefact_files={out.name: metadata["weights_sha256"]},
        note="PERSON mentions of the presidio tuning rows (labelled private/public) and the written texts of "
             "person-mentions.csv; no out-of-fold figure per evaluation row")
    provenance.write_rows(out.with_name(f"person-head{provenance.ROWS_SUFFIX}"), document)
    return metadata
