"""config.yaml and policy validation: errors name the file, the key and the expectation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proxy.config import DEMO_KEYS, MIN_KEY_LENGTH, ConfigError, check_exposure, is_loopback, load_config
from proxy.guardrails.schema import SafetyPolicy, load_policies
from tests.support.proxy import ROOT


def write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def base(tmp_path: Path) -> dict:
    return {
        "model_list": [{"model_name": "demo", "litellm_params": {"model": "openai/demo", "mock_response": "hi"}}],
        "policies": str(ROOT / "policies"),
        "auth": {"keys": [{"key": "sk-long-enough-" + "k" * 17, "actor": "a"}]},
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
    (lambda c: c["auth"]["keys"][0].update(role="root"), "auth.keys.0.role: Input should be 'client', 'admin', 'reviewer' or 'metrics'"),
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
    monkeypatch.setenv("MY_PROXY_KEY", "sk-from-the-environment-0123456789")
    monkeypatch.setenv("SONATE_CONFIG", str(path))
    monkeypatch.setenv("SONATE_LEDGER_URL", "redis://ledger.invalid:7000/3")
    loaded = load_config()
    assert loaded.auth.keys[0].key == "sk-from-the-environment-0123456789"
    assert loaded.ledger_url == "redis://ledger.invalid:7000/3"


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


# -- safe defaults (docs/security.md "Safe defaults") ---------------------------------------------

@pytest.mark.parametrize("key", ["sk-sonate", "x" * (MIN_KEY_LENGTH - 1), "os.environ/SHORT_PROXY_KEY"])
def test_short_keys_are_refused_naming_the_actor_not_the_key(tmp_path, monkeypatch, key):
    monkeypatch.setenv("SHORT_PROXY_KEY", "sk-from-env-but-short")
    config = base(tmp_path)
    config["auth"]["keys"] = [{"key": key, "actor": "billing-app", "role": "client"}]
    path = write(tmp_path / "config.yaml", config)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "auth.keys.0" in message and "'billing-app'" in message and f"at least {MIN_KEY_LENGTH}" in message
    assert key not in message and "sk-from-env-but-short" not in message


def test_a_32_character_key_is_accepted(tmp_path):
    config = base(tmp_path)
    config["auth"]["keys"] = [{"key": "k" * MIN_KEY_LENGTH, "actor": "a"}]
    assert load_config(write(tmp_path / "config.yaml", config)).auth.keys[0].key == "k" * MIN_KEY_LENGTH


def test_an_invalid_key_value_is_never_echoed(tmp_path):
    config = base(tmp_path)
    config["auth"]["keys"][0]["key"] = 987654321987654321
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "config.yaml", config))
    assert "auth.keys.0.key" in str(err.value) and "987654321987654321" not in str(err.value)


def test_metrics_need_a_key_by_default(tmp_path):
    assert load_config(write(tmp_path / "config.yaml", base(tmp_path))).server.public_metrics is False
    assert load_config(ROOT / "config.yaml").server.public_metrics is False


def test_the_example_config_keys_are_the_known_demo_keys():
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    literal = {k["key"] for k in raw["auth"]["keys"] if not k["key"].startswith("os.environ/")}
    assert literal and literal <= DEMO_KEYS


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("proxy.example.com", False),
])
def test_demo_keys_are_refused_off_loopback(host, loopback):
    config = load_config(ROOT / "config.yaml")
    assert is_loopback(host) is loopback
    if loopback:
        check_exposure(config, host)
        return
    with pytest.raises(ConfigError) as err:
        check_exposure(config, host)
    assert "actor 'demo-client'" in str(err.value) and "os.environ/" in str(err.value)
    assert not any(key in str(err.value) for key in DEMO_KEYS)


def test_the_container_config_reads_keys_from_the_environment(tmp_path, monkeypatch):
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY deploy/config.container.yaml ./config.yaml" in dockerfile and "COPY policies ./policies" in dockerfile
    assert "COPY config.yaml" not in dockerfile and "SONATE_CONFIG=/app/config.yaml" in dockerfile
    # the image's layout: /app/config.yaml beside /app/policies
    container = tmp_path / "config.yaml"
    container.write_text((ROOT / "deploy" / "config.container.yaml").read_text())
    (tmp_path / "policies").symlink_to(ROOT / "policies")
    for name in ("SONATE_CLIENT_KEY", "SONATE_ADMIN_KEY", "SONATE_METRICS_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="SONATE_CLIENT_KEY is not set"):
        load_config(container)
    for name in ("SONATE_CLIENT_KEY", "SONATE_ADMIN_KEY", "SONATE_METRICS_KEY"):
        monkeypatch.setenv(name, f"sk-{name.lower()}-0123456789abcdefghij")
    config = load_config(container)
    assert config.server.host == "0.0.0.0" and config.server.public_metrics is False
    assert {k.role for k in config.auth.keys} == {"client", "admin", "metrics"}
    check_exposure(config, config.server.host)  # its own keys: serving on every interface is fine
    assert {p.kind for p in load_policies(config.path(config.policies))} >= {"safety", "privacy"}
