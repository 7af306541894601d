"""The mutmut globs of the functions in a mutation scope that changed since a git ref.

``make mutation CHANGED=<ref>`` (scripts/mutation.sh, MUTATION_CHANGED) runs only these, so a change
to the request path is mutation-tested in minutes instead of the whole scope's hours. Prints one
glob per line on stdout, ``<module>.<mangled function>__mutmut_*`` as mutmut 3 names mutants
(``proxy.server.admission.limits.x_screen_size__mutmut_*``,
``proxy.guardrails.stream.xǁStreamGuardǁfeed__mutmut_*``), and a summary on stderr:

    python scripts/mutation_changed.py --config mutation/request-path.cfg --ref main
    python scripts/mutation_changed.py --config ... --ref HEAD~1 'proxy.guardrails.*'   # narrowed

Changed means: the lines ``git diff <ref>`` reports (commits since the ref and uncommitted edits)
and every line of a file git does not track yet. A function is selected when one of its lines
(decorators included) changed, or when lines were deleted inside it. mutmut 3 mutates top-level
functions and the methods of top-level classes; a change to module-level code (a constant, an
import) selects nothing, since no mutant lives there. Files outside the scope's ``only_mutate``
globs, or listed in its ``do_not_mutate``, are ignored. Exit status 2 when git cannot resolve the ref.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,(?P<count>\d+))? @@")
SEPARATOR = "ǁ"  # mutmut.mutation.trampoline_templates.CLASS_NAME_SEPARATOR


def scope_globs(config: Path) -> tuple[list[str], list[str]]:
    """(only_mutate, do_not_mutate) path globs of a mutmut ``setup.cfg``-style file."""
    parser = configparser.ConfigParser()
    parser.read(config, encoding="utf-8")
    section = parser["mutmut"]

    def lines(key: str) -> list[str]:
        return [line.strip() for line in section.get(key, "").splitlines() if line.strip()]

    return lines("only_mutate"), lines("do_not_mutate")


def in_scope(path: str, only: list[str], excluded: list[str]) -> bool:
    """Whether mutmut mutates ``path`` under these globs (fnmatch, ``*`` spans ``/`` as in mutmut)."""
    return (path.endswith(".py") and any(fnmatch.fnmatch(path, g) for g in only)
            and not any(fnmatch.fnmatch(path, g) for g in excluded))


def changed_lines(diff: str) -> dict[str, set[int]]:
    """New-side line numbers touched per file in a ``git diff --unified=0`` text. A pure deletion
    (``+n,0``) marks line n, the line after which the deleted lines stood."""
    lines: dict[str, set[int]] = {}
    current: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
            if current is not None:
                lines.setdefault(current, set())
            continue
        hunk = HUNK.match(line)
        if hunk and current is not None:
            start, count = int(hunk["start"]), int(hunk["count"] or 1)
            lines[current].update(range(start, start + count) if count else {max(start, 1)})
    return lines


def functions(source: str) -> list[tuple[str, int, int]]:
    """(mangled name, first line, last line) of the top-level functions and of the methods of
    top-level classes, as mutmut 3 mangles them (``x_name``, ``xǁClassǁname``)."""
    found = []
    tree = ast.parse(source)

    def span(node: ast.AST) -> tuple[int, int]:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])  # type: ignore[attr-defined]
        return first, node.end_lineno or node.lineno  # type: ignore[attr-defined]

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((f"x_{node.name}", *span(node)))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((f"x{SEPARATOR}{node.name}{SEPARATOR}{item.name}", *span(item)))
    return found


def module_name(path: str) -> str:
    """``proxy/server/dialects/base.py`` → ``proxy.server.dialects.base`` (``__init__`` dropped)."""
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def changed_globs(root: Path, config: Path, ref: str) -> list[str]:
    """The mutant globs of every in-scope function with a changed line since ``ref``."""
    only, excluded = scope_globs(config)
    diff = subprocess.run(["git", "-C", str(root), "diff", "--unified=0", "--no-color", "--no-ext-diff", ref, "--"],
                          capture_output=True, text=True, check=True).stdout
    touched = changed_lines(diff)
    untracked = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                               capture_output=True, text=True, check=True).stdout.split()
    globs = []
    for path in sorted(set(touched) | set(untracked)):
        file = root / path
        if not in_scope(path, only, excluded) or not file.is_file():
            continue
        everything = path in untracked
        for name, first, last in functions(file.read_text(encoding="utf-8")):
            if everything or any(first <= n <= last for n in touched.get(path, ())):
                globs.append(f"{module_name(path)}.{name}__mutmut_*")
    return globs


def main(argv: list[str] | None = None) -> int:
    """Print the globs; 2 when the ref is unknown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the scope's mutmut configuration")
    parser.add_argument("--ref", required=True, help="git ref to compare the working tree with (main, HEAD~1, ...)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("within", nargs="*", help="mutant-name globs; keep only functions one of them matches")
    args = parser.parse_args(argv)
    try:
        globs = changed_globs(args.root, args.config, args.ref)
    except subprocess.CalledProcessError as error:
        print(f"git cannot compare with {args.ref!r}: {error.stderr.strip()}", file=sys.stderr)
        return 2
    if args.within:
        globs = [g for g in globs if any(fnmatch.fnmatch(g[: -len("*")] + "1", w) for w in args.within)]
    print(f"mutation: {len(globs)} changed functions in scope since {args.ref}", file=sys.stderr)
    for glob in globs:
        print(glob)
    return 0


if __name__ == "__main__":
    sys.exit(main())
