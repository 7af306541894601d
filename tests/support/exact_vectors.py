"""Reference vectors of the int8 embedding graph, computed with exact integer products.

``python -m tests.support.exact_vectors`` embeds :data:`TEXTS` with the served encoder
(:func:`proxy.guardrails.detectors.embeddings.embed_layers`, whose ONNX Runtime session sets
:data:`~proxy.guardrails.detectors.embeddings.EXACT_INT8`) and writes :data:`PATH`;
tests/unit/guardrails/detectors/test_embeddings.py compares the encoder of the machine it runs on with them. The
texts are short ones whose vectors a saturating uint8 x int8 product (an x86 CPU without VNNI and
without the setting) changed most (cosine 0.962-0.986 to these; recorded on such a CPU with the
setting). Re-record only when the graph itself changes (its file name is stored).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from proxy.guardrails.detectors.embeddings import EXACTNESS_PROBE

PATH = Path(__file__).resolve().parents[1] / "data" / "embeddings" / "int8_exact_vectors.json"
#: Edge cases of test_embeddings_onnx.py and one prompt of tests/data/xstest/xstest_sample.csv: the
#: encoder's own exactness probe (:data:`~proxy.guardrails.detectors.embeddings.EXACTNESS_PROBE`).
TEXTS = EXACTNESS_PROBE


def record(path: Path = PATH) -> dict:
    """Embed :data:`TEXTS` and write ``{"graph", "texts", "vectors"}`` (vectors: (n, views, 384)
    floats rounded to 7 decimals) to ``path``; returns the document."""
    from proxy.guardrails.detectors import embeddings

    vectors = embeddings.embed_layers(list(TEXTS), remember=False)
    document = {"graph": embeddings.ensure_onnx().name, "texts": list(TEXTS),
                "vectors": [[[round(float(x), 7) for x in view] for view in text] for text in vectors]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    return document


if __name__ == "__main__":
    written = record(Path(sys.argv[1]) if len(sys.argv) > 1 else PATH)
    print(f"{len(written['texts'])} texts x {len(written['vectors'][0])} views -> {PATH}")
