"""Every module of ``proxy/`` imports on its own: a cycle that only works in one import order (a
module that needs a half-initialised partner) fails here, whichever module a command starts from.

One child interpreter imports each module in turn with every ``proxy`` module dropped from
``sys.modules`` before it, so each import starts from nothing of the project (third-party
libraries stay loaded: that keeps the batch to seconds; presidio and spaCy are loaded first without
torch, as every command loads them). The layers themselves are checked by
import-linter (``make lint``, the contracts in pyproject.toml).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import importlib, json, sys, traceback
from proxy import offline
offline.keep_torch_out_of_presidio()  # as every command does first: presidio and spaCy without torch
failed = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "proxy" or m.startswith("proxy.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=-3)
print(json.dumps(failed))
"""


def modules() -> list[str]:
    """Dotted names of every module under proxy/ (``__main__`` runs the CLI: left out)."""
    names = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_modules_are_found() -> None:
    names = modules()
    assert "proxy.server.flow.pipeline" in names and "proxy.receipts" in names and len(names) > 100


def test_every_module_imports_on_its_own() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, *modules()], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())
