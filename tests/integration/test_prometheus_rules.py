"""Prometheus artefacts checked with the real promtool.

- deploy/prometheus/rules.yml passes `promtool check rules` and the unit tests in
  tests/prometheus/*.test.yml (`promtool test rules`: hand-worked KPI values, no-data cases);
- deploy/prometheus/prometheus.yml passes `promtool check config`;
- every counter the rules and the Grafana dashboard read is defined in proxy/server/telemetry/metrics.py;
- the running proxy's real /metrics passes `promtool check metrics`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request

import openai
import pytest
import yaml

from proxy.server.telemetry.metrics import Metrics
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, ROOT

PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "sonate.json"
RULE_TESTS = sorted((ROOT / "tests" / "prometheus").glob("*.test.yml"))


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed (Debian package `prometheus`; `make test` installs it)")
    return subprocess.run([exe, *args], input=stdin, capture_output=True, timeout=120)


def exported_names() -> set[str]:
    """Every series name the proxy exports (counters with ``_total``, histograms' ``_bucket``...)."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        base = family.name
        names.add(base)
        if family.type == "counter":
            names.add(base + "_total")
        if family.type == "histogram":
            names.update({base + "_bucket", base + "_sum", base + "_count"})
    return names


def recorded_names() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {rule["record"] for group in doc["groups"] for rule in group["rules"]}


def test_rules_pass_promtool_check() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"SUCCESS" in result.stdout


def test_rule_unit_tests_pass() -> None:
    assert RULE_TESTS, "no tests/prometheus/*.test.yml"
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_prometheus_config_is_valid_and_loads_the_rules(tmp_path) -> None:
    copy = shutil.copytree(PROM, tmp_path / "prometheus")
    (copy / "sonate-metrics-key").write_text("sk-the-scraper-key-written-by-the-operator")  # not in the repository
    result = promtool("check", "config", str(copy / "prometheus.yml"))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules.yml"]
    assert [job["job_name"] for job in config["scrape_configs"]] == ["sonate"]


def test_recording_rule_names_follow_the_convention() -> None:
    # level:metric:operations (https://prometheus.io/docs/practices/rules/)
    for name in recorded_names():
        assert re.fullmatch(r"job(_[a-z_]+)?:sonate_[a-z0-9_]+:[a-z0-9_]+", name), name
    kpis = {"job:sonate_guardrail_apologies_per_interactions:ratio_rate1h",   # FAR-A (guardrail)
            "job:sonate_unnecessary_apologies_per_interactions:ratio_rate1h",  # FAR-A (adjudicated)
            "job:sonate_receipts_written_per_actions:ratio_rate1h",           # RC
            "job:sonate_guardrail_accuracy:ratio_rate1h",                     # GA
            "job:sonate_ledger_verifications_passed_per_checked:ratio_rate1h",  # LVP
            "job:sonate_evidence_fields_present_per_required:ratio_rate1h",   # AD
            "job:sonate_trust_integrity_score:ratio_rate1h"}                  # TIS
    assert kpis <= recorded_names()


def test_rules_and_dashboard_read_only_series_the_proxy_exports() -> None:
    exported = exported_names()
    doc = yaml.safe_load(RULES.read_text())
    rules_text = "\n".join(rule["expr"] for group in doc["groups"] for rule in group["rules"])
    raw_in_rules = set(re.findall(r"(?<![:\w])(sonate_[a-z0-9_]+)", rules_text))
    assert raw_in_rules, "no raw series found in rules.yml"
    assert raw_in_rules <= exported, f"not in proxy/server/telemetry/metrics.py: {sorted(raw_in_rules - exported)}"

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    recorded = recorded_names()
    for expr in exprs:
        for name in re.findall(r"\b(job[a-z_]*:[a-z0-9_]+:[a-z0-9_]+)", expr):
            assert name in recorded, (name, expr)
        for name in re.findall(r"(?<![:\w])(sonate_[a-z0-9_]+)", expr):
            assert name in exported, (name, expr)
    titles = " ".join(p["title"] for p in dashboard["panels"])
    for kpi in ("TIS", "FAR-A", "LVP", "RC", "GA", "AD", "Cost", "Latency", "triggers"):
        assert kpi in titles, kpi


def test_real_metrics_output_passes_promtool_check_metrics(proxy) -> None:
    client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
    client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "Hello there"}])
    scrape = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(scrape, timeout=10) as response:
        body = response.read()
    assert b"sonate_interactions_total{" in body and b"sonate_request_duration_seconds_bucket{" in body
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
