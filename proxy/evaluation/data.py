"""Readers of the evaluation data sets under ``--data-dir`` (default ``../shared/data``).

I/O only: files are parsed here and handed to the pure KPI code as rows. Every reader raises
:class:`DataError` with a message naming the file (and the line/row) when the data cannot be
used; the CLI prints it and exits 2.

Layout expected under the data directory (the development split, or tests/data samples):

- ``halueval/qa*.jsonl``: HaluEval QA rows ``{question, right_answer, hallucinated_answer}``
- ``truthfulqa/*.csv``: TruthfulQA with ``Question, Best Answer, Correct Answers, Incorrect
  Answers`` (CSVs without the answer columns are ignored)
- ``holistic_bias/descriptors.json``, ``nouns.json``, ``sentence_templates.json``
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DATA_DIR", "DataError", "read_halueval_qa", "read_holistic_bias", "read_jsonl",
           "read_truthfulqa", "read_yaml_or_json"]

#: ``$SONATE_DATA_DIR`` or ``../shared/data`` (relative to the working directory).
DEFAULT_DATA_DIR = os.environ.get("SONATE_DATA_DIR", "../shared/data")
TRUTHFULQA_COLUMNS = ("Question", "Best Answer", "Correct Answers", "Incorrect Answers")


class DataError(Exception):
    """A data file is missing or malformed; the message names the file and the place."""


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
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return rows


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
