"""``sonate eval suite``'s formulas against independent computations (numpy, statistics, hashlib,
jsonschema, litellm's price map read directly), the suite loader, and the regression gate: it fires
on a seeded drop and stays quiet on noise."""

from __future__ import annotations

import hashlib
import random
import statistics
from pathlib import Path

import numpy as np
import pytest

from proxy.evaluation.suite import metrics as m
from proxy.evaluation.suite.jailbreaks import BUILTIN, jailbreak_cases
from proxy.evaluation.suite.model import DIMENSIONS, Regression, Settings, SuiteError, load_suite
from proxy.evaluation.suite.regression import check_gauge, compare
from proxy.evaluation.suite.summary import summarize
from tests.support.proxy import ROOT

EXAMPLE = ROOT / "examples" / "suite" / "support-assistant.yaml"


# ---- correctness -------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, truth, equal", [
    ("  Paris. ", "paris", True), ("PARIS!!", "Paris", True), ("Jane   Austen", "jane austen", True),
    ("ｐａｒｉｓ", "Paris", True),  # full-width letters: NFKC
    ("Paris, France", "Paris", False), ("42", "42.0", False), ("Straße", "STRASSE", True),  # casefold
])
def test_exact_match_normalises_case_space_punctuation_unicode(answer: str, truth: str, equal: bool) -> None:
    assert m.exact_match(answer, truth) is equal


def test_schema_conformance_json_schema_and_regex() -> None:
    schema = {"type": "object", "required": ["id", "n"], "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
              "additionalProperties": False}
    assert m.schema_conformance('{"id": "a", "n": 3}', schema=schema) == (True, "valid")
    assert m.schema_conformance('```json\n{"id": "a", "n": 3}\n```', schema=schema)[0] is True
    ok, reason = m.schema_conformance('{"id": "a", "n": "3"}', schema=schema)
    assert not ok and reason.startswith("n: '3' is not of type 'integer'")
    assert m.schema_conformance("not json", schema=schema)[0] is False
    assert m.schema_conformance("1969-07-20", regex=r"^\d{4}-\d{2}-\d{2}$")[0] is True
    assert m.schema_conformance("July 20 1969", regex=r"^\d{4}-\d{2}-\d{2}$")[0] is False
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        m.schema_conformance("{}", schema={"type": "no-such-type"})


# ---- determinism -------------------------------------------------------------------------------

def test_seeded_consistency_is_five_identical_sha256() -> None:
    same = ["Hello."] * 5
    assert m.output_hash("Hello.") == hashlib.sha256(b"Hello.").hexdigest()
    assert m.seeded_consistency(same) == (True, 1)
    assert m.seeded_consistency(same[:4] + ["Hello"]) == (False, 2)  # one byte differs: fails


# ---- latency -----------------------------------------------------------------------------------

def test_percentiles_match_numpy_and_statistics() -> None:
    rng = np.random.default_rng(12)
    values = list(rng.lognormal(4, 0.6, size=137))
    for q in (50, 95, 99):
        assert m.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    cuts = statistics.quantiles(values, n=100, method="inclusive")  # type 7, independent of numpy
    assert m.percentile(values, 95) == pytest.approx(cuts[94])
    s = m.latency_summary(values, budget_p95_ms=float(np.percentile(values, 95)) - 1)
    assert s["over_budget"] is True and s["n"] == 137 and s["mean"] == pytest.approx(float(np.mean(values)))
    assert m.latency_summary([], 250)["p95"] is None


# ---- cost --------------------------------------------------------------------------------------

def test_estimate_accuracy_and_cost_per_1k() -> None:
    assert m.estimate_accuracy(0.9, 1.0) == pytest.approx(0.9)
    assert m.estimate_accuracy(1.2, 1.0) == pytest.approx(0.8)
    assert m.estimate_accuracy(3.0, 1.0) == pytest.approx(-1.0)
    assert m.estimate_accuracy(1.0, 0.0) is None
    assert m.cost_per_1k([0.001, 0.003]) == pytest.approx(2.0)


def test_price_comes_from_litellms_pinned_map() -> None:
    import litellm

    from proxy.evaluation.suite.cost import UnknownPrice, price_of

    entry = litellm.model_cost["gpt-4o-mini"]
    price = price_of("gpt-4o-mini")
    assert price.cost(1000, 200) == pytest.approx(1000 * entry["input_cost_per_token"]
                                                  + 200 * entry["output_cost_per_token"])
    with pytest.raises(UnknownPrice, match="not in litellm's price map"):
        price_of("no-such-model-anywhere")


# ---- safety ------------------------------------------------------------------------------------

def test_pii_leaks_are_in_the_output_but_not_the_input() -> None:
    inputs = ["My email is jane.doe@example.com and my phone is (415) 555-0100."]
    output = ("I have jane.doe@example.com and 415.555.0100 on file; the other customer is bob@corp.io, "
              "SSN 123-45-6789, passport number X12345678, key sk-abcdefghijklmnopqrstuvwx12 and AKIAABCDEFGHIJKLMNOP.")
    leaks = m.pii_leaks(output, inputs)
    assert [k for k, _ in leaks] == ["api_key", "api_key", "email", "passport", "ssn"]
    assert ("email", "bob@corp.io") in leaks and ("ssn", "123456789") in leaks
    assert m.pii_leaks("Call 555-01-0000 or 000-12-3456", []) == []  # not valid SSNs, not phone numbers


def test_harm_patterns() -> None:
    assert m.harm_patterns("First mix the ammonium nitrate with fuel oil") == ["explosives"]
    assert m.harm_patterns("Take old batteries to a recycling point.") == []


def test_jailbreak_set_has_at_least_twenty_prompts() -> None:
    cases = jailbreak_cases("builtin", BUILTIN.parent)
    assert len(cases) >= 20 and len({c["id"] for c in cases}) == len(cases)
    assert all(c["metrics"] == ["jailbreak", "harm"] and c["goal"] and c["input"] for c in cases)
    assert len({c["tags"][1] for c in cases}) >= 15  # distinct techniques


# ---- loader ------------------------------------------------------------------------------------

def test_example_suite_loads_with_twenty_cases_over_five_dimensions() -> None:
    suite = load_suite(EXAMPLE)
    own = [c for c in suite.cases if not c.id.startswith("jailbreak/")]
    assert len(own) >= 20
    covered = {d for c in own for d in c.dimensions}
    assert covered == set(DIMENSIONS)
    assert suite.templates == {"grounding": "groundedness-v1", "harm": "harm-v1", "jailbreak": "jailbreak-v1",
                               "semantic_match": "semantic-match-v1", "stability": "stability-v1"}
    refund = next(c for c in suite.cases if c.id == "refund-window")
    assert refund.messages[0]["role"] == "system" and refund.context in refund.messages[0]["content"]
    harmful = next(c for c in suite.cases if c.id == "harmful-explosive")
    assert "refusal" in harmful.metrics and "pii_leak" in harmful.metrics  # by tag, and always


@pytest.mark.parametrize("body, message", [
    ("suite: x\ntarget: {models: [demo]}\ncases: []\n", r"cases: \[\] should be non-empty"),
    ("suite: x\ntarget: {models: [demo]}\ncases: [{id: a, input: q, metrics: [exact_match]}]\n",
     "case 'a': metric exact_match needs ground_truth"),
    ("suite: x\ntarget: {models: [demo]}\ncases: [{id: a, input: q, metrics: [bogus]}]\n", "cases/0/metrics/0"),
    ("suite: x\ntarget: {models: [demo]}\ncases: [{id: a, input: q}, {id: a, input: r}]\n", "duplicate case ids: a"),
    ("suite: x\ntarget: {models: [demo]}\ncases: [{id: a, input: q, context: c, metrics: [grounding]}]\n",
     "no judge section"),
    ("suite: x\ntarget: {models: [demo], api_key: os.environ/SONATE_TEST_UNSET_VAR}\ncases: [{id: a, input: q}]\n",
     "SONATE_TEST_UNSET_VAR, which is not set"),
])
def test_suite_errors_name_the_file_and_key(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(SuiteError, match=rf"bad\.yaml: .*{message}"):
        load_suite(path)


# ---- summary -----------------------------------------------------------------------------------

def _case(cid: str, tags: list[str], metrics: dict[str, float], est: float, usd: float, completion: int = 5,
          ms: float = 100.0) -> dict:
    return {"id": cid, "tags": tags, "error": None, "estimate": {"usd": est},
            "metrics": {k: {"value": v, "passed": v >= 1.0} for k, v in metrics.items()},
            "calls": [{"ms": ms, "ttft_ms": ms / 2, "overhead_ms": 10.0, "overhead_exact": True, "usd": usd,
                       "receipt_id": f"rcpt_{cid}",
                       "usage": {"prompt_tokens": 3, "completion_tokens": completion}}]}


def test_summary_cost_safety_and_tags() -> None:
    cases = [_case("a", ["x"], {"exact_match": 1.0, "jailbreak": 0.2}, est=0.002, usd=0.001),
             _case("b", ["x", "y"], {"exact_match": 0.0, "refusal": 1.0}, est=0.001, usd=0.003),
             _case("c", ["y"], {"refusal": 0.0}, est=0.005, usd=0.0, completion=0, ms=300.0)]  # refused: not priced
    s = summarize({"cases": cases}, Settings())
    assert s["cost"]["estimate_accuracy"] == pytest.approx(1 - abs(0.003 - 0.004) / 0.004)
    assert s["cost"]["cost_per_1k_usd"] == pytest.approx((0.001 + 0.003 + 0.0) / 3 * 1000)
    assert s["metrics"]["exact_match"]["mean"] == 0.5 and s["metrics"]["exact_match"]["pass_rate"] == 0.5
    assert s["by_tag"]["x"]["exact_match"] == 0.5 and s["by_tag"]["y"]["refusal"] == 0.5
    assert s["safety"] == {"jailbreak_attempts": 1, "jailbreaks_succeeded": 1, "jailbreak_pass": False,
                           "refusal_rate": 0.5, "refusal_cases": 2, "pii_leaks": 0, "harmful_answers": 0}
    assert s["gauges"]["latency_p95_ms"]["value"] == pytest.approx(float(np.percentile([100, 100, 300], 95)))
    assert s["gauges"]["exact_match"]["std"] == pytest.approx(statistics.stdev([1.0, 0.0]))


# ---- regression gate ---------------------------------------------------------------------------

def _gauge(value: float, std: float, deterministic: bool, higher: bool = True) -> dict:
    return {"value": value, "std": std, "n": 20, "deterministic": deterministic, "higher_is_better": higher}


def test_deterministic_rule_is_a_ten_percent_relative_drop() -> None:
    rules = Regression()
    assert not check_gauge("exact_match", _gauge(0.80, 0.4, True), _gauge(0.73, 0.4, True), rules)["regressed"]
    assert check_gauge("exact_match", _gauge(0.80, 0.4, True), _gauge(0.71, 0.4, True), rules)["regressed"]
    cost_up = check_gauge("cost_per_1k_usd", _gauge(1.0, 0, True, False), _gauge(1.12, 0, True, False), rules)
    assert cost_up["regressed"] and cost_up["change"] == pytest.approx(0.12)
    assert not check_gauge("exact_match", _gauge(0.0, 0, True), _gauge(0.0, 0, True), rules)["regressed"]


def test_non_deterministic_rule_is_one_sigma_below_baseline() -> None:
    rules = Regression()
    base = _gauge(0.80, 0.10, False)
    assert not check_gauge("semantic_match", base, _gauge(0.71, 0.1, False), rules)["regressed"]
    assert check_gauge("semantic_match", base, _gauge(0.69, 0.1, False), rules)["regressed"]
    slower = check_gauge("latency_p95_ms", _gauge(200, 40, False, False), _gauge(250, 40, False, False), rules)
    assert slower["regressed"] and slower["threshold"] == pytest.approx(240)


def _run(values: list[float]) -> dict:
    stats = m.mean_std(values)
    return {"semantic_match": _gauge(stats.mean, stats.std, False),
            "exact_match": _gauge(sum(v >= 0.5 for v in values) / len(values), 0.0, True)}


def test_gate_stays_quiet_on_noise_and_fires_on_a_seeded_drop() -> None:
    rng = random.Random(2026)
    per_case_quality = [rng.uniform(0.6, 1.0) for _ in range(40)]  # each case's true judge score

    def judged(shift: float = 0.0) -> list[float]:  # one run: per-case judge noise (σ 0.05) around the truth
        return [min(max(q - shift + rng.gauss(0, 0.05), 0.0), 1.0) for q in per_case_quality]

    baseline = {"models": {"demo": _run(judged())}}
    quiet = [compare(baseline, {"demo": _run(judged())}, Regression())["regressed"] for _ in range(50)]
    assert not any(quiet)
    seeded = compare(baseline, {"demo": _run(judged(shift=0.35))}, Regression())
    assert seeded["regressed"]
    assert {r["metric"] for r in seeded["rows"] if r["regressed"]} == {"semantic_match", "exact_match"}


def test_gate_without_baseline_or_with_missing_metrics() -> None:
    assert compare(None, {"demo": {}}, Regression()) == {"baseline_present": False, "regressed": False,
                                                         "rows": [], "not_compared": []}
    result = compare({"models": {"demo": {"exact_match": _gauge(1, 0, True)}}},
                     {"demo": {"schema": _gauge(1, 0, True)}, "other": {}}, Regression())
    assert not result["regressed"] and {(r["metric"], r["why"]) for r in result["not_compared"]} == {
        ("exact_match", "absent now"), ("schema", "absent from baseline"), ("*", "model not in baseline")}


# ---- command and HTML --------------------------------------------------------------------------

def test_cli_usage_errors_exit_2_naming_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.cli import main

    monkeypatch.delenv("SONATE_PROXY_URL", raising=False)
    monkeypatch.delenv("SONATE_API_KEY", raising=False)
    assert main(["eval", "suite", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml: cannot read" in capsys.readouterr().err
    assert main(["eval", "suite", str(EXAMPLE), "--out", str(tmp_path / "o")]) == 2
    assert "a proxy URL and a client key are needed" in capsys.readouterr().err


def test_html_has_a_strict_csp_matching_its_stylesheet_and_no_script() -> None:
    import base64
    import re as regex

    from proxy.evaluation.suite.report_html import CSS, render_html

    cases = [_case("a", ["x"], {"exact_match": 1.0}, est=0.001, usd=0.001)]
    block = {"cases": cases, "price_model": "gpt-4o-mini", "summary": summarize({"cases": cases}, Settings())}
    result = {"suite": {"name": "s<x>", "sha256": "0" * 64, "cases": 1}, "generated": "now",
              "target": {"proxy": "http://p", "overhead_source": None}, "judge": {"model": None, "templates": {}},
              "settings": {"latency_budget_p95_ms": 250, "overhead_budget_p95_ms": 250}, "models": {"m": block},
              "regression": {"baseline_present": False, "regressed": False, "rows": [], "not_compared": []}}
    html = render_html(result)
    digest = base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
    csp = regex.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert f"style-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp and "script-src 'none'" in csp
    assert "<script" not in html and " style=" not in html and "s&lt;x&gt;" in html
    assert html.count("<svg") == 3  # latency histogram, overhead histogram, tag heatmap
