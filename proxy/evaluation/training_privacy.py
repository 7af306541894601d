"""Rows file of the privacy context rules: which development rows they were tuned on.

The personal-data context rule (``detectors/privacy_context.py``), the address-block recognizer
(``detectors/privacy_address.py``) and the name-slot, travel-place, phone and licence patterns of
``policies/privacy.yaml`` were written while reading the errors of the detector on the whole
development split: every presidio row (``presidio_dev``), and the ordinary prompts it masked
(alpaca seed tasks, TruthfulQA questions outside the regulated categories). Nothing was fitted
numerically, so there is no out-of-fold figure: every development figure of the privacy policy
is in-sample, and the held-out split is the measure.

:func:`privacy_context_rows` writes ``artefacts/privacy-context.rows.json`` (format:
:mod:`proxy.evaluation.provenance`).
"""

from __future__ import annotations

from pathlib import Path

from proxy.evaluation import provenance
from proxy.evaluation.data import REGULATED_CATEGORIES, DataError, load_builtin

ARTEFACT = "privacy-context"
ROWS_PATH = Path(__file__).resolve().parents[1] / "guardrails" / "artefacts" / f"{ARTEFACT}{provenance.ROWS_SUFFIX}"


def tuning_groups(data_dir: Path) -> dict[str, list[str]]:
    """Group name -> texts of the development rows read while tuning the privacy context rules.

    Raises DataError (from :func:`load_builtin`) for a missing or malformed data directory, or
    when it has no presidio rows.
    """
    items, _ = load_builtin(Path(data_dir))
    groups = {
        "presidio_dev": [i.text for i in items if i.dataset == "presidio"],
        "alpaca_seed": [i.text for i in items if i.dataset == "alpaca_seed"],
        "truthfulqa_general": [i.text for i in items if i.dataset == "truthfulqa"
                               and i.category not in REGULATED_CATEGORIES],
    }
    if not groups["presidio_dev"]:
        raise DataError(f"{data_dir}: no presidio rows")
    return groups


def privacy_context_rows(data_dir: Path, out: Path = ROWS_PATH) -> dict:
    """Write the rows file of the privacy context rules; returns the document written."""
    document = provenance.rows_document(
        ARTEFACT, "privacy", "tuned", tuning_groups(data_dir), artefact_files={},
        note="context rule, address blocks and name/place/phone/licence patterns written while "
             "reading the detector's errors on every presidio development row and the ordinary prompts "
             "(alpaca seed, TruthfulQA general) it masked; no numeric fit, no out-of-fold figure")
    provenance.write_rows(out, document)
    return document
