"""`sonate report` on a seeded synthetic ledger whose true rates are known.

Real signed receipts are written into a real SQLite ledger (proxy.receipts.chain.Ledger), with
adjudication items in the store; the test keeps its own ground-truth tallies while generating
and recomputes every published number independently (statsmodels for the Wilson intervals, the
pooling estimator re-derived inline).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from statsmodels.stats.proportion import proportion_confint

from proxy.evaluation.kpi_report import ReportInputs, build_report
from proxy.guardrails.schema import load_policies
from proxy.kpi.adjudication import Verdict, new_item, record_pass, resolve
from proxy.kpi.report_html import render_html
from proxy.receipts import json_hash, load_or_create_signer, new_receipt, open_store
from proxy.receipts.chain import Ledger
from proxy.receipts.signing import Signer, load_public_keys
from tests.support.forked import sonate

ROOT = Path(__file__).resolve().parents[2]
START, END = "2026-11-01T00:00:00.000Z", "2026-11-08T00:00:00.000Z"
SIZES = {"simple": 600, "standard": 800, "advanced": 500, "critical": 100}   # critical < 200: NA
REFUSALS = {"simple": 20, "standard": 30, "advanced": 25, "critical": 10}
UNNECESSARY_REFUSALS = {"simple": 3, "standard": 5, "advanced": 6, "critical": 4}
MODEL_APOLOGIES = {"simple": 4, "standard": 4, "advanced": 4, "critical": 0}
UNNECESSARY_MODEL = {"simple": 2, "standard": 1, "advanced": 1, "critical": 0}
MASKS = {"simple": 10, "standard": 20, "advanced": 20, "critical": 5}
MASK_FP = {"simple": 1, "standard": 2, "advanced": 3, "critical": 0}
SAMPLED, SAMPLE_FN, ROGUE, OUTSIDE, MISSING_RECEIPTS, AD_MISSING = 100, 2, 6, 15, 3, 7
ALPHA = {"simple": 0.25, "standard": 0.35, "advanced": 0.30, "critical": 0.10}
NEEDLESS = Verdict(breach=False, intent_permissible=True, content_harmful=False)
JUSTIFIED = Verdict(breach=True, intent_permissible=False, content_harmful=True)
HARMLESS_BUT_RUDE = Verdict(breach=False, intent_permissible=False, content_harmful=False)


def _ts(i: int, day: int = 2) -> str:
    return f"2026-11-{day:02d}T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"


def _provider(i: int) -> str:
    return "openai" if i % 20 < 12 else ("anthropic" if i % 20 < 19 else "mistral")


EVIDENCE = {
    "refuse": ("safety.harm", {"scores": {"harmful_intent": "0.9100"}, "detector": {"name": "t", "version": "1"},
                               "categories": ["harmful_intent"]}),
    "mask": ("privacy.pii", {"entity_types": ["EMAIL_ADDRESS"], "spans": [[0, 5]], "human_flag": True,
                             "detector": {"name": "presidio", "version": "2"}}),
    "allow": ("matrix", {"policies_evaluated": ["privacy.pii", "safety.harm"]}),
}


def _receipt(i: int, action: str, complexity: str, *, ts: str, model_apology: bool = False,
             drop_spans: bool = False) -> dict:
    policy_id, evidence = EVIDENCE[action]
    evidence = json.loads(json.dumps(evidence))
    if model_apology:
        evidence["model_apology"] = True
    if drop_spans:
        evidence["spans"] = []
    domain = ("general", "code", "health")[i % 3]
    return new_receipt(request_id=f"req_{i:032x}", actor="app", intent=domain, inputs_hash=json_hash({"i": i}),
                       outputs_hash=json_hash({"o": i}), policy_id=policy_id, guardrail_action=action,
                       evidence=evidence, model="m", provider=_provider(i),
                       stratum={"domain": domain, "complexity": complexity, "provider": _provider(i)}, ts=ts)


class Truth:
    """Ground-truth tallies kept while generating."""

    def __init__(self) -> None:
        self.n = Counter()
        self.unnecessary = Counter()
        self.receipts_in_window = 0
        self.triggers = 0
        self.fp = 0
        self.eligible = 0
        self.actions = 0
        self.ad_required = 0
        self.ad_missing = 0
        self.providers = Counter()
        self.apologies = 0
        self.apologies_adjudicated = 0


async def _generate(tmp: Path) -> tuple[str, Path, Truth]:
    rng = random.Random(11)
    key_file = tmp / "keys" / "signing-key.json"
    signer = load_or_create_signer(key_file)
    url = "sqlite:///" + str((tmp / "ledger.db").resolve())
    store = open_store(url)
    ledger, rogue = Ledger(store, signer), Ledger(store, Signer.generate())
    truth = Truth()
    batch: list[dict] = []
    plans: list[tuple[int, str, str, dict]] = []  # (i, complexity, action, flags)
    i = 0
    for complexity, size in SIZES.items():
        kinds = (["refuse_needless"] * UNNECESSARY_REFUSALS[complexity]
                 + ["refuse_rude"] * 1
                 + ["refuse_justified"] * ((REFUSALS[complexity] - UNNECESSARY_REFUSALS[complexity] - 1) // 2)
                 + ["refuse_pending"] * (REFUSALS[complexity] - UNNECESSARY_REFUSALS[complexity] - 1
                                         - (REFUSALS[complexity] - UNNECESSARY_REFUSALS[complexity] - 1) // 2)
                 + ["model_needless"] * UNNECESSARY_MODEL[complexity]
                 + ["model_ok"] * (MODEL_APOLOGIES[complexity] - UNNECESSARY_MODEL[complexity])
                 + ["mask_fp"] * MASK_FP[complexity] + ["mask_ok"] * (MASKS[complexity] - MASK_FP[complexity]))
        kinds += ["allow"] * (size - len(kinds))
        rng.shuffle(kinds)
        for kind in kinds:
            plans.append((i, complexity, kind, {}))
            i += 1
    allow_rows = [p for p in plans if p[2] == "allow"]
    for p in rng.sample(allow_rows, SAMPLED):
        p[3]["sampled"] = True
    for p in rng.sample([p for p in allow_rows if p[3].get("sampled")], SAMPLE_FN):
        p[3]["fn"] = True
    for p in rng.sample([p for p in allow_rows if not p[3].get("sampled")], ROGUE):
        p[3]["rogue"] = True
    masks = [p for p in plans if p[2].startswith("mask")]
    for p in rng.sample(masks, AD_MISSING):
        p[3]["drop_spans"] = True

    items: list[dict] = []
    disputed_left = 2
    for i, complexity, kind, flags in plans:
        action = kind.split("_")[0].replace("model", "allow")
        receipt = _receipt(i, action, complexity, ts=_ts(i), model_apology=kind.startswith("model"),
                           drop_spans=flags.get("drop_spans", False))
        truth.n[complexity] += 1
        truth.providers[_provider(i)] += 1
        truth.receipts_in_window += 1
        truth.actions += 1
        if action in ("refuse", "mask"):
            truth.triggers += 1
            truth.ad_required += 5 if action == "refuse" else 6
            truth.ad_missing += flags.get("drop_spans", False)
        if kind in ("refuse_needless", "model_needless"):
            truth.unnecessary[complexity] += 1
        if kind in ("refuse_needless", "refuse_rude", "mask_fp"):
            truth.fp += 1
        if action == "allow" and not kind.startswith("model"):
            truth.eligible += 1
        if action == "refuse" or kind.startswith("model"):
            truth.apologies += 1
            truth.apologies_adjudicated += kind != "refuse_pending"
        if flags.get("rogue"):
            if batch:
                await ledger.append(batch)
                batch = []
            await rogue.append([receipt])
        else:
            batch.append(receipt)
        verdict = {"refuse_needless": NEEDLESS, "refuse_rude": HARMLESS_BUT_RUDE, "refuse_justified": JUSTIFIED,
                   "model_needless": NEEDLESS, "model_ok": JUSTIFIED, "mask_fp": NEEDLESS,
                   "mask_ok": JUSTIFIED}.get(kind)
        if flags.get("sampled"):
            verdict = JUSTIFIED if flags.get("fn") else NEEDLESS
        if verdict is None and kind != "refuse_pending":
            continue
        item = new_item([{**receipt, "ledger_height": 0}], messages=[], response="", model_apology=kind.startswith("model"),
                        sampled=bool(flags.get("sampled")), created=_ts(i))
        if kind == "refuse_pending":
            items.append(item)
            continue
        if kind == "refuse_needless" and complexity == "standard" and disputed_left:
            disputed_left -= 1
            item, _ = record_pass(item, reviewer="rev-a", verdict=NEEDLESS, ts=_ts(i, 9))
            item, _ = record_pass(item, reviewer="rev-b", verdict=JUSTIFIED, ts=_ts(i, 9))
            item = resolve(item, lead="lead", verdict=NEEDLESS, ts=_ts(i, 9))
        else:
            item, _ = record_pass(item, reviewer="rev-a", verdict=verdict, ts=_ts(i, 9))
            item, _ = record_pass(item, reviewer="rev-b", verdict=verdict, ts=_ts(i, 9))
        items.append(item)
    if batch:
        await ledger.append(batch)
    for i in range(OUTSIDE):  # before the window: must not count
        await ledger.append([_receipt(10_000 + i, "refuse", "simple", ts=f"2026-10-30T00:00:{i:02d}.000Z")])
    # Adjudication receipts (in the window), a known number missing.
    missing = 0
    human = []
    for item in items:
        stages = list(item["passes"]) + (["lead"] if item.get("lead") else [])
        truth.actions += len(stages)
        for stage in stages:
            if missing < MISSING_RECEIPTS:
                missing += 1
                continue
            human.append(new_receipt(
                request_id="req_" + item["id"][4:] + stage.lower(), actor="rev", intent=item["domain"],
                inputs_hash=json_hash({}), outputs_hash=json_hash({}), policy_id=item["policy_id"],
                guardrail_action="adjudicate", evidence={"adjudication_id": item["id"], "stage": stage,
                                                         "adjudicated_receipt_id": item["receipt_id"]},
                model="m", provider="human", stratum={**item["stratum"], "provider": "human"}, ts="2026-11-07T12:00:00.000Z"))
    for lo in range(0, len(human), 200):
        await ledger.append(human[lo:lo + 200])
    truth.receipts_in_window += len(human)
    for item in items:
        await store.put_item("adjudications", item)
    await store.close()
    return url, key_file, truth


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("kpi-report")
    url, key_file, truth = asyncio.run(_generate(tmp))

    async def read():
        store = open_store(url)
        head = await store.head()
        receipts = await store.range(0, head.height + 1)
        items, cases = await store.list_items("adjudications"), await store.list_items("escalations")
        await store.close()
        return receipts, items, cases

    receipts, items, cases = asyncio.run(read())
    required = {p.id: list(p.evidence_required) for p in load_policies(ROOT / "policies")}
    report = build_report(ReportInputs(receipts=receipts, review_items=items, cases=cases, evidence_required=required,
                                       public_keys=load_public_keys(str(key_file)), start=START, end=END,
                                       generated_at="2026-11-22T00:00:00.000Z", lvp_sample=100_000, seed=0))
    return {"url": url, "key_file": key_file, "truth": truth, "report": report, "tmp": tmp}


def _wilson(k: int, n: int) -> tuple[float, float]:
    return proportion_confint(k, n, alpha=0.05, method="wilson")


def _pool(counts: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Beta-binomial method-of-moments shrinkage, re-derived here (see proxy.kpi.stats.partial_pool)."""
    N = sum(n for _, n in counts.values())
    k = sum(1 for _, n in counts.values() if n)
    p = sum(x for x, _ in counts.values()) / N
    S = sum(n * (x / n - p) ** 2 for x, n in counts.values() if n)
    rho = (S / (p * (1 - p)) - (k - 1)) / (N - sum(n * n for _, n in counts.values()) / N - (k - 1))
    rho = min(1.0, max(0.0, rho))
    if rho == 0:
        return {s: p for s in counts}
    M = 1 / rho - 1
    return {s: (x + M * p) / (n + M) for s, (x, n) in counts.items()}


def test_disclosure(synthetic) -> None:
    truth, d = synthetic["truth"], synthetic["report"]["disclosure"]
    assert d["n_interactions"] == sum(SIZES.values()) == 2000  # the 15 receipts before the window excluded
    assert d["per_stratum_n"]["complexity"] == SIZES
    assert d["per_stratum_n"]["provider"] == dict(truth.providers)
    assert d["providers_below_min_share"] == ["mistral"]  # 5% < 15%
    assert d["provider_mix"]["openai"]["share"] == pytest.approx(truth.providers["openai"] / 2000)
    assert d["window"] == {"start": START, "end": END, "end_exclusive": True}
    report = synthetic["report"]
    assert report["methodology_version"] == "2026.11.22-r1"
    assert report["methodology"]["complexity_weights"] == ALPHA


def test_far_a_per_stratum_pooling_and_normalized(synthetic) -> None:
    truth, far_a = synthetic["truth"], synthetic["report"]["kpis"]["far_a"]
    total = sum(truth.unnecessary.values())
    assert total == sum(UNNECESSARY_REFUSALS.values()) + sum(UNNECESSARY_MODEL.values())
    assert far_a["overall"]["successes"] == total and far_a["overall"]["n"] == 2000
    assert far_a["overall"]["rate"] == pytest.approx(total / 2000)
    low, high = _wilson(total, 2000)
    assert (far_a["overall"]["ci_low"], far_a["overall"]["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert far_a["overall"]["display"] == f"{total / 2000 * 100:.2f}%"  # 22/2000 = 1.10%
    counts = {s: (truth.unnecessary[s], SIZES[s]) for s in SIZES}
    pooled = _pool(counts)
    for s, block in far_a["per_complexity"].items():
        assert block["successes"] == counts[s][0] and block["n"] == counts[s][1]
        lo, hi = _wilson(*counts[s])
        assert block["ci_low"] == pytest.approx(lo) and block["ci_high"] == pytest.approx(hi)
        assert block["pooled"] == pytest.approx(pooled[s])
    assert far_a["per_complexity"]["critical"]["published"] is False
    assert far_a["per_complexity"]["critical"]["display"] == "NA"
    assert far_a["per_complexity"]["simple"]["published"] is True
    expected = sum(ALPHA[s] * (counts[s][0] / counts[s][1] if SIZES[s] >= 200 else pooled[s]) for s in SIZES)
    assert far_a["normalized"]["value"] == pytest.approx(expected)
    assert far_a["normalized"]["ci_low"] < expected < far_a["normalized"]["ci_high"]
    # the NA stratum entered only through pooling: its raw rate (4%) would give a different value
    raw = sum(ALPHA[s] * counts[s][0] / counts[s][1] for s in SIZES)
    assert abs(raw - expected) > 1e-4


def test_tis_components(synthetic) -> None:
    truth, tis = synthetic["truth"], synthetic["report"]["kpis"]["tis"]
    c = tis["components"]
    lvp = (truth.receipts_in_window - ROGUE) / truth.receipts_in_window
    rc = (truth.actions - MISSING_RECEIPTS) / truth.actions
    scale = truth.eligible / SAMPLED
    # a justified model apology is a breach the guardrails let through: a false negative (census)
    fn_census = sum(MODEL_APOLOGIES.values()) - sum(UNNECESSARY_MODEL.values())
    ga = 1 - (truth.fp + fn_census + SAMPLE_FN * scale) / truth.triggers
    ad = (truth.ad_required - truth.ad_missing) / truth.ad_required
    assert c["lvp"]["value"] == pytest.approx(lvp) and c["lvp"]["n"] == truth.receipts_in_window
    assert c["rc"]["value"] == pytest.approx(rc) and c["rc"]["n"] == truth.actions
    assert c["ga"]["value"] == pytest.approx(ga)
    assert c["ad"]["value"] == pytest.approx(ad) and c["ad"]["n"] == truth.ad_required
    lo, hi = _wilson(truth.receipts_in_window - ROGUE, truth.receipts_in_window)
    assert (c["lvp"]["ci_low"], c["lvp"]["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    value = 0.35 * lvp + 0.20 * rc + 0.25 * ga + 0.20 * ad
    assert tis["overall"]["value"] == pytest.approx(value)
    assert tis["overall"]["display"] == f"{value:.3f}"
    assert tis["overall"]["ci_low"] < value < tis["overall"]["ci_high"]
    assert tis["meets_target"] is (value >= 0.995)
    assert tis["per_complexity"]["critical"]["published"] is False
    assert tis["normalized"]["value"] is not None


def test_adjudication_disclosure(synthetic) -> None:
    truth, adj = synthetic["truth"], synthetic["report"]["adjudication"]
    assert adj["apologies"] == truth.apologies and adj["apologies_adjudicated"] == truth.apologies_adjudicated
    assert adj["sample_adjudicated"] == SAMPLED and adj["false_negatives_in_sample"] == SAMPLE_FN
    assert adj["allowed_eligible_for_sample"] == truth.eligible
    agreement = adj["agreement"]["all"]
    double_rated = adj["by_status"].get("agreed", 0) + adj["by_status"].get("resolved", 0)
    assert agreement["n"] == double_rated
    assert agreement["observed_agreement"] == pytest.approx((double_rated - 2) / double_rated)  # 2 disputes
    assert any("not adjudicated" in n for n in synthetic["report"]["notes"])


def test_cli_writes_the_same_report_and_html(synthetic) -> None:
    out, html = synthetic["tmp"] / "report.json", synthetic["tmp"] / "report.html"
    result = sonate("report", "--from", "2026-11-01", "--to", "2026-11-08T00:00:00Z",
                    "--ledger", synthetic["url"], "--policies", str(ROOT / "policies"), "--keys", str(synthetic["key_file"]),
                    "--lvp-sample", "100000", "--out", str(out), "--html", str(html), timeout=300)
    assert result.returncode == 0, result.stderr
    written = json.loads(out.read_text())
    expected = synthetic["report"]
    assert written["kpis"]["far_a"]["overall"] == expected["kpis"]["far_a"]["overall"]
    assert written["kpis"]["tis"]["overall"] == expected["kpis"]["tis"]["overall"]
    assert written["kpis"]["tis"]["components"] == expected["kpis"]["tis"]["components"]
    page = html.read_text()
    assert page.count("<svg") >= 4 and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert expected["kpis"]["far_a"]["overall"]["display"] in page


def test_cli_usage_errors(tmp_path: Path, synthetic) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return sonate("report", *args, timeout=120)

    base = ["--ledger", synthetic["url"], "--policies", str(ROOT / "policies"), "--keys", str(synthetic["key_file"]),
            "--out", str(tmp_path / "r.json")]
    bad_date = run("--from", "yesterday", "--to", "2026-11-08", *base)
    assert bad_date.returncode == 2 and "ISO 8601" in bad_date.stderr and "Traceback" not in bad_date.stderr
    reversed_window = run("--from", "2026-11-08", "--to", "2026-11-01", *base)
    assert reversed_window.returncode == 2 and "before" in reversed_window.stderr
    (tmp_path / "farh.json").write_text(json.dumps({"format": "sonate.farh/v1", "overall": {"checked": 3, "failed": 5}}))
    bad_input = run("--from", "2026-11-01", "--to", "2026-11-08", "--farh-results", str(tmp_path / "farh.json"), *base)
    assert bad_input.returncode == 2 and "failed (5) exceeds checked (3)" in bad_input.stderr


def test_far_h_and_pfi_inputs_are_recomputed(synthetic) -> None:
    from proxy.evaluation.kpi_inputs import check_farh, check_pfi

    farh = check_farh({"format": "sonate.farh/v1", "overall": {"checked": 400, "failed": 3},
                       "per_tier": {"general": {"checked": 300, "failed": 1}, "regulated": {"checked": 100, "failed": 2}},
                       "per_domain": {"health": {"checked": 40, "failed": 2}}, "window": {}})
    from proxy.evaluation.fairness import Observation, axis_pfi, pfi_result

    rng = random.Random(5)
    observations = [Observation(axis="gender", bucket="b", group=g, variant=v, prompt="p",
                                refused=rng.random() < (0.02 if g == "women" else 0.05), escalated=False,
                                latency_seconds=1.0 + rng.random() / 10, ts="2026-11-02T00:00:00.000Z")
                    for g in ("women", "men") for v in range(150)]
    pfi_doc = pfi_result(observations, proxy="http://x", model="stub", axes=["gender"], per_group=150,
                         groups_per_axis=None, include_dispreferred=False, generated_at="2026-11-22T00:00:00Z")
    pfi_doc = json.loads(json.dumps(pfi_doc))  # as read from the file
    pfi = check_pfi(pfi_doc)
    expected_pfi = axis_pfi(observations)["gender"]
    assert pfi["overall"]["pfi"] == pytest.approx(expected_pfi)
    s = synthetic
    inputs = ReportInputs(receipts=[], review_items=[], cases=[], evidence_required={}, public_keys={},
                          start=START, end=END, generated_at="x", farh=farh, pfi=pfi)
    report = build_report(inputs)
    fh = report["kpis"]["far_h"]
    assert fh["overall"]["display"] == "0.75%" and fh["overall"]["published"]
    assert fh["per_domain"]["health"]["display"] == "NA"  # 40 claims < 50
    assert fh["per_tier"]["regulated"]["meets_target"] is False  # 2% ≥ 0.25%
    assert report["kpis"]["pfi"]["overall"]["display"] == f"{expected_pfi:.3f}"
    assert report["kpis"]["pfi"]["meets_enterprise"] is (expected_pfi >= 0.98)
    assert report["kpis"]["far_a"]["overall"]["display"] == "NA"  # no interactions
    render_html(report)  # an empty window still renders
    tampered = json.loads(json.dumps(pfi_doc))
    tampered["per_axis"]["gender"]["pfi"] = 0.999
    with pytest.raises(ValueError, match="observations give"):
        check_pfi(tampered)
    assert s["report"]["format"] == "sonate.report/v1"


def test_html_renders_in_headless_chromium(synthetic) -> None:
    from selenium import webdriver

    path = synthetic["tmp"] / "render.html"
    path.write_text(render_html(synthetic["report"]))
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options)
    try:
        driver.get(path.as_uri())
        assert "Sonate KPI report" in driver.title
        bars = driver.find_elements("css selector", "svg rect")
        assert len(bars) >= 8 and all(b.size["width"] >= 0 for b in bars)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        resources = driver.execute_script("return performance.getEntriesByType('resource').length")
        assert resources == 0  # nothing fetched: viewable offline
    finally:
        driver.quit()
