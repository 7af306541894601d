"""Export alt-profanity-check's model to plain arrays: ``python -m proxy.guardrails.detectors.toxicity_export OUT.npz``.

Run once in a child process by :func:`proxy.guardrails.detectors.toxicity.profanity_weights` (so the
serving process never imports scikit-learn or SciPy, ~90 MB of resident memory). The package
ships a scikit-learn ``TfidfVectorizer`` and a ``CalibratedClassifierCV(LinearSVC,
method="sigmoid")``; this writes the vectorizer's vocabulary (terms in column order), idf and
English stop words, and the calibrated folds' weights (:func:`~.toxicity.calibrated_linear_weights`).
Exits non-zero when the vectorizer's settings differ from the ones
:class:`~.toxicity.ProfanityCheckToxicity` reproduces (so an upgraded package cannot be
misread silently).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

#: The TfidfVectorizer settings the numpy scorer reproduces (scikit-learn's defaults but stop words and min_df).
EXPECTED = {"analyzer": "word", "binary": False, "lowercase": True, "ngram_range": (1, 1), "norm": "l2",
            "preprocessor": None, "smooth_idf": True, "stop_words": "english", "strip_accents": None,
            "sublinear_tf": False, "token_pattern": r"(?u)\b\w\w+\b", "tokenizer": None, "use_idf": True}


def export(out: Path) -> None:
    """Write the ``.npz`` (terms, idf, stop_words, coef, intercept, a, b) to ``out``; SystemExit on
    an unexpected vectorizer."""
    from profanity_check import profanity_check as package

    from proxy.guardrails.detectors.toxicity import calibrated_linear_weights

    vectorizer = package.vectorizer
    params = vectorizer.get_params()
    wrong = {k: params.get(k) for k, v in EXPECTED.items() if params.get(k) != v}
    if wrong:
        raise SystemExit(f"alt-profanity-check's vectorizer has settings this exporter does not reproduce: {wrong}")
    terms = np.empty(len(vectorizer.vocabulary_), dtype=object)
    for term, column in vectorizer.vocabulary_.items():
        terms[column] = term
    coef, intercept, a, b = calibrated_linear_weights(package.model)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.npz")
    np.savez(tmp, terms=terms.astype(str), idf=np.asarray(vectorizer.idf_, dtype=np.float64),
             stop_words=np.array(sorted(vectorizer.get_stop_words()), dtype=str),
             coef=coef, intercept=intercept, a=a, b=b)
    tmp.replace(out)


if __name__ == "__main__":
    export(Path(sys.argv[1]))
