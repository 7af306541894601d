"""Build-time int8 quantization of the exported all-MiniLM-L6-v2 graph (onnx + onnxruntime.quantization).

``python -m proxy.guardrails.detectors.embeddings_quantize OUT`` reads the verified float32 graph
(:func:`proxy.guardrails.detectors.embeddings.ensure_float_onnx`, exported first when missing) and writes
its dynamically quantized copy to ``OUT``: weights of the MatMul/Gather operators as signed int8,
one scale per output channel (``per_channel=True``), activations quantized at run time per call
(``quantize_dynamic``: no calibration data, so nothing of the evaluation sets shapes the graph).
Embeddings from it have cosine 0.99 (mean) to the float32 ones; the classifiers over them
(``artefacts/harm-minilm-svm-v6.*``, ``artefacts/domain-svm.npz``) are trained on its output.

It runs in a child process started by :func:`~proxy.guardrails.detectors.embeddings.ensure_onnx`
(through :func:`~.exported.ensure_export`), so the serving process never imports ``onnx``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def quantize(graph: Path, out: Path) -> None:
    """Write the int8 dynamic quantization of ``graph`` to ``out`` (temporary file renamed)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    quantize_dynamic(str(graph), str(tmp), per_channel=True, weight_type=QuantType.QInt8)
    os.replace(tmp, out)


if __name__ == "__main__":
    from proxy.guardrails.detectors import embeddings

    target = Path(sys.argv[1])
    quantize(embeddings.ensure_float_onnx(target.parent.parent), target)
