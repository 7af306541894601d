"""``sonate eval conversation`` end to end: the example conversations replayed through the real
proxy (the demo route, and the stub provider route), judged by the stub judge over HTTP, scored by
the proxy's own Safety detectors and embedder; JSON, Markdown and HTML written (the page opened
in headless chromium and screenshotted), the results stored in the proxy's ledger store, exported
as JSONL and shown as trends by ``sonate report``.

Only the LLM provider and the LLM judge are stubs (tests/support/stub_upstream.py,
tests/support/stub_judge.py); the expected judge scores are recomputed here with the stub's own
handler functions from the texts the proxy returned.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.e2e.test_web_verifier import browser  # noqa: F401  (fixture: headless chromium)
from tests.support.forked import sonate
from tests.support.proxy import CLIENT_KEY, ROOT, RunningProxy
from tests.support.stub_judge import HANDLERS, StubJudge, containment

EXAMPLE = ROOT / "examples" / "conversations"
TEMPLATES = {"memory-v1", "language-adaptation-v1", "grice-v1", "ssa-v1", "context-adherence-v1",
             "bias-guardian-v1", "bestof-contest-v1"}


@pytest.fixture(scope="module")
def judge() -> StubJudge:
    server = StubJudge().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def runs(proxy: RunningProxy, stub, judge: StubJudge, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One run per model route (demo, stub): {route: {"dir", "result", "run_id", "stdout", "judged"}}
    ("judged": the judge requests of that run alone; other tests of this module use the judge too)."""
    stub.reset()
    out: dict = {}
    for route in ("demo", "stub"):
        first_request = len(judge.judge_requests)
        directory = tmp_path_factory.mktemp(f"conversation-{route}")
        run_id = f"conv-{route}-{uuid.uuid4().hex[:8]}"
        done = sonate("eval", "conversation", str(EXAMPLE / "support.jsonl"), "--proxy", proxy.url,
                      "--api-key", CLIENT_KEY, "--model", route, "--judge-model", "openai/judge",
                      "--judge-api-base", judge.url, "--judge-api-key", "judge-key",
                      "--lexicon", str(EXAMPLE / "toxic-lexicon.tsv"),
                      "--policies", str(proxy.config_path.parent / "policies"),
                      "--out", str(directory / "result.json"), "--markdown", str(directory / "result.md"),
                      "--html", str(directory / "result.html"), "--ledger", proxy.ledger_url,
                      "--export-jsonl", str(directory / "runs.jsonl"), "--run-id", run_id, "--no-progress")
        assert done.returncode == 0, done.stderr[-3000:]
        out[route] = {"dir": directory, "run_id": run_id, "stdout": done.stdout,
                      "result": json.loads((directory / "result.json").read_text()),
                      "judged": list(judge.judge_requests[first_request:])}
    return out


def _receipt(proxy: RunningProxy, receipt_id: str) -> dict:
    request = urllib.request.Request(f"{proxy.url}/v1/receipts/{receipt_id}",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("route", ["demo", "stub"])
def test_every_answer_carries_its_receipt(runs: dict, proxy: RunningProxy, route: str) -> None:
    result = runs[route]["result"]
    assert result["format"] == "sonate.eval.conversation/v1" and result["run_id"] == runs[route]["run_id"]
    assert result["source"]["model"] == route and result["summary"]["turns"] == 13
    for turn in result["turns"]:
        assert turn["receipt_id"], turn
        assert _receipt(proxy, turn["receipt_id"])["receipt_id"] == turn["receipt_id"]
    assert result["judge"] == {"model": "openai/judge", "templates": sorted(TEMPLATES)}
    for key in ("humanity_entropy", "risk_total", "non_biased_share", "memory", "language_adaptation", "grice",
                "ssa", "context_adherence", "bestof_confidence"):
        assert result["summary"][key] is not None, key


def test_demo_answers_are_the_demo_model(runs: dict) -> None:
    result = runs["demo"]["result"]
    assert {t["action"] for t in result["turns"]} <= {"allow", "mask", "escalate"}
    assert result["clustering"]["skipped"].startswith("needs at least 5 distinct")  # one answer text


def test_stub_run_scores_are_the_judges_on_the_proxy_answers(runs: dict) -> None:
    result = runs["stub"]["result"]
    judged = runs["stub"]["judged"]
    assert TEMPLATES <= {t for t, _, _ in judged}
    seen = {(t, json.dumps(f, sort_keys=True)) for t, f, _ in judged}
    conversations = [json.loads(line) for line in (EXAMPLE / "support.jsonl").read_text().splitlines()]
    refund = conversations[0]
    answers = {}
    for template, fields, _ in judged:  # the answers the judge saw are the proxy's
        if template == "context-adherence-v1" and fields["context"] == refund["context"]:
            answers[fields["query"]] = fields["answer"]
    first = refund["conversation"][0]
    answer = answers[first["query"]]
    assert answer.startswith("Stub answer:")
    turn = next(t for t in result["turns"] if (t["session_id"], t["qa_id"]) == ("refund-1", "q1"))
    expected = containment(answer, refund["context"] + " " + first["ground_truth_assistant"])
    assert turn["context_adherence"]["score"] == pytest.approx(expected)
    grice = {m: HANDLERS["grice-v1"]({"maxim": m, "query": first["query"], "answer": answer})["score"]
             for m in ("quantity", "quality", "relation", "manner")}
    assert turn["quality"]["grice"]["G"] == pytest.approx(sum(grice.values()) / 4)
    assert ("memory-v1", json.dumps({"history": "(none)", "query": first["query"], "answer": answer},
                                    sort_keys=True)) in seen
    assert turn["quality"]["memory"] == 10.0
    spanish = next(t for t in result["turns"] if (t["session_id"], t["qa_id"]) == ("spanish-1", "q1"))
    assert spanish["quality"]["language_adaptation"] == 1.0  # the stub echoes the Spanish query


def test_stub_run_bestof_and_clusters(runs: dict) -> None:
    result = runs["stub"]["result"]
    tournaments = {(b["session_id"], b["qa_id"]): b for b in result["bestof"]}
    four = tournaments[("refund-1", "q1")]
    assert four["candidates"] == 4 and four["rounds"] == 2 and len(four["contests"]) == 3
    three = tournaments[("password-1", "q1")]
    assert three["rounds"] == 2 and len(three["contests"]) == 2 and three["byes"] == [[1, 2]]
    assert three["winner_text"].startswith("Open the login page")  # covers the most query words
    clusters = result["clustering"]
    assert len(clusters["points"]) == 13 and clusters["embedder"].startswith("sentence-transformers/all-MiniLM-L6-v2")
    assert sum(c["size"] for c in clusters["clusters"].values()) == 13


def test_markdown_is_printed_and_written(runs: dict) -> None:
    run = runs["stub"]
    markdown = (run["dir"] / "result.md").read_text()
    assert markdown == run["stdout"]
    ssa = run["result"]["summary"]["ssa"]
    assert f"| SSA | {ssa:.3f} |" in markdown and "## BestOf tournaments" in markdown


def test_html_report_renders_in_chromium(runs: dict, browser) -> None:
    run = runs["stub"]
    page = run["dir"] / "result.html"
    browser.set_window_size(1200, 2400)
    browser.get(page.as_uri())
    circles = browser.execute_script("return document.querySelectorAll('svg.scatter circle').length")
    assert circles == len(run["result"]["clustering"]["points"])
    # the inline CSS is allowed by its hash in the CSP: a blocked stylesheet would leave the default width
    assert browser.execute_script("return getComputedStyle(document.body).maxWidth") == "1100px"
    shot = run["dir"] / "result.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_results_are_stored_exported_and_trended(runs: dict, proxy: RunningProxy, tmp_path: Path) -> None:
    exported = [json.loads(line) for line in (runs["stub"]["dir"] / "runs.jsonl").read_text().splitlines()]
    ids = [r["run_id"] for r in exported]
    assert ids.index(runs["demo"]["run_id"]) < ids.index(runs["stub"]["run_id"])
    today = datetime.now(timezone.utc).date()
    done = sonate("report", "--from", str(today - timedelta(days=1)), "--to", str(today + timedelta(days=2)),
                  "--ledger", proxy.ledger_url, "--policies", str(proxy.config_path.parent / "policies"),
                  "--keys", str(proxy.key_file), "--out", str(tmp_path / "kpi.json"),
                  "--html", str(tmp_path / "kpi.html"), "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    trend = json.loads((tmp_path / "kpi.json").read_text())["evaluation_trends"]["conversation"]
    by_id = {r["run_id"]: r for r in trend["runs"]}
    assert by_id[runs["stub"]["run_id"]]["ssa"] == pytest.approx(runs["stub"]["result"]["summary"]["ssa"])
    assert "Conversation metrics (Fair Forge)" in (tmp_path / "kpi.html").read_text()


@pytest.mark.parametrize("args, message", [
    (["missing.jsonl", "--metrics", "humanity"], "missing.jsonl"),
    ([str(EXAMPLE / "support.jsonl"), "--metrics", "humanity,vibes"], "unknown vibes"),
    ([str(EXAMPLE / "support.jsonl"), "--metrics", "quality"], "need a judge model"),
    ([str(EXAMPLE / "support.jsonl"), "--lexicon", "nope.tsv"], "--lexicon nope.tsv not found"),
])
def test_usage_errors_exit_2_without_traceback(args: list[str], message: str) -> None:
    done = sonate("eval", "conversation", *args, "--no-progress")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_recorded_answers_without_a_proxy(judge: StubJudge, tmp_path: Path) -> None:
    """The recorded answers are judged as they are (no replay, no receipt), stored in a SQLite store."""
    ledger = f"sqlite:///{tmp_path / 'results.db'}"
    done = sonate("eval", "conversation", str(EXAMPLE / "support.jsonl"), "--metrics", "humanity,quality,context",
                  "--judge-model", "openai/judge", "--judge-api-base", judge.url, "--judge-api-key", "judge-key",
                  "--out", str(tmp_path / "r.json"), "--ledger", ledger, "--export-jsonl", str(tmp_path / "runs.jsonl"),
                  "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    turns = {(t["session_id"], t["qa_id"]): t for t in result["turns"]}
    assert all(t["receipt_id"] is None for t in turns.values())
    wrong_language = turns[("spanish-1", "q2")]  # recorded: a Spanish question answered in English
    assert wrong_language["answer"] == "Shipping is free for orders over 25 euros."
    assert wrong_language["quality"]["language_adaptation"] == 0.0
    assert turns[("spanish-1", "q1")]["quality"]["language_adaptation"] == 1.0
    assert "bias" not in wrong_language and result["bestof"] == [] and result["clustering"] is None
    assert [json.loads(line)["run_id"] for line in (tmp_path / "runs.jsonl").read_text().splitlines()] == [result["run_id"]]
