"""scripts/mutation_report.py: scores per package of the workspace's own scope, and a narrowed report."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("mutation_report", ROOT / "scripts" / "mutation_report.py")
report = importlib.util.module_from_spec(_spec)
sys.modules["mutation_report"] = report  # dataclasses look their module up
_spec.loader.exec_module(report)  # type: ignore[union-attr]


def _mutant(name: str, status: str, path: str) -> report.Survivor:
    return report.Survivor(name, status, f"{path}:3" if status in report.SURVIVING else path, "")


def test_packages_come_from_the_scope_config_and_fall_back_to_the_trust_core(tmp_path) -> None:
    (tmp_path / "setup.cfg").write_text((ROOT / "mutation" / "request-path.cfg").read_text())
    packages = report.scope_packages(tmp_path)
    assert "proxy/server/dialects" in packages and "proxy/server/admission/limits.py" in packages
    assert report.scope_packages(tmp_path / "none") == report.PACKAGES


def test_select_narrows_to_matching_names_and_the_tally_counts_per_module(tmp_path) -> None:
    mutants = {m.name: m for m in (
        _mutant("proxy.server.admission.limits.x_size__mutmut_1", "killed", "proxy/server/admission/limits.py"),
        _mutant("proxy.server.admission.limits.x_size__mutmut_2", "survived", "proxy/server/admission/limits.py"),
        _mutant("proxy.server.dialects.base.x_f__mutmut_1", "timeout", "proxy/server/dialects/base.py"),
        _mutant("proxy.guardrails.stream.x_g__mutmut_1", "killed", "proxy/guardrails/stream.py"))}
    packages = ("proxy/server/dialects", "proxy/server/admission/limits.py", "proxy/guardrails/stream.py")

    chosen = report.select(mutants, ["proxy.server.*.x_size__mutmut_*", "proxy.server.dialects.*"])
    assert sorted(chosen) == sorted(n for n in mutants if not n.startswith("proxy.guardrails"))
    assert report.select(mutants, []) == mutants

    lines = report.score_lines(report.tally(chosen, packages))
    assert lines == ["- `proxy/server/dialects`: 1/1 checked killed (100.0%), 1 mutants; timeout 1",
                     "- `proxy/server/admission/limits.py`: 1/2 checked killed (50.0%), 2 mutants; survived 1"]
