"""The in-browser verifier (/verify) in Debian's headless chromium, against the real proxy.

Every cross-language vector (tests/vectors/*.json, including the key-window ones: a receipt
re-signed below its key's not_before_height after a rotation) goes through the page's verifier twice —
with WebCrypto's Ed25519 and with the vendored @noble/ed25519 fallback (?fallback=1) — and
the browser's verdict must equal the vector's and the Python verifier's; so does every consistency
vector (tests/vectors/consistency.json). A person's path is driven too: paste a live receipt and a
bundle, fetch /v1/keys, click Verify, read the badges; and save a checkpoint, then check the ledger
against it after it grew, after its tail was deleted and after that tail was written anew
(truncation and rewrite caught by anyone who saved a checkpoint).
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import start_chromium
from tests.support.forked import sonate
from tests.support.proxy import CLIENT_KEY, RunningProxy, start_proxy, stop_proxy
from tests.unit.receipts.test_vectors import CONSISTENCY_VECTORS, VECTORS, python_verdict


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """Headless chromium with a fresh profile and no background network traffic."""
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def open_page(browser, proxy, query: str = "") -> None:
    browser.get(f"{proxy.url}/verify{query}")
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === 'true'"))


def run_vectors(browser) -> list[dict[str, Any]]:
    """Each vector's {valid, failed_checks, backend} from the page's window.sonateVerifier."""
    items = [{"document": json.dumps(v["document"]),
              "keys": "" if v["keys"] is None else json.dumps(v["keys"])} for v in VECTORS]
    return browser.execute_async_script(
        """
        const [items, done] = arguments;
        window.sonateVerifier.verifyAll(items)
          .then((results) => done(results.map((r) => ({valid: r.valid, failed_checks: r.failed_checks,
                                                       backend: r.backend}))))
          .catch((err) => done({error: String(err && err.stack || err)}));
        """, items)


def assert_agreement(results: list[dict[str, Any]], backend: str) -> None:
    assert isinstance(results, list), results
    assert len(results) == len(VECTORS)
    disagreements = []
    for vector, result in zip(VECTORS, results):
        browser_verdict = {"valid": result["valid"], "failed_checks": result["failed_checks"]}
        if browser_verdict != vector["expected"]:
            disagreements.append(f"{vector['id']}: browser {browser_verdict}, expected {vector['expected']}")
        python = python_verdict(vector)
        if python != browser_verdict:
            disagreements.append(f"{vector['id']}: browser {browser_verdict}, python {python}")
    assert not disagreements, "\n".join(disagreements)
    signed = [r["backend"] for r in results if r["backend"] is not None]
    assert signed and set(signed) == {backend}


def test_page_and_assets_are_served_with_a_same_origin_csp(proxy):
    with urllib.request.urlopen(f"{proxy.url}/verify?fallback=1") as response:  # follows the redirect
        assert response.url == f"{proxy.url}/verify/?fallback=1"
        assert response.headers["Content-Type"].startswith("text/html")
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert "<h1>Verify a trust receipt</h1>" in response.read().decode()
    for asset, kind in [("verify.js", "text/javascript"), ("verifier.js", "text/javascript"),
                        ("verify.css", "text/css"), ("vendor/noble-ed25519.js", "text/javascript"),
                        ("vendor/canonicalize.js", "text/javascript"), ("vendor/noble-ed25519.LICENSE", "text/plain")]:
        with urllib.request.urlopen(f"{proxy.url}/verify/{asset}") as response:
            assert response.headers["Content-Type"].startswith(kind), asset
            assert response.headers["X-Content-Type-Options"] == "nosniff"
    for missing in ("nothing.js", "%2e%2e/pyproject.toml", "..%2fserver%2fapp.py", "vendor"):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"{proxy.url}/verify/{missing}")
        assert caught.value.code == 404
        assert json.loads(caught.value.read())["error"]["code"] == "not_found"


def test_every_vector_agrees_with_webcrypto_ed25519(browser, proxy):
    open_page(browser, proxy)
    assert browser.execute_script("return document.body.dataset.backend") == "webcrypto"
    assert_agreement(run_vectors(browser), "webcrypto")


def test_every_vector_agrees_with_the_vendored_fallback(browser, proxy):
    open_page(browser, proxy, "?fallback=1")
    assert browser.execute_script("return document.body.dataset.backend") == "noble"
    assert "forced by ?fallback=1" in browser.find_element(By.ID, "engine").text
    assert_agreement(run_vectors(browser), "noble")


def test_every_vector_agrees_in_a_browser_without_json_source_text(browser, proxy):
    """Browsers without JSON.parse source text access (older Firefox/Safari) find floats by scanning."""
    open_page(browser, proxy)
    browser.execute_script("""
        const original = JSON.parse;
        JSON.parse = (text, reviver) =>
          reviver ? original(text, function (key, value) { return reviver.call(this, key, value); }) : original(text);
    """)
    assert_agreement(run_vectors(browser), "webcrypto")


def _chat_receipt(proxy) -> tuple[dict[str, Any], dict[str, Any]]:
    """A live receipt and its offline bundle from the proxy (demo route, no provider)."""
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}).encode()
    request = urllib.request.Request(f"{proxy.v1}/chat/completions", data=body, method="POST", headers={
        "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        receipt_id = response.headers["x-sonate-receipt-id"]
    documents = []
    for query in ("", "?bundle=1"):
        request = urllib.request.Request(f"{proxy.v1}/receipts/{receipt_id}{query}",
                                         headers={"Authorization": f"Bearer {CLIENT_KEY}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            documents.append(json.loads(response.read()))
    return documents[0], documents[1]


def _paste(browser, element_id: str, text: str) -> None:
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def _badges(browser) -> dict[str, str]:
    WebDriverWait(browser, 30).until(EC.visibility_of_element_located((By.ID, "results")))
    return {item.get_attribute("data-check"): item.find_element(By.CLASS_NAME, "badge").text
            for item in browser.find_elements(By.CSS_SELECTOR, "#checks > li")}


def _verify_click(browser) -> dict[str, str]:
    browser.execute_script("document.getElementById('results').hidden = true")
    browser.find_element(By.ID, "verify").click()
    return _badges(browser)


def test_person_pastes_a_live_receipt_fetches_keys_and_reads_badges(browser, proxy):
    receipt, bundle = _chat_receipt(proxy)
    open_page(browser, proxy)

    browser.find_element(By.ID, "fetch-keys").click()
    WebDriverWait(browser, 10).until(EC.text_to_be_present_in_element((By.ID, "fetch-status"), "Loaded"))
    fetched = json.loads(browser.find_element(By.ID, "keys").get_attribute("value"))
    assert receipt["key_id"] in {entry["key_id"] for entry in fetched["keys"]}

    _paste(browser, "document", json.dumps(receipt, indent=1))
    badges = _verify_click(browser)
    assert badges == {"keys": "✔ PASS", "schema": "✔ PASS", "unknown_key": "✔ PASS", "signature": "✔ PASS",
                      "key_window": "✔ PASS", "genesis": "✔ PASS"}
    verdict = browser.find_element(By.ID, "verdict")
    assert "Receipt verified" in verdict.text and "pass" in verdict.get_attribute("class")

    tampered = {**receipt, "guardrail_action": "allow" if receipt["guardrail_action"] != "allow" else "block"}
    _paste(browser, "document", json.dumps(tampered))
    badges = _verify_click(browser)
    assert badges["signature"] == "✘ FAIL" and badges["schema"] == "✔ PASS"
    assert "NOT verified" in browser.find_element(By.ID, "verdict").text
    details = browser.find_element(By.CSS_SELECTOR, "li[data-check='signature'] .check-details").text
    assert receipt["key_id"] in details

    _paste(browser, "document", json.dumps(bundle))
    badges = _verify_click(browser)
    assert set(badges) >= {"bundle", "signature", "checkpoint", "checkpoint_signature", "inclusion"}
    assert all(text == "✔ PASS" for text in badges.values()), badges
    facts = browser.find_element(By.ID, "facts").get_attribute("textContent")
    assert bundle["checkpoint"].split("\n")[0] in facts  # the checkpoint origin is shown

    hashes = bundle["inclusion_proof"]["hashes"]
    if hashes:  # a one-leaf tree has an empty path; otherwise corrupt it
        broken = json.loads(json.dumps(bundle))
        broken["inclusion_proof"]["hashes"] = hashes[::-1] if len(hashes) > 1 else ["A" * 43 + "="]
        _paste(browser, "document", json.dumps(broken))
        assert _verify_click(browser)["inclusion"] == "✘ FAIL"

    # Nothing left the origin: every resource the page loaded came from the proxy.
    urls = browser.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert urls and all(url.startswith(proxy.url + "/") for url in urls), urls


def test_bad_input_is_reported_not_thrown(browser, proxy):
    open_page(browser, proxy)
    _paste(browser, "document", "{not json")
    _paste(browser, "keys", "")
    badges = _verify_click(browser)
    assert badges == {"input": "✘ FAIL"}
    assert "not JSON" in browser.find_element(By.ID, "checks").text

    _paste(browser, "document", json.dumps(VECTORS[0]["document"]))
    _paste(browser, "keys", json.dumps({"keys": [{"alg": "Ed25519", "private_key": "x", "public_key": "y"}]}))
    badges = _verify_click(browser)
    assert badges["keys"] == "✘ FAIL"
    assert "private" in browser.find_element(By.CSS_SELECTOR, "li[data-check='keys'] .check-details").text


def test_every_consistency_vector_agrees(browser, proxy):
    """RFC 9162 §2.1.4.2 in verifier.js: the same verdict as the vector and as proofs.py, both Ed25519 engines."""
    items = [{"document": json.dumps(v["document"]), "keys": json.dumps(v["keys"])} for v in CONSISTENCY_VECTORS]
    for query in ("", "?fallback=1"):
        open_page(browser, proxy, query)
        results = browser.execute_async_script(
            """
            const [items, done] = arguments;
            window.sonateVerifier.verifyConsistencyAll(items)
              .then((results) => done(results.map((r) => ({valid: r.valid, failed_checks: r.failed_checks}))))
              .catch((err) => done({error: String(err && err.stack || err)}));
            """, items)
        assert isinstance(results, list), results
        wrong = [f"{v['id']}: browser {r}, expected {v['expected']}" for v, r in zip(CONSISTENCY_VECTORS, results)
                 if r != v["expected"] or python_verdict(v) != r]
        assert not wrong, "\n".join(wrong)


# -- a saved checkpoint against a ledger that grows, is truncated, then rewritten ---------------------


def _demo_requests(running: RunningProxy, count: int) -> None:
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}).encode()
    for _ in range(count):
        request = urllib.request.Request(f"{running.v1}/chat/completions", data=body, method="POST", headers={
            "Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200


def _wait_for_checkpoint(running: RunningProxy, size: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{running.v1}/ledger/checkpoint", timeout=5) as response:
                if response.read().decode().split("\n")[1] == str(size):
                    return
        except urllib.error.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint of size {size} was published")


def _check_ledger(browser, running: RunningProxy, saved: str) -> tuple[dict[str, str], str]:
    """A person's check: open the page, paste the saved checkpoint, no keys (fetched), click; badges and verdict."""
    open_page(browser, running)
    _paste(browser, "saved-checkpoint", saved)
    browser.find_element(By.ID, "check-ledger").click()
    badges = _badges(browser)
    return badges, browser.find_element(By.ID, "verdict").text


def _truncate(db, keep: int) -> None:
    """The operator deletes every receipt from height ``keep`` on, the tree, and the later checkpoints
    (as tests/integration/test_tamper.py), then rebuilds the tree with `sonate ledger reindex`."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM receipts WHERE height >= ?", (keep,))
        conn.execute("DELETE FROM tree_nodes")
        conn.execute("DELETE FROM ledger_meta WHERE name = 'tree_size'")
        conn.execute("DELETE FROM checkpoints WHERE tree_size > ?", (keep,))
    reindexed = sonate("ledger", "reindex", "--ledger", f"sqlite:///{db}", timeout=120)
    assert reindexed.returncode == 0, reindexed.stderr[-2000:]


def test_saved_checkpoint_catches_truncation_and_rewrite(browser, stub, tmp_path):
    directory, db = tmp_path / "ledger-proxy", tmp_path / "ledger.db"
    ledger = {"ledger": {"url": f"sqlite:///{db}", "checkpoint_every_entries": 1, "checkpoint_interval_seconds": 0.2}}
    running = start_proxy(directory, stub.url, f"sqlite:///{db}", overrides=ledger)
    try:
        _demo_requests(running, 6)
        _wait_for_checkpoint(running, 6)
        open_page(browser, running)  # the person saves the current checkpoint through the page
        browser.find_element(By.ID, "fetch-current").click()
        WebDriverWait(browser, 10).until(EC.text_to_be_present_in_element((By.ID, "current-status"), "Tree size 6"))
        saved = browser.find_element(By.ID, "current-checkpoint").get_attribute("value")
        assert saved.split("\n")[1] == "6" and "\n\n\u2014 " in saved

        _demo_requests(running, 3)
        _wait_for_checkpoint(running, 9)
        badges, verdict = _check_ledger(browser, running, saved)
        assert badges == {check: "✔ PASS" for check in (
            "keys", "trusted_checkpoint", "trusted_checkpoint_signature", "current_checkpoint",
            "current_checkpoint_signature", "truncated", "consistency")}, badges
        assert "Ledger consistent" in verdict and "tree size 6" in verdict and "size 9" in verdict
    finally:
        stop_proxy(running)

    _truncate(db, keep=4)  # 9 receipts -> 4
    running = start_proxy(directory, stub.url, f"sqlite:///{db}", policies=directory / "policies", overrides=ledger)
    try:
        _wait_for_checkpoint(running, 4)
        badges, verdict = _check_ledger(browser, running, saved)
        assert badges["truncated"] == "✘ FAIL" and badges["consistency"] == "– NOT RUN", badges
        assert badges["trusted_checkpoint_signature"] == "✔ PASS"  # the saved note is genuine
        assert "truncated from 6 to 4" in verdict
        details = browser.find_element(By.CSS_SELECTOR, "li[data-check='truncated'] .check-details").text
        assert "fewer than the 6" in details

        _demo_requests(running, 5)  # the tail written anew: 9 receipts again, heights 4..8 different
        _wait_for_checkpoint(running, 9)
        badges, verdict = _check_ledger(browser, running, saved)
        assert badges["truncated"] == "✔ PASS" and badges["consistency"] == "✘ FAIL", badges
        assert "history was rewritten" in verdict and "NOT consistent" in verdict
        assert "RFC 9162" in browser.find_element(By.CSS_SELECTOR, "li[data-check='consistency'] .check-details").text
    finally:
        stop_proxy(running)
