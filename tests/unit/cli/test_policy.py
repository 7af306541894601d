"""``sonate policy check`` and ``sonate policy test``, run through the real command line entry point.

``check`` loads no model (exit 0 valid, 1 invalid with file/key/expected messages); ``test`` over a
Continuity-only directory loads no model either, and the one test over the shipped policies (real
detectors) is marked ``models``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from proxy.cli import main
from tests.support.proxy import ROOT

CLIENT = "sk-test-client-0001-padded-to-32-chars"
SUPPORT = "sk-test-support-0011-padded-to-32-chars"


def config_with_sets(tmp_path: Path, policies: Path, **sections) -> Path:
    config = {
        "model_list": [{"model_name": "demo", "litellm_params": {"model": "openai/demo", "api_key": "x",
                                                                 "mock_response": "hi"}}],
        "policies": str(policies),
        "auth": {"keys": [{"key": CLIENT, "actor": "alice"},
                          {"key": SUPPORT, "actor": "support-desk", "team": "support"}]},
        "policy_sets": {"support": {"policies": {"compliance.regulated": {"enabled": False}}}},
        "teams": {"support": {"policy_set": "support"}},
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def shipped(tmp_path: Path) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", target)
    return target


def test_check_accepts_the_shipped_policies_and_prints_the_version(tmp_path, capsys):
    assert main(["policy", "check", str(shipped(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "ok: 4 policies" in out and "policy set default: compliance.regulated" in out
    assert out.strip().splitlines()[-1].startswith("policy_version: sha256:")


def test_check_with_a_config_validates_its_policy_sets(tmp_path, capsys):
    config = config_with_sets(tmp_path, shipped(tmp_path))
    assert main(["policy", "check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "policy set support: continuity.budget, privacy.pii, safety.harm" in out


def test_check_reports_an_invalid_file_with_its_key_and_exits_1(tmp_path, capsys):
    policies = shipped(tmp_path)
    (policies / "safety.yaml").write_text((policies / "safety.yaml").read_text().replace(
        'toxicity: "0.90"', 'toxicity: "high"'))
    assert main(["policy", "check", str(policies)]) == 1
    err = capsys.readouterr().err
    assert err == f"invalid:\n{policies / 'safety.yaml'}: safety.thresholds.toxicity: Input should be a valid " \
                  "decimal (got 'high')\n"


def test_check_reports_an_invalid_detector_block_without_loading_models(tmp_path, capsys):
    policies = shipped(tmp_path)
    path = policies / "compliance.yaml"
    path.write_text(re.sub(r"(?m)^  ambiguous: \w+", "  ambiguous: shrug", path.read_text()))
    assert main(["policy", "check", str(policies)]) == 1
    err = capsys.readouterr().err
    assert f"{policies / 'compliance.yaml'}: detector.ambiguous: Input should be 'escalate', 'notice' or 'allow'" in err


def test_check_reports_an_invalid_policy_set_in_the_config(tmp_path, capsys):
    config = config_with_sets(tmp_path, shipped(tmp_path), policy_sets={
        "support": {"policies": {"safety.harm": {"thresholds": {"toxicity": "high"}}}}})
    assert main(["policy", "check", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err == f"invalid:\n{config}: policy_sets.support.policies.safety.harm.thresholds.toxicity: Input should " \
                  "be a valid decimal (got 'high')\n"


def test_check_of_a_missing_directory_exits_1(tmp_path, capsys):
    assert main(["policy", "check", str(tmp_path / "nope")]) == 1
    assert "policies directory not found" in capsys.readouterr().err


def test_test_explains_a_policy_without_detectors(tmp_path, capsys):
    policies = tmp_path / "policies"
    policies.mkdir()
    shutil.copy(ROOT / "policies" / "continuity.yaml", policies)
    config = config_with_sets(tmp_path, policies, policy_sets={"tight": {"policies": {"continuity.budget": {
        "max_tokens": 5}}}}, teams={"support": {"policy_set": "tight"}})
    prompt = "Please summarise the following long paragraph of text for me, thank you very much."
    assert main(["policy", "test", "--config", str(config), "--prompt", prompt]) == 0
    out = capsys.readouterr().out
    assert "continuity.budget [continuity] allow:" in out and "<= 3000" in out
    assert main(["policy", "test", "--config", str(config), "--policy-set", "tight", "--json", "--prompt", prompt]) == 0
    result = json.loads(capsys.readouterr().out)
    (policy,) = result["policies"]
    assert (result["policy_set"], policy["action"], policy["thresholds"]) == ("tight", "summarize", {"max_tokens": "5"})
    assert result["policy_version"].startswith("sha256:")
    assert result["action"] == "summarize"


def test_test_refuses_an_unknown_set(tmp_path, capsys):
    config = config_with_sets(tmp_path, shipped(tmp_path))
    assert main(["policy", "test", "--config", str(config), "--policy-set", "nope", "--prompt", "hi"]) == 2
    assert "unknown policy set 'nope'" in capsys.readouterr().err


@pytest.mark.models
def test_test_shows_scores_and_thresholds_per_policy_and_set(tmp_path, capsys):
    config = config_with_sets(tmp_path, shipped(tmp_path))
    prompt = "Can I sue my landlord for keeping my security deposit? Email me at ada@example.org."
    assert main(["policy", "test", "--config", str(config), "--json", "--prompt", prompt]) == 0
    default = json.loads(capsys.readouterr().out)
    by_id = {p["policy_id"]: p for p in default["policies"]}
    assert default["action"] == "escalate"
    assert by_id["compliance.regulated"]["action"] == "escalate" and by_id["compliance.regulated"]["scores"]["legal"]
    detector = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    assert by_id["compliance.regulated"]["thresholds"] == {"threshold": f"{detector['threshold']:.4f}",
                                                          "margin": f"{detector['margin']:.4f}"}
    assert by_id["privacy.pii"]["action"] == "mask" and "EMAIL_ADDRESS" in by_id["privacy.pii"]["reason"]
    assert by_id["safety.harm"]["action"] == "allow" and set(by_id["safety.harm"]["thresholds"]) == {
        "toxicity", "harmful_intent"}
    assert main(["policy", "test", "--config", str(config), "--json", "--policy-set", "support", "--prompt", prompt]) == 0
    support = json.loads(capsys.readouterr().out)
    assert support["action"] == "mask" and "compliance.regulated" not in {p["policy_id"] for p in support["policies"]}
