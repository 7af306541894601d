"""Carry mutmut verdicts between machines: mutation/verdicts.json, checked in.

mutmut 3 caches each mutant's exit code in its scratch workspace (``mutants/<file>.meta``, next to
the hash of every mutated function) and keeps a verdict while its function's hash is unchanged.
The workspace lives in a temporary directory, so on a fresh machine ``make mutation`` would start
from nothing: about three hours for the trust core on two CPUs. This script keeps the verdicts in
the repository instead:

    python scripts/mutation_verdicts.py restore --workdir W --store mutation/verdicts.json
        before ``mutmut run``: write the stored verdicts into W's ``mutants/*.meta`` (a mutant
        whose verdict W already has keeps it); mutmut then drops every verdict whose function's
        hash changed when it regenerates the mutants (mutmut/__main__.py, create_mutants_for_file)
    python scripts/mutation_verdicts.py save --workdir W --store mutation/verdicts.json
        after it: merge W's verdicts into the store (W wins; a stored verdict stays when W has
        none for it and the function's hash is the same)

Store format (JSON, sorted keys): ``{"<source path>": {"hash_by_function_name": {function: hash},
"exit_code_by_key": {mutant: exit code}}}``, the two fields of mutmut's ``.meta`` that carry the
verdicts; only mutants with a verdict are stored. A verdict stands for the tests of its run: after
adding a test that kills a stored survivor, re-check it by name (``make mutation MUTANTS=<name>``:
mutmut re-runs a mutant named on the command line).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: The keys mutmut 3.8's SourceFileMutationData.load requires in a ``.meta`` file.
META_KEYS = ("exit_code_by_key", "hash_by_function_name", "type_check_error_by_key", "durations_by_key",
             "estimated_durations_by_key")


def _function(mutant: str) -> str:
    """The mangled function name a mutant belongs to, as mutmut keys ``hash_by_function_name``
    (``proxy.kpi.stats.x_wilson__mutmut_3`` → ``x_wilson``)."""
    return mutant.rpartition(".")[2].rpartition("__mutmut_")[0]


def _metas(workdir: Path) -> dict[str, Path]:
    """Source path (``proxy/kpi/stats.py``) → its mutmut ``.meta`` file in ``workdir``."""
    root = workdir / "mutants"
    return {str(p.relative_to(root))[: -len(".meta")]: p for p in sorted(root.rglob("*.py.meta"))}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def restore(workdir: Path, store_path: Path) -> int:
    """Write the store's verdicts into ``workdir``'s meta files; returns how many were written."""
    store, written = _load(store_path), 0
    for source, stored in store.items():
        meta_path = workdir / "mutants" / f"{source}.meta"
        meta = {key: {} for key in META_KEYS} | _load(meta_path)
        hashes = meta["hash_by_function_name"]
        codes = meta["exit_code_by_key"]
        for mutant, code in stored["exit_code_by_key"].items():
            function = _function(mutant)
            stored_hash = stored["hash_by_function_name"][function]
            # a fresh workspace takes the stored hash (mutmut compares it when it regenerates mutants)
            if codes.get(mutant) is None and hashes.setdefault(function, stored_hash) == stored_hash:
                codes[mutant] = code
                written += 1
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return written


def save(workdir: Path, store_path: Path) -> int:
    """Merge ``workdir``'s verdicts into the store file; returns how many verdicts it holds."""
    store = _load(store_path)
    for source, meta_path in _metas(workdir).items():
        meta = _load(meta_path)
        hashes, codes = meta.get("hash_by_function_name", {}), meta.get("exit_code_by_key", {})
        if not codes:
            continue
        old = store.get(source, {"hash_by_function_name": {}, "exit_code_by_key": {}})
        merged = {m: c for m, c in old["exit_code_by_key"].items()
                  if m in codes and codes[m] is None
                  and old["hash_by_function_name"].get(_function(m)) == hashes.get(_function(m))}
        merged.update({m: c for m, c in codes.items() if c is not None})
        if merged:
            store[source] = {"hash_by_function_name": {f: hashes[f] for f in sorted({_function(m) for m in merged})},
                             "exit_code_by_key": dict(sorted(merged.items()))}
    store_path.write_text(json.dumps(dict(sorted(store.items())), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return sum(len(v["exit_code_by_key"]) for v in store.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("restore", "save"))
    parser.add_argument("--workdir", type=Path, required=True, help="scripts/mutation.sh's scratch workspace")
    parser.add_argument("--store", type=Path, required=True, help="the checked-in verdicts (mutation/verdicts.json)")
    args = parser.parse_args()
    if args.action == "restore":
        print(f"mutation verdicts: {restore(args.workdir, args.store)} restored from {args.store}")
    else:
        print(f"mutation verdicts: {save(args.workdir, args.store)} kept in {args.store}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
