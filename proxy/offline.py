"""Process-wide settings that keep start-up and requests free of network fetches.

Must be imported before litellm, presidio (tldextract) or Hugging Face code:
- litellm fetches its model price map at import unless LITELLM_LOCAL_MODEL_COST_MAP is set;
- tldextract (used by presidio's URL recognizer) fetches the public suffix list unless
  told to use its bundled snapshot;
- Hugging Face libraries look up the hub unless HF_HUB_OFFLINE=1.
Values already set by the user win (``setdefault``), so the product still works online.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
