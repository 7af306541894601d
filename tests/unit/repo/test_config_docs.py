"""docs/configuration.md is what scripts/gen_config_docs.py writes from proxy/config.py's models."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import BaseModel

from proxy import config as cfg

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _keys(model: type[BaseModel], path: str = "") -> list[str]:
    """Every config key path of ``model``, nested sections included."""
    out = []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        key = f"{path}.{name}" if path else name
        out.append(key)
        child = gen._nested(info.annotation)
        if child is not None and child is not model:
            origin = getattr(info.annotation, "__origin__", None)
            out += _keys(child, key + ("[]" if origin is list else ".<name>" if origin is dict else ""))
    return out


def test_committed_page_equals_the_generated_one() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/configuration.md is stale: run python scripts/gen_config_docs.py"


def test_every_field_of_the_models_has_a_row() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    keys = _keys(cfg.Config)
    assert "server.limits.max_json_depth" in keys and "auth.keys[].role" in keys
    missing = [k for k in keys if f"| `{k}` |" not in page]
    assert not missing, f"keys without a row: {missing}"


def test_defaults_and_bounds_come_from_the_models() -> None:
    page = gen.render()
    port = cfg.ServerConfig.model_fields["port"]
    assert f"| `server.port` | int | `{port.default}` | ≥ 0, ≤ 65535 |" in page
    assert "| `ledger.on_unavailable` | `fail_closed` \\| `spool` | `\"fail_closed\"` |" in page
    assert "| `auth.keys` | list[ApiKey] | required | min length 1 |" in page


def test_check_mode_reports_a_stale_page(tmp_path: Path, monkeypatch) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# old\n", encoding="utf-8")
    monkeypatch.setattr(gen, "PAGE", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == gen.render()
