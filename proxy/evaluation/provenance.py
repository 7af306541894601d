"""Which rows a trained or tuned artefact has seen: content hashes, and the label of a figure.

A *rows file* (``<artefact>.rows.json`` next to the artefact in ``proxy/guardrails/artefacts``)
records the sha256 of the normalised text of every row the artefact was trained or tuned on:

- ``harm-minilm-svm-v7.rows.json``: written by ``sonate train safety`` (:mod:`.training`), every
  row of the final fit (AdvBench, XSTest, Davidson "neither", the project's exemplars), by group,
  and the cross-validated (out-of-fold) rates of the combined safety decision per group;
- ``privacy-tuning.rows.json``: written by ``sonate train privacy-rows``: the presidio rows whose
  text the privacy policy's comments quote (a quoted string of at least
  :data:`MIN_QUOTE_CHARS` characters found in a row makes that row "tuned on").

``sonate eval guardrails`` reads them (:func:`load_provenances`) and labels every figure
(:func:`kind_of`): **in-sample** (every scored row was trained/tuned on: not a claim),
**out-of-fold** (the artefact's own cross-validation: each row scored by a model that did not
train on it), **held-out** (no scored row was trained/tuned on), **mixed** (some were; the
report then also gives the held-out part alone).

Normalisation (:func:`normalise`): Unicode NFC, every run of whitespace → one space, stripped;
the hash is sha256 of its UTF-8 bytes (:func:`row_hash`). So a row matches whether it is read
from the CSV with or without surrounding spaces (training strips texts, evaluation does not).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

ROWS_SUFFIX = ".rows.json"
ROWS_VERSION = 1
NORMALISATION = "unicode NFC, whitespace runs -> one space, stripped; sha256 of the UTF-8 bytes"
MIN_QUOTE_CHARS = 6
KINDS = ("in-sample", "out-of-fold", "held-out", "mixed")
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """The text a row hash is taken of: NFC, whitespace runs collapsed to one space, stripped."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def row_hash(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of :func:`normalise` (``text``)."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Provenance:
    """The rows one artefact was trained or tuned on.

    Attributes:
        artefact: artefact id, e.g. ``harm-minilm-svm-v7`` or ``privacy-patterns``.
        policy: policy kind whose figures it concerns (``safety``, ``privacy``, ``compliance``).
        how: ``trained`` or ``tuned``.
        rows: row hash -> training group.
        out_of_fold: report row key ``dataset/subset`` -> ``{"k", "n", "rate", "threshold"}``
            from the artefact's cross-validation (empty when it has none).
        source: where it was read from (a path, or a description for built-in examples).
    """

    artefact: str
    policy: str
    how: str
    rows: dict[str, str]
    out_of_fold: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""

    def seen(self, text: str) -> bool:
        """True when ``text`` (normalised) is one of the rows trained or tuned on."""
        return row_hash(text) in self.rows

    def describe(self) -> dict[str, Any]:
        """JSON summary for reports: artefact, policy, how, row count, source."""
        return {"artefact": self.artefact, "policy": self.policy, "how": self.how, "rows": len(self.rows),
                "source": self.source}


def rows_document(artefact: str, policy: str, how: str, groups: Mapping[str, Iterable[str]], *,
                  artefact_files: dict[str, str], out_of_fold: dict[str, dict[str, Any]] | None = None,
                  note: str = "") -> dict[str, Any]:
    """The JSON of a rows file.

    Args:
        groups: group name -> texts trained/tuned on (hashed here, sorted, duplicates dropped).
        artefact_files: file name -> sha256 of the artefact's own files (ties the rows to them).
        out_of_fold: see :attr:`Provenance.out_of_fold`.
    """
    return {"version": ROWS_VERSION, "artefact": artefact, "policy": policy, "how": how,
            "artefact_files": dict(sorted(artefact_files.items())), "normalisation": NORMALISATION,
            "note": note, "out_of_fold": out_of_fold or {},
            "rows": {g: sorted({row_hash(t) for t in texts}) for g, texts in sorted(groups.items())}}


def write_rows(path: Path, document: dict[str, Any]) -> Path:
    """Write a rows file (sorted keys, one hash a line, trailing newline); returns ``path``."""
    Path(path).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return Path(path)


def read_rows_file(path: Path) -> Provenance:
    """A :class:`Provenance` from a rows file. Raises ValueError for an unreadable or malformed file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = {h: group for group, hashes in doc["rows"].items() for h in hashes}
        return Provenance(doc["artefact"], doc["policy"], doc["how"], rows, doc.get("out_of_fold") or {},
                          str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a rows file: {exc}") from None


def load_provenances(directory: Path) -> list[Provenance]:
    """Every ``*.rows.json`` in ``directory`` (sorted by name); [] when there is none."""
    return [read_rows_file(p) for p in sorted(Path(directory).glob(f"*{ROWS_SUFFIX}"))]


def kind_of(seen: int, n: int) -> str:
    """Label of a figure over ``n`` rows of which ``seen`` were trained/tuned on.

    ``in-sample`` when all were (and n > 0), ``held-out`` when none were, else ``mixed``.
    """
    if seen == 0:
        return "held-out"
    return "in-sample" if seen == n else "mixed"


def quoted_strings(path: Path, min_chars: int = MIN_QUOTE_CHARS) -> list[str]:
    """Double-quoted strings of at least ``min_chars`` characters inside ``#`` comments of ``path``."""
    quotes = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if "#" in line:
            quotes += [q for q in re.findall(r'"([^"]+)"', line[line.index("#"):]) if len(q) >= min_chars]
    return quotes
