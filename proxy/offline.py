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
    # tldextract types ``extract`` as its wrapped function; a TLDExtract instance is the same callable.
    tldextract.extract = offline  # type: ignore[assignment]  # module-level helper used by presidio



#: Imported by :func:`keep_torch_out_of_presidio` while torch and transformers are hidden.
_TORCH_OPTIONAL = ("thinc.compat", "spacy", "presidio_analyzer")


def keep_torch_out_of_presidio() -> None:
    """Import thinc, spaCy and presidio with torch and transformers hidden, so that they load neither.

    ``thinc.compat`` imports torch whenever it is installed, and presidio's NLP-engine package
    imports ``transformers.pipeline`` (which imports torch) whenever transformers is installed,
    each only to offer optional torch-backed engines; the proxy's pipeline (spaCy en_core_web_sm
    for presidio) uses none, and torch costs hundreds of MB of resident memory and seconds of
    start-up. Call before anything imports spaCy or presidio (the server does, at start); a no-op
    when torch or transformers is already imported. Afterwards both import normally, so a
    detector that needs torch (the opt-in detoxify model) still gets it.
    """
    import importlib
    import sys

    if "torch" in sys.modules or "transformers" in sys.modules:
        return
    hidden = ("torch", "transformers")
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # "import torch" raises ImportError
    try:
        for module in _TORCH_OPTIONAL:
            try:
                importlib.import_module(module)
            except ImportError:  # not installed: nothing to keep torch out of
                pass
    finally:
        for name in hidden:
            del sys.modules[name]
