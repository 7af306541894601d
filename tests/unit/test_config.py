"""config.yaml and policy validation: errors name the file, the key and the expectation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proxy.config import ConfigError, load_config
from proxy.guardrails.schema import SafetyPolicy, load_policies
from tests.support.proxy import ROOT


def write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def base(tmp_path: Path) -> dict:
    return {
        "model_list": [{"model_name": "demo", "litellm_params": {"model": "openai/demo", "mock_response": "hi"}}],
        "policies": str(ROOT / "policies"),
        "auth": {"keys": [{"key": "sk-long-enough", "actor": "a"}]},
    }


def test_repository_config_and_policies_are_valid():
    config = load_config(ROOT / "config.yaml")
    assert config.route("demo").is_demo and config.route("demo").provider == "demo"
    assert config.ledger_url == "sqlite:///" + str((ROOT / "var" / "ledger.db").resolve())
    kinds = {p.kind for p in load_policies(config.path(config.policies))}
    assert kinds == {"safety", "privacy", "compliance", "continuity"}


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["server"].update(port=70000) if "server" in c else c.update(server={"port": 70000}),
     "server.port: Input should be less than or equal to 65535"),
    (lambda c: c.update(ledger={"url": "mysql://x"}), "ledger.url: Value error, expected sqlite:///path or redis://"),
    (lambda c: c["model_list"][0]["litellm_params"].pop("model"), "model_list.0.litellm_params: Value error, litellm_params.model is required"),
    (lambda c: c.update(surprise=1), "surprise: Extra inputs are not permitted"),
    (lambda c: c.pop("auth"), "auth: Field required"),
    (lambda c: c["auth"]["keys"][0].update(role="root"), "auth.keys.0.role: Input should be 'client', 'admin' or 'reviewer'"),
])
def test_invalid_config_names_file_key_and_expectation(tmp_path, mutate, expected):
    config = base(tmp_path)
    mutate(config)
    path = write(tmp_path / "config.yaml", config)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_secrets_and_environment_overrides(tmp_path, monkeypatch):
    config = base(tmp_path)
    config["auth"]["keys"][0]["key"] = "os.environ/MY_PROXY_KEY"
    path = write(tmp_path / "config.yaml", config)
    with pytest.raises(ConfigError, match="MY_PROXY_KEY is not set"):
        load_config(path)
    monkeypatch.setenv("MY_PROXY_KEY", "sk-from-the-environment")
    monkeypatch.setenv("SONATE_CONFIG", str(path))
    monkeypatch.setenv("SONATE_LEDGER_URL", "redis://127.0.0.1:6379/3")
    loaded = load_config()
    assert loaded.auth.keys[0].key == "sk-from-the-environment"
    assert loaded.ledger_url == "redis://127.0.0.1:6379/3"


def test_invalid_policy_names_file_and_key(tmp_path):
    (tmp_path / "safety.yaml").write_text(yaml.safe_dump(
        {"id": "s", "kind": "safety", "stages": ["input", "sideways"], "thresholds": {"toxicity": "0.9"}}))
    with pytest.raises(ConfigError) as err:
        load_policies(tmp_path)
    assert "safety.yaml: safety.stages.1: Input should be 'input' or 'output'" in str(err.value)
    (tmp_path / "safety.yaml").write_text("id: s\nkind: telepathy\nstages: [input]\n")
    with pytest.raises(ConfigError, match="does not match any of the expected tags"):
        load_policies(tmp_path)


def test_policy_thresholds_are_exact_decimals(tmp_path):
    (tmp_path / "s.yaml").write_text("id: s\nkind: safety\nstages: [input]\nthresholds: {toxicity: '0.85'}\n")
    (policy,) = load_policies(tmp_path)
    assert isinstance(policy, SafetyPolicy) and str(policy.thresholds["toxicity"]) == "0.85"


def test_serve_refuses_an_invalid_config_without_traceback(tmp_path):
    config = base(tmp_path)
    config["server"] = {"port": "eighty"}
    path = write(tmp_path / "config.yaml", config)
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2
    assert f"{path}: server.port: Input should be a valid integer" in done.stderr
    assert "Traceback" not in done.stderr
