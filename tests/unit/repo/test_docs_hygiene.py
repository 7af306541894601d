"""Docs, docstrings, comments and policy YAML state the contract, not the history.

Fails when a file outside CHANGELOG.md, docs/methodology-changelog.md and docs/decisions/
carries a tracker reference ("issue 13"), a temporary path (``/tmp/…``), or, in prose (Markdown,
YAML and shell comments, Python comments and docstrings), a calendar date or a time of day of a run; and when README.md
exceeds 8,000 bytes. History goes in CHANGELOG.md and docs/decisions/NNNN-title.md.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: Folders and top-level files scanned (relative to the repository root).
ROOTS = ("proxy", "policies", "bench", "scripts", "tests", "deploy", "docs", "examples", "mutation")
TOP_FILES = ("README.md", "config.yaml", "Makefile", "Dockerfile", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".js", ".html", ".toml", ".cfg", ".ini", ".txt"}
#: Where history belongs.
HISTORY = ("CHANGELOG.md", "docs/methodology-changelog.md", "docs/decisions/")

ISSUE = re.compile(r"\bissues? \d+", re.IGNORECASE)
#: /tmp/ or /var/tmp/ as an absolute path (not a folder named tmp inside another path).
TMP = re.compile(r"(?<![\w$}/])/(?:var/)?tmp/")
#: A calendar date not part of an RFC 3339 timestamp and not a command-line argument.
DATE = re.compile(r"(?<!--from )(?<!--to )\b20\d\d-[01]\d-[0-3]\d\b(?![T\d])|\b\d\d:\d\d UTC\b")

#: (file, text of the offending line) pairs that are format examples, not history. Keep short.
ALLOWED = {
    # a shell script's documented default working folder (IMAGE_TEST_DIR overrides it)
    ("scripts/image-test.sh", "/var/tmp/sonate-image-test"),
    # the smoke test's data folder as the process inside the image sees it
    ("scripts/image-test.sh", "--seen-as /tmp/image-test"),
    # input shapes the detectors must stay linear on: a repeated date is the input itself
    ("proxy/guardrails/detectors/context_enhancer.py", '"2020-01-02 " * 550'),
    ("proxy/guardrails/detectors/privacy_context.py", '"2020-01-02"'),
    # an impossible calendar date the claim validator rejects
    ("proxy/evaluation/oracle.py", "2001-13-01"),
}


def _files() -> list[Path]:
    paths = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for folder in ROOTS:
        paths += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    rel = [p for p in paths if not any(p.relative_to(ROOT).as_posix().startswith(h) for h in HISTORY)]
    return sorted(p for p in rel if ".venv" not in p.parts and "__pycache__" not in p.parts)


def _python_prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment and docstring of a Python source."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    # attribute docstrings (#: comments) are comments already
    return out


def _prose(path: Path, text: str) -> list[tuple[int, str]]:
    """Lines a reader takes as prose: docs whole, code only its comments and docstrings."""
    if path.suffix == ".py":
        return _python_prose(text)
    lines = list(enumerate(text.splitlines(), 1))
    if path.suffix in {".md", ".txt", ".html"}:
        return lines
    return [(n, line[line.index("#"):]) for n, line in lines if "#" in line]


def _violations() -> list[str]:
    found = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        if path == Path(__file__):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for pattern, what in ((ISSUE, "tracker reference"), (TMP, "temporary path")):
                if pattern.search(line) and not any(f == rel and s in line for f, s in ALLOWED):
                    found.append(f"{rel}:{n}: {what}: {line.strip()[:100]}")
        if not DATE.search(text):
            continue
        for n, line in _prose(path, text):
            if DATE.search(line) and not any(f == rel and s in line for f, s in ALLOWED):
                found.append(f"{rel}:{n}: date in prose: {line.strip()[:100]}")
    return found


def test_no_history_outside_changelog_and_decisions() -> None:
    found = _violations()
    assert not found, "history belongs in CHANGELOG.md or docs/decisions/:\n" + "\n".join(found)


def test_readme_at_most_8000_bytes() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 8000, f"README.md is {size} bytes (at most 8,000: move detail to docs/)"


def test_patterns_catch_what_they_are_meant_to() -> None:
    assert ISSUE.search("fail closed (issue 13)") and ISSUE.search("Issues 15 and 13")
    assert not ISSUE.search("an issue with 3 parts")
    assert TMP.search("see /tmp/base") and TMP.search("--dir /var/tmp/x")
    assert not TMP.search('"$mnt/tmp/image-test"')
    assert DATE.search("measured 2026-11-26 on") and DATE.search("(2026-11-23)")
    assert DATE.search("a run at 10:40 UTC")
    assert not DATE.search("ts 2026-11-22T03:04:05.123Z") and not DATE.search("--from 2026-11-01")
