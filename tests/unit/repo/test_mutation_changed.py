"""scripts/mutation_changed.py: the mutmut globs of the in-scope functions a git diff touches, named
as mutmut 3 names their mutants."""

from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
from pathlib import Path

from mutmut.utils.format_utils import make_mutant_key

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("mutation_changed", ROOT / "scripts" / "mutation_changed.py")
changed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(changed)  # type: ignore[union-attr]

CONFIG = """[mutmut]
source_paths = pkg
only_mutate =
    pkg/core/*
    pkg/one.py
do_not_mutate =
    pkg/core/layout.py
"""

CORE = '''LIMIT = 3


def first(x):
    return x + 1


def second(x):
    y = x * 2
    z = y - 1
    return z


class Lane:
    size = 4

    @staticmethod
    def route(n):
        return n > 2

    async def wait(self):
        return None
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg" / "core").mkdir(parents=True)
    (repo / "scope.cfg").write_text(CONFIG)
    (repo / "pkg" / "core" / "lanes.py").write_text(CORE)
    (repo / "pkg" / "core" / "layout.py").write_text("def shown():\n    return 1\n")
    (repo / "pkg" / "two.py").write_text("def other():\n    return 2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return repo


def _glob(module: str, function: str, cls: str | None = None) -> str:
    return f"{module}.{make_mutant_key(function, cls)}__mutmut_*"


def test_only_the_functions_with_changed_or_deleted_lines_in_scope_are_selected(tmp_path) -> None:
    repo = _repo(tmp_path)
    source = (repo / "pkg" / "core" / "lanes.py").read_text()
    source = source.replace("LIMIT = 3", "LIMIT = 4")  # module level: no mutant lives there
    source = source.replace("    z = y - 1\n", "")  # a deletion inside second()
    source = source.replace("return n > 2", "return n >= 2")  # a method of a class
    (repo / "pkg" / "core" / "lanes.py").write_text(source)  # uncommitted edits count
    (repo / "pkg" / "core" / "layout.py").write_text("def shown():\n    return 2\n")  # do_not_mutate
    (repo / "pkg" / "two.py").write_text("def other():\n    return 3\n")  # outside only_mutate
    (repo / "pkg" / "one.py").write_text("def new(a):\n    return a\n\n\ndef newer():\n    return 0\n")  # untracked

    globs = changed.changed_globs(repo, repo / "scope.cfg", "HEAD")

    assert globs == [_glob("pkg.core.lanes", "second"), _glob("pkg.core.lanes", "route", "Lane"),
                     _glob("pkg.one", "new"), _glob("pkg.one", "newer")]


def test_a_committed_change_is_found_against_an_older_ref_and_not_against_head(tmp_path) -> None:
    repo = _repo(tmp_path)
    path = repo / "pkg" / "core" / "lanes.py"
    path.write_text(path.read_text().replace("        return None", "        return 1"))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "wait returns 1")

    assert changed.changed_globs(repo, repo / "scope.cfg", "HEAD~1") == [_glob("pkg.core.lanes", "wait", "Lane")]
    assert changed.changed_globs(repo, repo / "scope.cfg", "HEAD") == []


def test_a_decorator_line_belongs_to_its_function_and_globs_match_mutmut_names(tmp_path) -> None:
    repo = _repo(tmp_path)
    path = repo / "pkg" / "core" / "lanes.py"
    path.write_text(path.read_text().replace("    @staticmethod\n", "    @staticmethod  # routed by size\n"))

    [glob] = changed.changed_globs(repo, repo / "scope.cfg", "HEAD")

    assert fnmatch.fnmatch("pkg.core.lanes.xǁLaneǁroute__mutmut_12", glob)
    assert not fnmatch.fnmatch("pkg.core.lanes.x_first__mutmut_1", glob)


def test_main_narrows_to_given_globs_and_refuses_an_unknown_ref(tmp_path, capsys) -> None:
    repo = _repo(tmp_path)
    path = repo / "pkg" / "core" / "lanes.py"
    path.write_text(path.read_text().replace("x + 1", "x + 2").replace("x * 2", "x * 3"))
    args = ["--root", str(repo), "--config", str(repo / "scope.cfg"), "--ref", "HEAD"]

    assert changed.main([*args, "pkg.core.lanes.x_second*"]) == 0
    assert capsys.readouterr().out.split() == [_glob("pkg.core.lanes", "second")]
    assert changed.main(args[:-1] + ["no-such-ref"]) == 2
