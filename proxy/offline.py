"""Process-wide settings that keep start-up and requests free of network fetches.

Must be imported before litellm, presidio (tldextract) or Hugging Face code:
- litellm fetches its model price map at import unless LITELLM_LOCAL_MODEL_COST_MAP is set;
- tldextract (used by presidio's URL recognizer) fetches the public suffix list unless
  told to use its bundled snapshot;
- Hugging Face libraries look up the hub unless HF_HUB_OFFLINE=1;
- presidio's device detector imports torch (hundreds of MB of RSS, seconds of start-up) to probe
  for CUDA unless PRESIDIO_DEVICE names the device: the proxy runs its NLP on the CPU.
Values already set by the user win (``setdefault``), so the product still works online.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PRESIDIO_DEVICE", "cpu")
# tldextract: an empty suffix-list URL tuple makes it use the snapshot bundled in the wheel.
os.environ.setdefault("TLDEXTRACT_CACHE", os.path.expanduser("~/.cache/sonate/tldextract"))


def configure_tldextract() -> None:
    """Point tldextract's default extractor at its bundled public-suffix snapshot (no fetch)."""
    try:
        import tldextract
        import tldextract.tldextract as _t
    except ImportError:  # presidio not installed: nothing to configure
        return
    offline = tldextract.TLDExtract(suffix_list_urls=(), fallback_to_snapshot=True)
    _t.TLD_EXTRACTOR = offline
    tldextract.extract = offline  # module-level helper used by presidio


def keep_torch_out_of_spacy() -> None:
    """Import thinc (spaCy's ML layer) with torch hidden, so that it does not load torch.

    ``thinc.compat`` imports torch whenever it is installed, only to offer torch-backed layers; the
    proxy's spaCy pipeline (en_core_web_sm, for presidio) uses none, and loading torch costs
    hundreds of MB of resident memory and seconds of start-up. Call before spaCy/presidio are
    imported (the server does, at start); a no-op when thinc or torch is already imported, so a
    detector that needs torch (the opt-in detoxify model) still imports it normally afterwards.
    """
    import sys

    if "thinc.compat" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # "import torch" raises ImportError
    try:
        import thinc.compat  # noqa: F401
    except ImportError:  # spaCy not installed
        pass
    finally:
        del sys.modules["torch"]
