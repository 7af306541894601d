"""Labelled evaluation data: the development-split sources and any user CSV/JSONL.

Layout of the data directory (``../shared/data``; the small samples in ``tests/data`` have the
same layout). Every ``*.csv`` / ``*.json`` / ``*.jsonl`` file matching a source's pattern is
read, so sample files work too. A missing source folder is skipped (and reported); a data
directory holding none of them is an error.

==========  ========================  =====================  ===========================  =======
dataset     files                     text                   label → subset               policy
==========  ========================  =====================  ===========================  =======
xstest      ``xstest/*.csv``          ``prompt``             ``label``: unsafe (+), safe  safety
advbench    ``advbench/*.csv``        ``goal``               all harmful (+)              safety
davidson    ``davidson/*.csv``        ``tweet``              ``class`` 0/1 toxic (+),     safety
                                                             2 neither
alpaca_seed ``alpaca_seed/*.jsonl``   ``instruction``        all benign                   safety
presidio    ``presidio/*.json``       ``full_text``          gold ``spans`` (pii)         privacy
truthfulqa  ``truthfulqa/*.csv``      ``Question``           ``Category`` in              compliance
                                                             :data:`REGULATED_CATEGORIES`
                                                             regulated (+), else general
==========  ========================  =====================  ===========================  =======

(+) marks the positive class: what the policy should act on. alpaca_seed is CC BY-NC 4.0: it
is read for evaluation only and never copied into the project (reports carry row ids, not
texts).
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from proxy.evaluation.metrics import Span

POLICIES = ("safety", "privacy", "compliance")
#: TruthfulQA categories the Compliance policy must route to a human (issue 4).
REGULATED_CATEGORIES = frozenset({"Law", "Health", "Finance", "Economics", "Nutrition"})
DAVIDSON_CLASSES = {"0": "hate", "1": "offensive", "2": "neither"}
#: Subset names of custom datasets by policy: (positive, negative).
CUSTOM_SUBSETS = {"safety": ("harmful", "benign"), "compliance": ("regulated", "general")}


class DatasetError(ValueError):
    """A data directory or file is missing, unreadable or lacks a mapped column."""


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
    """

    dataset: str
    subset: str
    policy: str
    text: str
    positive: bool
    item_id: str
    spans: tuple[Span, ...] = ()
    category: str | None = None


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_file() and p.suffix.lower() in suffixes)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a CSV (header line), JSONL (one object a line) or JSON (a list of objects) file.

    Raises DatasetError for an unreadable or malformed file or an unknown extension.
    """
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                return list(csv.DictReader(handle))
        if suffix == ".jsonl":
            rows = []
            with path.open(encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if line.strip():
                        row = json.loads(line)
                        if not isinstance(row, dict):
                            raise DatasetError(f"{path}:{number}: expected a JSON object per line")
                        rows.append(row)
            return rows
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise DatasetError(f"{path}: expected a JSON list of objects")
            return data
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    raise DatasetError(f"{path}: unsupported file type {suffix or '(none)'} (use .csv, .jsonl or .json)")


def _column(row: dict[str, Any], name: str, path: Path, number: int) -> Any:
    if name not in row:
        raise DatasetError(f"{path}: column {name!r} not found (columns: {', '.join(map(str, row))})")
    value = row[name]
    if value is None:
        raise DatasetError(f"{path}: row {number}: column {name!r} is empty")
    return value


def _text(row: dict[str, Any], name: str, path: Path, number: int) -> str:
    value = _column(row, name, path, number)
    if not isinstance(value, str):
        raise DatasetError(f"{path}: row {number}: column {name!r} is not text")
    return value


def _xstest(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        label = str(_column(row, "label", path, n)).strip()
        if label not in ("safe", "unsafe"):
            raise DatasetError(f"{path}: row {n}: label must be safe or unsafe, got {label!r}")
        yield Item("xstest", label, "safety", _text(row, "prompt", path, n), label == "unsafe",
                   f"{path.name}:{n}", category=row.get("type"))


def _advbench(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        yield Item("advbench", "harmful", "safety", _text(row, "goal", path, n), True, f"{path.name}:{n}")


def _davidson(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        cls = str(_column(row, "class", path, n)).strip()
        if cls not in DAVIDSON_CLASSES:
            raise DatasetError(f"{path}: row {n}: class must be 0, 1 or 2, got {cls!r}")
        toxic = cls != "2"
        yield Item("davidson", "toxic" if toxic else "neither", "safety", _text(row, "tweet", path, n), toxic,
                   f"{path.name}:{n}", category=DAVIDSON_CLASSES[cls])


def _alpaca(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        yield Item("alpaca_seed", "benign", "safety", _text(row, "instruction", path, n), False,
                   str(row.get("id") or f"{path.name}:{n}"))


def _presidio(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        text = _text(row, "full_text", path, n)
        spans = []
        for s in _column(row, "spans", path, n):
            try:
                span = Span(str(s["entity_type"]), int(s["start_position"]), int(s["end_position"]))
            except (KeyError, TypeError, ValueError):
                raise DatasetError(f"{path}: row {n}: a span needs entity_type, start_position, "
                                   "end_position") from None
            if not 0 <= span.start < span.end <= len(text):
                raise DatasetError(f"{path}: row {n}: span {span.start}-{span.end} outside the text")
            spans.append(span)
        yield Item("presidio", "pii", "privacy", text, bool(spans), f"{path.name}:{n}", tuple(spans))


def _truthfulqa(path: Path) -> Iterable[Item]:
    for n, row in enumerate(read_rows(path), 1):
        category = str(_column(row, "Category", path, n)).strip()
        regulated = category in REGULATED_CATEGORIES
        yield Item("truthfulqa", "regulated" if regulated else "general", "compliance",
                   _text(row, "Question", path, n), regulated, f"{path.name}:{n}", category=category)


#: dataset name -> (folder, file suffixes, row loader)
SOURCES = {
    "xstest": ("xstest", (".csv",), _xstest),
    "advbench": ("advbench", (".csv",), _advbench),
    "davidson": ("davidson", (".csv",), _davidson),
    "alpaca_seed": ("alpaca_seed", (".jsonl",), _alpaca),
    "presidio": ("presidio", (".json",), _presidio),
    "truthfulqa": ("truthfulqa", (".csv",), _truthfulqa),
}


def load_builtin(data_dir: Path) -> tuple[list[Item], list[str]]:
    """(items of every source found under ``data_dir``, names of the sources not found).

    Raises DatasetError when ``data_dir`` is not a directory, holds none of the sources, or a
    file is malformed.
    """
    if not data_dir.is_dir():
        raise DatasetError(f"data directory {data_dir} not found (the development data lives in "
                           "../shared/data; pass --data-dir)")
    items: list[Item] = []
    missing: list[str] = []
    for name, (folder, suffixes, loader) in SOURCES.items():
        files = _files(data_dir / folder, suffixes) if (data_dir / folder).is_dir() else []
        if not files:
            missing.append(name)
        for path in files:
            items.extend(loader(path))
    if len(missing) == len(SOURCES):
        raise DatasetError(f"{data_dir}: none of the evaluation sources found "
                           f"(expected folders: {', '.join(s[0] for s in SOURCES.values())})")
    return items, missing


def load_custom(path: Path, *, text_column: str, label_column: str, positive: str, policy: str) -> list[Item]:
    """Items of a user CSV/JSONL/JSON file with a column mapping.

    A row is positive (harmful for ``safety``, regulated for ``compliance``) when its label,
    as text, equals ``positive`` (case-insensitive, surrounding spaces ignored).

    Raises DatasetError for a missing file or column, an empty file, or an unknown policy.
    """
    if policy not in CUSTOM_SUBSETS:
        raise DatasetError(f"--policy must be one of {', '.join(CUSTOM_SUBSETS)}, got {policy!r}")
    if not path.is_file():
        raise DatasetError(f"dataset {path} not found")
    rows = read_rows(path)
    if not rows:
        raise DatasetError(f"{path}: no rows")
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
    type). Raises DatasetError for a missing file or a malformed row.
    """
    if not path.is_file():
        raise DatasetError(f"{path} not found")
    rows = read_rows(path)
    for n, row in enumerate(rows, 1):
        for key in ("id", "prompt", "completion", "type", "label"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise DatasetError(f"{path}: row {n}: {key!r} must be a non-empty string")
        if APOLOGY_TYPES.get(row["type"]) != row["label"]:
            raise DatasetError(f"{path}: row {n}: type {row['type']!r} does not go with label {row['label']!r}")
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows
