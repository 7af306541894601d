"""`sonate eval suite` end to end: the example suite (examples/suite, 23 cases + 23 jailbreak prompts)
through the real proxy (subprocess, SQLite ledger) on two routes — the stub provider (an oracle that
answers each case's ground truth) and the demo route — judged by the stub judge over HTTP, via the
real CLI. Checks: receipts behind every result, the values against independent computations, the
JSON/Markdown/HTML outputs (the HTML screenshotted in headless chromium under its CSP), and the
regression gate: quiet on an unchanged rerun, exit 1 on a seeded drop."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from tests.support.forked import sonate
from tests.support.ledger import sqlite_url
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, ROOT, RunningProxy, start_proxy, stop_proxy
from tests.support.stub_judge import StubJudge

EXAMPLE = ROOT / "examples" / "suite" / "support-assistant.yaml"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def oracle() -> dict[str, str]:
    """The example's user texts → their ground truth (the stub provider's answers)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    return {c["input"]: c["ground_truth"] for c in raw["cases"] if "input" in c and "ground_truth" in c}


@pytest.fixture(scope="module")
def stub() -> StubJudge:
    server = StubJudge().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def suite_proxy(tmp_path_factory: pytest.TempPathFactory, stub: StubJudge) -> RunningProxy:
    directory = tmp_path_factory.mktemp("suite-proxy")
    running = start_proxy(directory, stub.url, sqlite_url(directory / "ledger.db"))
    yield running
    stop_proxy(running)


def sonate_suite(proxy: RunningProxy, stub: StubJudge, out: Path, baseline: Path, *extra: str,
                 models: tuple[str, ...] = ("stub",)) -> subprocess.CompletedProcess:
    args = ["eval", "suite", str(EXAMPLE), "--proxy", proxy.url,
            "--api-key", CLIENT_KEY, "--metrics-key", ADMIN_KEY, "--judge-model", "openai/stub-judge",
            "--judge-api-base", stub.url, "--judge-api-key", "judge-secret", "--out", str(out),
            "--baseline", str(baseline), "--no-progress", *extra]
    for model in models:
        args += ["--model", model]
    return sonate(*args, timeout=900)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory, suite_proxy: RunningProxy, stub: StubJudge):
    """One run of the example on the stub (oracle) and demo routes, stored as the baseline."""
    directory = tmp_path_factory.mktemp("suite-run")
    stub.answers.update(oracle())
    done = sonate_suite(suite_proxy, stub, directory / "out", directory / "baseline.json", "--update-baseline",
                        models=("stub", "demo"))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((directory / "out" / "result.json").read_text())
    return done, result, directory


def test_every_case_has_receipts_judges_and_five_dimensions(example_run, suite_proxy: RunningProxy) -> None:
    _, result, directory = example_run
    assert result["schema"] == "sonate.eval-suite/v1" and list(result["models"]) == ["stub", "demo"]
    assert result["judge"]["model"] == "openai/stub-judge"
    assert result["judge"]["templates"]["grounding"] == "groundedness-v1"
    baseline = json.loads((directory / "baseline.json").read_text())
    assert set(baseline["models"]) == {"stub", "demo"} and "exact_match" in baseline["models"]["stub"]
    for block in result["models"].values():
        cases = block["cases"]
        assert len(cases) == 46 and all(c["error"] is None for c in cases)
        assert {d for c in cases for d in c["dimensions"]} == {"correctness", "determinism", "latency", "cost",
                                                               "safety"}
        for case in cases:
            assert case["receipt_ids"] and all(r and r.startswith("rcpt_") for r in case["receipt_ids"])
            for name, block_ in case["metrics"].items():
                if name in ("semantic_match", "grounding", "jailbreak"):
                    assert block_["template"] == result["judge"]["templates"][name]
                    assert block_["judge_model"] == "openai/stub-judge"
        sample = cases[0]["receipt_ids"][0]
        got = httpx.get(f"{suite_proxy.v1}/receipts/{sample}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert got.status_code == 200 and got.json()["receipt_id"] == sample
        assert len(block["summary"]["metrics"]) == 10  # every case metric was exercised


def test_values_match_independent_computations(example_run) -> None:
    import litellm

    _, result, _ = example_run
    stub = {c["id"]: c for c in result["models"]["stub"]["cases"]}
    demo = {c["id"]: c for c in result["models"]["demo"]["cases"]}
    raw = {c["id"]: c for c in yaml.safe_load(EXAMPLE.read_text())["cases"]}
    # correctness: the oracle's answers match exactly; the demo model's never do. "France" in a general
    # question identifies nobody: the question reaches the model as written
    assert stub["capital-france"]["calls"][0]["action"] == "allow"
    for cid in ("capital-france", "arithmetic", "red-planet", "gold-symbol", "austen", "moon-landing-date"):
        assert stub[cid]["output"] == raw[cid]["ground_truth"]
        assert stub[cid]["metrics"]["exact_match"]["value"] == 1.0 and demo[cid]["metrics"]["exact_match"]["value"] == 0.0
    for cid in ("order-json", "moon-landing-date", "yes-no"):
        assert stub[cid]["metrics"]["schema"]["value"] == 1.0 and demo[cid]["metrics"]["schema"]["value"] == 0.0
    # grounding (3 samples): share of the answer's words found in the context, per the stub judge's rule
    for cid in ("refund-window", "shipping-time", "opening-hours"):
        answer, context = stub[cid]["output"], raw[cid]["context"]
        expected = len(words(answer) & words(context)) / len(words(answer))
        g = stub[cid]["metrics"]["grounding"]
        assert g["value"] == pytest.approx(expected) and g["samples"] == [pytest.approx(expected)] * 3
    # semantic match on the demo route: share of the reference's words in "Hello from the demo model."
    ref = raw["boiling-point"]["ground_truth"]
    assert demo["boiling-point"]["metrics"]["semantic_match"]["value"] == pytest.approx(
        len(words(ref) & words("Hello from the demo model.")) / len(words(ref)))
    # determinism: 5 runs, identical hashes; stability 1.0
    for cid in ("det-summary", "det-sentiment", "det-steps"):
        assert len(stub[cid]["calls"]) == 6 and stub[cid]["metrics"]["consistency"]["value"] == 1.0
        assert stub[cid]["metrics"]["stability"]["value"] == 1.0
    # safety: the proxy refuses the harmful prompts on both routes
    for cid in ("harmful-explosive", "harmful-poison"):
        assert demo[cid]["metrics"]["refusal"]["value"] == 1.0 and demo[cid]["calls"][0]["action"] == "refuse"
    assert result["models"]["demo"]["summary"]["safety"]["jailbreak_attempts"] == 23
    # latency: percentiles of every recorded call; overhead measured for every call
    summary = result["models"]["stub"]["summary"]
    ms = [call["ms"] for c in stub.values() for call in c["calls"]]
    assert summary["latency"]["end_to_end"]["p95"] == pytest.approx(float(np.percentile(ms, 95)))
    assert summary["latency"]["end_to_end"]["p50"] == pytest.approx(float(np.percentile(ms, 50)))
    assert summary["latency"]["overhead"]["n"] == len(ms) and summary["latency"]["overhead_exact"]
    assert all(0 < call["overhead_ms"] <= call["ms"] for c in stub.values() for call in c["calls"])
    assert summary["latency"]["ttft"]["n"] == sum(1 for c in stub.values() if c["calls"][0]["ttft_ms"] is not None)
    # cost: the provider's usage priced with litellm's map read directly
    price = litellm.model_cost["gpt-4o-mini"]
    for c in stub.values():
        for call in c["calls"]:
            u = call["usage"]
            assert call["usd"] == pytest.approx(u["prompt_tokens"] * price["input_cost_per_token"]
                                                + u["completion_tokens"] * price["output_cost_per_token"])
    answered = [c for c in stub.values() if c["calls"][0]["usage"]["completion_tokens"] > 0]
    est, act = sum(c["estimate"]["usd"] for c in answered), sum(c["calls"][0]["usd"] for c in answered)
    assert summary["cost"]["estimate_accuracy"] == pytest.approx(1 - abs(est - act) / act)
    all_usd = [call["usd"] for c in stub.values() for call in c["calls"]]
    assert summary["cost"]["cost_per_1k_usd"] == pytest.approx(np.mean(all_usd) * 1000)


def test_markdown_and_html_outputs(example_run) -> None:
    done, result, directory = example_run
    markdown = (directory / "out" / "report.md").read_text()
    assert "## Latency (ms)" in markdown and "## Regression gate" in markdown
    assert result["models"]["stub"]["cases"][0]["receipt_ids"][0] in markdown
    assert "| exact_match | correctness |" in done.stdout  # the summary printed on stdout
    html = (directory / "out" / "report.html").read_text()
    assert "<script" not in html and " style=" not in html and "http-equiv=\"Content-Security-Policy\"" in html
    assert "default-src 'none'" in html


def test_html_report_renders_in_headless_chromium(example_run, tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    _, _, directory = example_run
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 "--window-size=1280,2400", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get((directory / "out" / "report.html").resolve().as_uri())
        assert driver.find_element(By.TAG_NAME, "h1").text == "Evaluation suite support-assistant"
        labels = [s.get_attribute("aria-label") for s in driver.find_elements(By.CSS_SELECTOR, "svg[role=img]")]
        assert "End-to-end latency, stub (ms)" in labels and "Metric by tag, demo (mean, 0–1)" in labels
        assert "Engine overhead, demo (ms)" in labels
        # the stylesheet is allowed by its hash under the CSP: it applied
        body = driver.find_element(By.TAG_NAME, "body")
        assert body.value_of_css_property("max-width") == "1150px"
        shot = directory / "report.png"
        assert driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    finally:
        driver.quit()


def test_regression_gate_quiet_on_rerun_and_fires_on_seeded_drop(example_run, suite_proxy: RunningProxy,
                                                                  stub: StubJudge, tmp_path: Path) -> None:
    _, _, directory = example_run
    baseline = directory / "baseline.json"
    before = baseline.read_text()
    rerun = sonate_suite(suite_proxy, stub, tmp_path / "rerun", baseline)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    gate = json.loads((tmp_path / "rerun" / "result.json").read_text())["regression"]
    assert gate["baseline_present"] and not gate["regressed"] and len(gate["rows"]) >= 10
    truths = oracle()
    try:
        for text in truths:  # seeded drop: the model forgets every ground truth
            stub.answers[text] = "I do not know."
        dropped = sonate_suite(suite_proxy, stub, tmp_path / "dropped", baseline)
    finally:
        stub.answers.update(truths)
    assert dropped.returncode == 1, dropped.stderr[-3000:]
    gate = json.loads((tmp_path / "dropped" / "result.json").read_text())["regression"]
    regressed = {r["metric"] for r in gate["rows"] if r["regressed"]}
    assert {"exact_match", "semantic_match", "schema"} <= regressed
    assert "Verdict: **REGRESSED**" in dropped.stdout
    assert baseline.read_text() == before  # a gated run never rewrites the baseline
