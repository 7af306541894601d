"""scripts/mutation_verdicts.py: mutmut verdicts carried between workspaces through the checked-in store,
restored only where the mutant's function is unchanged, and read back by mutmut's own meta loader."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("mutation_verdicts", ROOT / "scripts" / "mutation_verdicts.py")
verdicts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdicts)  # type: ignore[union-attr]

SOURCE = "proxy/kpi/stats.py"


def _meta(workdir: Path, codes: dict[str, int | None], hashes: dict[str, str]) -> Path:
    path = workdir / "mutants" / f"{SOURCE}.meta"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": hashes,
                                "type_check_error_by_key": {}, "durations_by_key": {},
                                "estimated_durations_by_key": {}}))
    return path


def _store(path: Path, hashes: dict[str, str], codes: dict[str, int]) -> Path:
    path.write_text(json.dumps({SOURCE: {"hash_by_function_name": hashes, "exit_code_by_key": codes}}))
    return path


def _codes(workdir: Path) -> dict[str, int | None]:
    return json.loads((workdir / "mutants" / f"{SOURCE}.meta").read_text())["exit_code_by_key"]


def test_save_keeps_only_decided_mutants_and_restore_feeds_mutmut(tmp_path, monkeypatch) -> None:
    first, store = tmp_path / "first", tmp_path / "verdicts.json"
    _meta(first, {"proxy.kpi.stats.x_wilson__mutmut_1": 1, "proxy.kpi.stats.x_wilson__mutmut_2": 0,
                  "proxy.kpi.stats.xǁPoolǁmean__mutmut_1": None}, {"x_wilson": "aaa", "xǁPoolǁmean": "bbb"})
    assert verdicts.save(first, store) == 2
    assert json.loads(store.read_text()) == {SOURCE: {
        "hash_by_function_name": {"x_wilson": "aaa"},
        "exit_code_by_key": {"proxy.kpi.stats.x_wilson__mutmut_1": 1, "proxy.kpi.stats.x_wilson__mutmut_2": 0}}}

    fresh = tmp_path / "fresh"  # no mutants/ yet: what a new machine starts from
    assert verdicts.restore(fresh, store) == 2
    monkeypatch.chdir(fresh)
    data = SourceFileMutationData(path=SOURCE)
    data.load()  # mutmut's own loader accepts the file (every key it requires is there)
    assert data.exit_code_by_key == {"proxy.kpi.stats.x_wilson__mutmut_1": 1, "proxy.kpi.stats.x_wilson__mutmut_2": 0}
    assert data.hash_by_function_name == {"x_wilson": "aaa"}


def test_restore_skips_changed_functions_and_keeps_the_workspaces_own_verdicts(tmp_path) -> None:
    store = _store(tmp_path / "verdicts.json", {"x_wilson": "old", "x_bootstrap": "same"},
                   {"proxy.kpi.stats.x_wilson__mutmut_1": 0, "proxy.kpi.stats.x_bootstrap__mutmut_1": 1,
                    "proxy.kpi.stats.x_bootstrap__mutmut_2": 1})
    work = tmp_path / "work"
    _meta(work, {"proxy.kpi.stats.x_wilson__mutmut_1": None, "proxy.kpi.stats.x_bootstrap__mutmut_1": None,
                 "proxy.kpi.stats.x_bootstrap__mutmut_2": 0}, {"x_wilson": "new", "x_bootstrap": "same"})
    assert verdicts.restore(work, store) == 1
    assert _codes(work) == {"proxy.kpi.stats.x_wilson__mutmut_1": None,  # its function changed: re-run
                            "proxy.kpi.stats.x_bootstrap__mutmut_1": 1,  # restored
                            "proxy.kpi.stats.x_bootstrap__mutmut_2": 0}  # the workspace's own verdict wins


def test_save_merges_a_later_run_into_the_store(tmp_path) -> None:
    store = _store(tmp_path / "verdicts.json", {"x_wilson": "h1", "x_bootstrap": "b1"},
                   {"proxy.kpi.stats.x_wilson__mutmut_1": 0, "proxy.kpi.stats.x_wilson__mutmut_2": 1,
                    "proxy.kpi.stats.x_bootstrap__mutmut_1": 1})
    work = tmp_path / "work"  # re-checked wilson_1 (now killed), did not check wilson_2; bootstrap changed
    _meta(work, {"proxy.kpi.stats.x_wilson__mutmut_1": 1, "proxy.kpi.stats.x_wilson__mutmut_2": None,
                 "proxy.kpi.stats.x_bootstrap__mutmut_1": None}, {"x_wilson": "h1", "x_bootstrap": "b2"})
    assert verdicts.save(work, store) == 2
    assert json.loads(store.read_text())[SOURCE]["exit_code_by_key"] == {
        "proxy.kpi.stats.x_wilson__mutmut_1": 1, "proxy.kpi.stats.x_wilson__mutmut_2": 1}
