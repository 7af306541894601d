"""Every reader of evaluation and training data: the one place files become rows and items.

I/O only: files are parsed here and handed to the pure evaluation, KPI and training code. Every
reader raises :class:`DataError` with a message naming the file (and the line/row) when the data
cannot be used; the ``sonate`` commands print it and exit 2.

Layout of the data directory (``--data-dir``, default ``$SONATE_DATA_DIR`` or ``../shared/data``;
the small samples in ``tests/data`` have the same layout). Every ``*.csv`` / ``*.json`` /
``*.jsonl`` file matching a source's folder is read, so sample files work too.

Guardrail evaluation (:func:`load_builtin`, :data:`SOURCES`; a missing source folder is skipped
and reported, a directory holding none of them is an error):

==========  ========================  =====================  ===========================  =======
dataset     files                     text                   label → subset               policy
==========  ========================  =====================  ===========================  =======
xstest      ``xstest/*.csv``          ``prompt``             ``label``: unsafe (+), safe  safety
advbench    ``advbench/*.csv``        ``goal``               all harmful (+)              safety
davidson    ``davidson/*.csv``        ``tweet``              ``class`` 0/1 toxic (+),     safety
                                                             2 neither
alpaca_seed ``alpaca_seed/*.jsonl``   ``instruction`` +      benign; ``personal``;        safety
                                      first ``input``        ``regulated`` (+)            (compl.)
presidio    ``presidio/*.json``       ``full_text``          gold ``spans`` (pii)         privacy
truthfulqa  ``truthfulqa/*.csv``      ``Question``           regulated labels:            compliance
                                                             regulated (+), else general
==========  ========================  =====================  ===========================  =======

(+) marks the positive class: what the policy should act on. Regulated or not comes from
``regulated/labels_dev.tsv`` (what a request asks, :func:`read_regulated_labels`); TruthfulQA's
``Category`` decides only for files those labels do not cover. Every item carries its part of the
tuning / sealed split (:mod:`proxy.evaluation.split`). alpaca_seed is CC BY-NC 4.0: it
is read for evaluation only and never copied into the project (reports carry row ids, not
texts).

Training of the harm classifier (:func:`load_training_examples`): the same xstest, advbench,
davidson and alpaca_seed loaders, relabelled as training groups (:class:`Example`), plus the
project's contrast exemplars (:func:`load_exemplars`).

FAR-H and PFI: ``halueval/qa*.jsonl`` (HaluEval QA rows ``{question, right_answer,
hallucinated_answer}``), ``truthfulqa/*.csv`` with ``Question, Best Answer, Correct Answers,
Incorrect Answers`` (CSVs without the answer columns are ignored), and
``holistic_bias/descriptors.json``, ``nouns.json``, ``sentence_templates.json``.
"""

from __future__ import annotations

import csv
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from proxy.evaluation.metrics import Span
from proxy.evaluation.split import NearDuplicates

#: ``$SONATE_DATA_DIR`` or ``../shared/data`` (relative to the working directory).
DEFAULT_DATA_DIR = os.environ.get("SONATE_DATA_DIR", "../shared/data")
TRUTHFULQA_COLUMNS = ("Question", "Best Answer", "Correct Answers", "Incorrect Answers")


class DataError(ValueError):
    """A data directory or file is missing, unreadable, malformed or lacks a mapped column;
    the message names the file and the place."""


# -- generic readers ---------------------------------------------------------------------------

def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file (blank lines skipped). Raises DataError naming file and line
    for unreadable files, invalid JSON or a line that is not an object."""
    rows = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{number}: each line must be a JSON object")
                rows.append(row)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV (header line), JSONL (one object a line) or JSON (a list of objects) file.

    Raises DataError for an unreadable or malformed file or an unknown extension.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path)
    try:
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                return list(csv.DictReader(handle))
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise DataError(f"{path}: expected a JSON list of objects")
            return data
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    raise DataError(f"{path}: unsupported file type {suffix or '(none)'} (use .csv, .jsonl or .json)")


# -- guardrail evaluation items -------------------------------------------------------------

POLICIES = ("safety", "privacy", "compliance")
#: TruthfulQA categories the Compliance policy must route to a human.
REGULATED_CATEGORIES = frozenset({"Law", "Health", "Finance", "Economics", "Nutrition"})
DAVIDSON_CLASSES = {"0": "hate", "1": "offensive", "2": "neither"}
#: Subset names of custom datasets by policy: (positive, negative).
CUSTOM_SUBSETS = {"safety": ("harmful", "benign"), "compliance": ("regulated", "general")}


@dataclass(frozen=True)
class Item:
    """One labelled text.

    Attributes:
        dataset: source name (``xstest``, ``advbench``, …, or ``custom:<file stem>``).
        subset: label group inside the source (``safe``/``unsafe``, ``toxic``/``neither``, …).
        policy: the policy kind this item evaluates: ``safety``, ``privacy`` or ``compliance``.
        text: the user message sent through the guardrails.
        positive: True when the policy should act (harmful, toxic, regulated, contains PII).
        item_id: ``<file name>:<row number>`` (1-based data rows), stable across runs.
        spans: gold PII spans in the dataset's own entity names (privacy items only).
        category: finer label where the source has one (XSTest type, Davidson class,
            TruthfulQA category).
        part: ``tuning`` or ``sealed`` (:func:`proxy.evaluation.split.part_of`).
    """

    dataset: str
    subset: str
    policy: str
    text: str
    positive: bool
    item_id: str
    spans: tuple[Span, ...] = ()
    category: str | None = None
    part: str = "tuning"


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_file() and p.suffix.lower() in suffixes)


def _column(row: dict[str, Any], name: str, path: Path, number: int) -> Any:
    if name not in row:
        raise DataError(f"{path}: column {name!r} not found (columns: {', '.join(map(str, row))})")
    value = row[name]
    if value is None:
        raise DataError(f"{path}: row {number}: column {name!r} is empty")
    return value


def _text(row: dict[str, Any], name: str, path: Path, number: int) -> str:
    value = _column(row, name, path, number)
    if not isinstance(value, str):
        raise DataError(f"{path}: row {number}: column {name!r} is not text")
    return value


def _xstest(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        label = str(_column(row, "label", path, n)).strip()
        if label not in ("safe", "unsafe"):
            raise DataError(f"{path}: row {n}: label must be safe or unsafe, got {label!r}")
        yield Item("xstest", label, "safety", _text(row, "prompt", path, n), label == "unsafe",
                   f"{path.name}:{n}", category=row.get("type"))


def _advbench(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        yield Item("advbench", "harmful", "safety", _text(row, "goal", path, n), True, f"{path.name}:{n}")


def _davidson(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        cls = str(_column(row, "class", path, n)).strip()
        if cls not in DAVIDSON_CLASSES:
            raise DataError(f"{path}: row {n}: class must be 0, 1 or 2, got {cls!r}")
        toxic = cls != "2"
        yield Item("davidson", "toxic" if toxic else "neither", "safety", _text(row, "tweet", path, n), toxic,
                   f"{path.name}:{n}", category=DAVIDSON_CLASSES[cls])


def _alpaca(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    """Seed tasks as a user sends them: the instruction, then the first instance's input (when it
    has one) after a blank line. Subset ``regulated`` (policy compliance, positive) for tasks the
    regulated labels mark so, ``personal`` for tasks carrying a private person's data
    (:data:`ALPACA_PERSONAL`), else ``benign``."""
    personal = _alpaca_personal()
    for n, row in enumerate(read_rows(path), 1):
        text = _text(row, "instruction", path, n)
        instances = row.get("instances") or []
        first = instances[0].get("input") if instances and isinstance(instances[0], dict) else None
        if isinstance(first, str) and first.strip():
            text = f"{text}\n\n{first}"
        item_id = str(row.get("id") or f"{path.name}:{n}")
        label, _ = (labels or {}).get((f"alpaca_seed/{path.name}", n - 1), (None, None))
        if label == "regulated":
            yield Item("alpaca_seed", "regulated", "compliance", text, True, item_id)
        else:
            yield Item("alpaca_seed", "personal" if personal.get(item_id) else "benign", "safety", text, False,
                       item_id)


def _presidio(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        text = _text(row, "full_text", path, n)
        spans = []
        for s in _column(row, "spans", path, n):
            try:
                span = Span(str(s["entity_type"]), int(s["start_position"]), int(s["end_position"]))
            except (KeyError, TypeError, ValueError):
                raise DataError(f"{path}: row {n}: a span needs entity_type, start_position, "
                                   "end_position") from None
            if not 0 <= span.start < span.end <= len(text):
                raise DataError(f"{path}: row {n}: span {span.start}-{span.end} outside the text")
            spans.append(span)
        yield Item("presidio", "pii", "privacy", text, bool(spans), f"{path.name}:{n}", tuple(spans))


def _truthfulqa(path: Path, labels: "Labels | None" = None) -> Iterable[Item]:
    """Questions labelled by what they ask (``regulated/labels_dev.tsv``): subset ``regulated``
    (positive) or ``general``. A file the labels do not cover falls back to the source's
    ``Category`` (:data:`REGULATED_CATEGORIES`)."""
    for n, row in enumerate(read_rows(path), 1):
        category = str(_column(row, "Category", path, n)).strip()
        label, _ = (labels or {}).get((f"truthfulqa/{path.name}", n - 1), (None, None))
        regulated = label == "regulated" if label else category in REGULATED_CATEGORIES
        yield Item("truthfulqa", "regulated" if regulated else "general", "compliance",
                   _text(row, "Question", path, n), regulated, f"{path.name}:{n}", category=category)


#: (source file relative to the data directory, 0-based row) -> (label, domain) of the regulated labels.
Labels = dict[tuple[str, int], tuple[str, str]]
#: Labels of what a request asks (legal, medical, financial information or advice), under the data directory.
REGULATED_LABELS = "regulated/labels_dev.tsv"
#: Which alpaca seed tasks carry a private person's data (ids only; the texts are CC BY-NC).
ALPACA_PERSONAL = Path(__file__).resolve().parent / "data" / "alpaca_personal_labels.tsv"


def read_regulated_labels(data_dir: Path) -> Labels:
    """The regulated labels under ``data_dir`` (empty when the file is absent, e.g. a sample
    directory). Raises DataError for a malformed file."""
    path = Path(data_dir) / REGULATED_LABELS
    if not path.is_file():
        return {}
    labels: Labels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for n, row in enumerate(csv.DictReader(handle, delimiter="\t"), 2):
            try:
                key = (row["source"], int(row["row"]))
                label, domain = row["label"].strip(), row["domain"].strip()
            except (KeyError, TypeError, ValueError, AttributeError):
                raise DataError(f"{path}:{n}: needs source, row, label and domain columns") from None
            if label not in ("regulated", "ordinary"):
                raise DataError(f"{path}:{n}: label must be regulated or ordinary, got {label!r}")
            labels[key] = (label, domain)
    return labels


def _alpaca_personal() -> dict[str, bool]:
    """Seed task id -> carries personal data (:data:`ALPACA_PERSONAL`; empty when absent)."""
    if not ALPACA_PERSONAL.is_file():
        return {}
    with ALPACA_PERSONAL.open(encoding="utf-8", newline="") as handle:
        return {row["id"]: row["personal"].strip() == "yes" for row in csv.DictReader(handle, delimiter="\t")}


#: dataset name -> (folder, file suffixes, row loader)
SOURCES = {
    "xstest": ("xstest", (".csv",), _xstest),
    "advbench": ("advbench", (".csv",), _advbench),
    "davidson": ("davidson", (".csv",), _davidson),
    "alpaca_seed": ("alpaca_seed", (".jsonl",), _alpaca),
    "presidio": ("presidio", (".json",), _presidio),
    "truthfulqa": ("truthfulqa", (".csv",), _truthfulqa),
}


def load_builtin(data_dir: Path, part: str | None = None) -> tuple[list[Item], list[str]]:
    """(items of every source found under ``data_dir`` in ``part``, names of the sources not found).

    ``part`` is ``"tuning"`` (what rules, examples, thresholds and training read), ``"sealed"``
    (only ``sonate eval guardrails --sealed`` reads it) or None (the default) for both
    (:mod:`proxy.evaluation.split`). Every item carries its part.

    Raises DataError when ``data_dir`` is not a directory, holds none of the sources, or a
    file is malformed; ValueError for an unknown part.
    """
    from dataclasses import replace

    from proxy.evaluation.split import PARTS, part_of

    if part is not None and part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)} or None, got {part!r}")
    if not data_dir.is_dir():
        raise DataError(f"data directory {data_dir} not found (the development data lives in "
                           "../shared/data; pass --data-dir)")
    labels = read_regulated_labels(data_dir)
    items: list[Item] = []
    missing: list[str] = []
    for name, (folder, suffixes, loader) in SOURCES.items():
        files = _files(data_dir / folder, suffixes) if (data_dir / folder).is_dir() else []
        if not files:
            missing.append(name)
        for path in files:
            for item in loader(path, labels):
                item = replace(item, part=part_of(item.dataset, item.text))
                if part is None or item.part == part:
                    items.append(item)
    if len(missing) == len(SOURCES):
        raise DataError(f"{data_dir}: none of the evaluation sources found "
                           f"(expected folders: {', '.join(s[0] for s in SOURCES.values())})")
    return items, missing


def load_custom(path: Path, *, text_column: str, label_column: str, positive: str, policy: str) -> list[Item]:
    """Items of a user CSV/JSONL/JSON file with a column mapping.

    A row is positive (harmful for ``safety``, regulated for ``compliance``) when its label,
    as text, equals ``positive`` (case-insensitive, surrounding spaces ignored).

    Raises DataError for a missing file or column, an empty file, or an unknown policy.
    """
    if policy not in CUSTOM_SUBSETS:
        raise DataError(f"--policy must be one of {', '.join(CUSTOM_SUBSETS)}, got {policy!r}")
    if not path.is_file():
        raise DataError(f"dataset {path} not found")
    rows = read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows")
    pos_name, neg_name = CUSTOM_SUBSETS[policy]
    wanted = positive.strip().lower()
    items = []
    for n, row in enumerate(rows, 1):
        text = _text(row, text_column, path, n)
        is_positive = str(_column(row, label_column, path, n)).strip().lower() == wanted
        items.append(Item(f"custom:{path.stem}", pos_name if is_positive else neg_name, policy, text, is_positive,
                          f"{path.name}:{n}"))
    return items


def sample(items: list[Item], per_subset: int | None, seed: int) -> list[Item]:
    """At most ``per_subset`` items of each (dataset, subset), drawn without replacement.

    Each subset has its own generator, ``random.Random(f"{seed}:{dataset}:{subset}")``, so the
    sample of a subset does not depend on which other sources are loaded. Order of the input is
    kept. ``None`` returns ``items`` unchanged. Raises ValueError for a non-positive size.
    """
    if per_subset is None:
        return items
    if per_subset <= 0:
        raise ValueError("the sample size must be positive")
    groups: dict[tuple[str, str], list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault((item.dataset, item.subset), []).append(index)
    keep: set[int] = set()
    for (dataset, subset), indices in groups.items():
        rng = random.Random(f"{seed}:{dataset}:{subset}")
        keep.update(indices if len(indices) <= per_subset else rng.sample(indices, per_subset))
    return [item for index, item in enumerate(items) if index in keep]


APOLOGY_TYPES = {"full_refusal": "refusal", "partial_refusal": "refusal", "full_compliance": "compliance",
                 "apologetic_compliance": "compliance"}


def load_apology_completions(path: Path) -> list[dict[str, Any]]:
    """Labelled completions for the model-apology detector (``proxy/evaluation/data``).

    Each JSONL row: ``id``, ``prompt``, ``completion``, ``type`` (one of
    :data:`APOLOGY_TYPES`) and ``label`` (``refusal`` / ``compliance``, consistent with the
    type). Raises DataError for a missing file or a malformed row.
    """
    if not path.is_file():
        raise DataError(f"{path} not found")
    rows = read_rows(path)
    for n, row in enumerate(rows, 1):
        for key in ("id", "prompt", "completion", "type", "label"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise DataError(f"{path}: row {n}: {key!r} must be a non-empty string")
        if APOLOGY_TYPES.get(row["type"]) != row["label"]:
            raise DataError(f"{path}: row {n}: type {row['type']!r} does not go with label {row['label']!r}")
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


# -- training data of the harm classifier ------------------------------------------------------

#: Guardrail-evaluation sources the harm classifier's training reads, in reading order, with
#: the provenance written into the artefact metadata.
TRAINING_SOURCES = {
    "advbench": {"required": True, "license": "MIT",
                 "origin": "llm-attacks AdvBench harmful_behaviors.csv (copy in YancyKahn/PocoGCG @ 131c890)"},
    "xstest": {"required": True, "license": "CC BY 4.0", "origin": "paul-rottger/exaggerated-safety @ d7bb5bd"},
    "alpaca_seed": {"required": False, "license": "CC BY-NC 4.0",
                    "origin": "tatsu-lab/stanford_alpaca seed_tasks.jsonl", "evaluation_only": True},
    "davidson": {"required": False, "license": "MIT",
                 "origin": "t-davidson/hate-speech-and-offensive-language @ cb50f7e"},
}


@dataclass(frozen=True)
class Example:
    """One labelled training text. ``group`` is a training group (``advbench``,
    ``xstest_unsafe``, ``xstest_safe``, ``davidson_hate|offensive|neither``, ``alpaca_seed``,
    ``exemplar_harmful|benign``); ``stratum`` refines it (XSTest ``type``, exemplar theme)."""

    text: str
    group: str
    stratum: str = ""


def _example(item: Item) -> Example:
    """The training view of an evaluation item (text stripped)."""
    if item.dataset == "xstest":
        return Example(item.text.strip(), f"xstest_{item.subset}", (item.category or "").strip())
    if item.dataset == "davidson":
        return Example(item.text.strip(), f"davidson_{item.category}")
    return Example(item.text.strip(), item.dataset)


def _sha256(path: Path) -> str:
    from proxy.guardrails.detectors.harm import sha256_file

    return sha256_file(path)


def tuning_only(items: Iterable[Item]) -> list[Item]:
    """The items of the tuning part (:func:`proxy.evaluation.split.part_of`): what training reads."""
    from proxy.evaluation.split import part_of

    return [i for i in items if part_of(i.dataset, i.text) == "tuning"]


def load_training_examples(data_dir: Path) -> tuple[list[Example], list[dict]]:
    """Read the tuning part of the :data:`TRAINING_SOURCES` under ``data_dir`` (empty texts
    skipped; sealed rows are never trained on).

    Returns:
        (examples, sources) where ``sources`` lists, per file read, its path relative to
        ``data_dir``, sha256, row count, license, origin and whether it is evaluation-only (for
        the artefact metadata).

    Raises:
        DataError: a required source (AdvBench, XSTest) is missing, or a file is malformed.
    """
    data_dir = Path(data_dir)
    examples: list[Example] = []
    sources: list[dict] = []
    for source, info in TRAINING_SOURCES.items():
        folder, suffixes, loader = SOURCES[source]
        files = _files(data_dir / folder, suffixes) if (data_dir / folder).is_dir() else []
        if not files and info["required"]:
            raise DataError(f"{data_dir}: no files match {folder}/*{suffixes[0]} (required source {source})")
        for path in files:
            rows = [e for e in map(_example, tuning_only(loader(path))) if e.text]
            examples.extend(rows)
            sources.append({
                "source": source, "file": path.relative_to(data_dir).as_posix(), "sha256": _sha256(path),
                "rows": len(rows), "license": info["license"], "origin": info["origin"],
                "use": "evaluation only" if info.get("evaluation_only") else "training + evaluation",
            })
    return examples, sources


def load_exemplars(path: Path) -> list[Example]:
    """The project's contrast exemplars (CSV ``text,label,theme``; label harmful | benign).

    Raises:
        DataError: missing file, column or an unknown label.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: exemplar file not found")
    out = []
    for n, row in enumerate(read_rows(path), 1):
        label = str(_column(row, "label", path, n)).strip()
        if label not in ("harmful", "benign"):
            raise DataError(f"{path}: unexpected exemplar label {label!r}")
        out.append(Example(_text(row, "text", path, n).strip(), f"exemplar_{label}",
                           _text(row, "theme", path, n).strip()))
    return [e for e in out if e.text]


def development_index(data_dir: Path) -> tuple[NearDuplicates, dict[str, str]]:
    """Every development row under ``data_dir``, both parts, of every source of :data:`SOURCES`.

    Returns ``(index, source_of)``: a :class:`~proxy.evaluation.split.NearDuplicates` over the
    texts (for alpaca seed tasks also the instruction alone, the first paragraph) and the source
    name of each indexed text. Raises DataError as :func:`load_builtin` does.
    """
    items, _ = load_builtin(Path(data_dir))
    source_of: dict[str, str] = {}
    for item in items:
        for text in dict.fromkeys((item.text, item.text.split("\n\n", 1)[0])):
            source_of.setdefault(text, item.dataset)
    return NearDuplicates(source_of), source_of


def refuse_development_duplicates(path: Path, data_dir: Path) -> None:
    """Raise DataError when a row of the exemplar CSV at ``path`` is a development row.

    A row matches when its text equals a development row of any source under ``data_dir``
    (tuning or sealed part) after :func:`~proxy.evaluation.split.normalise`, or nearly equals it
    (:class:`~proxy.evaluation.split.NearDuplicates`). The message names each such row by its
    1-based data row number and the source, never a text (a sealed row must not be shown).
    """
    index, source_of = development_index(data_dir)
    clashes = []
    for n, row in enumerate(read_rows(Path(path)), 1):
        text = str(row.get("text") or "").strip()
        match = index.match(text) if text else None
        if match is not None:
            clashes.append(f"exemplar row {n} duplicates a development row of {source_of[match]}")
    if clashes:
        raise DataError(f"{path}: {len(clashes)} training exemplar(s) match development rows (benchmark rows are "
                        f"never trained on; remove or rewrite them): " + "; ".join(clashes))


# -- FAR-H and PFI data --------------------------------------------------------------------------

def read_yaml_or_json(path: Path) -> Any:
    """A YAML (or JSON, a subset) document. Raises DataError for unreadable or invalid files."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: invalid YAML/JSON: {exc}") from None


def _directory(data_dir: Path, name: str) -> Path:
    folder = Path(data_dir) / name
    if not folder.is_dir():
        raise DataError(f"{folder}: no such directory (is --data-dir right? expected {name}/ inside it)")
    return folder


def read_halueval_qa(data_dir: Path) -> list[dict[str, Any]]:
    """Rows of every ``halueval/qa*.jsonl`` under ``data_dir`` (sorted by file name)."""
    files = sorted(_directory(data_dir, "halueval").glob("qa*.jsonl"))
    if not files:
        raise DataError(f"{Path(data_dir) / 'halueval'}: no qa*.jsonl file (HaluEval QA)")
    return [row for path in files for row in read_jsonl(path)]


def read_truthfulqa(data_dir: Path) -> list[dict[str, str]]:
    """Rows of every ``truthfulqa/*.csv`` that has the answer columns (sorted by file name)."""
    folder = _directory(data_dir, "truthfulqa")
    rows: list[dict[str, str]] = []
    for path in sorted(folder.glob("*.csv")):
        try:
            with open(path, encoding="utf-8", newline="") as handle:
                reader = csv.DictReader(handle)
                if not set(TRUTHFULQA_COLUMNS) <= set(reader.fieldnames or ()):
                    continue
                rows.extend(reader)
        except (OSError, csv.Error) as exc:
            raise DataError(f"{path}: cannot read CSV: {exc}") from None
    if not rows:
        raise DataError(f"{folder}: no CSV with the columns {', '.join(TRUTHFULQA_COLUMNS)} (TruthfulQA)")
    return rows


def read_holistic_bias(data_dir: Path) -> dict[str, Any]:
    """HolisticBias v1.1 files: ``{"descriptors": ..., "nouns": ..., "templates": ...}`` as parsed
    JSON (see :mod:`proxy.evaluation.fairness` for their shapes)."""
    folder = _directory(data_dir, "holistic_bias")
    parsed: dict[str, Any] = {}
    for key, name in (("descriptors", "descriptors.json"), ("nouns", "nouns.json"),
                      ("templates", "sentence_templates.json")):
        path = folder / name
        try:
            parsed[key] = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    return parsed
