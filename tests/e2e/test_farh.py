"""FAR-H: claim miner, verifier (oracle, regex, validators), arithmetic and `sonate eval hallucination`.

Real parts only: the oracle samples in tests/data (HaluEval QA, TruthfulQA with answers), the
real proxy and litellm for the proxy mode and the model-assisted pass; the stub is the provider.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from statsmodels.stats.proportion import proportion_confint

from proxy.evaluation.claims import Claim, dedupe, mine_claims, normalise, parse_model_spans, split_sentences
from proxy.evaluation.data import read_halueval_qa, read_truthfulqa
from proxy.evaluation.hallucination import OutputRecord, check_outputs, rate_block
from proxy.evaluation.oracle import (
    Oracle,
    halueval_entries,
    regex_rules_from_rows,
    truthfulqa_entries,
    validate_claim,
    verify_with_oracle,
    verify_with_regex,
)
from tests.support.forked import sonate
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, DATA, write_config
from tests.support.stub_upstream import Reply


@pytest.fixture(scope="module")
def halueval_rows() -> list[dict]:
    return read_halueval_qa(DATA)


@pytest.fixture(scope="module")
def truthfulqa_rows() -> list[dict]:
    return read_truthfulqa(DATA)


@pytest.fixture(scope="module")
def oracle(halueval_rows, truthfulqa_rows) -> Oracle:
    return Oracle(halueval_entries(halueval_rows) + truthfulqa_entries(truthfulqa_rows))


# --- claim miner -----------------------------------------------------------------------------

def test_sentences_split_on_ends_not_on_abbreviations_initials_or_decimals() -> None:
    text = "Mr. Burns funds it. George W. Bush won in 2000! It is 3.5 km long. Is it? Yes."
    assert [text[s:e] for s, e in split_sentences(text)] == [
        "Mr. Burns funds it.", "George W. Bush won in 2000!", "It is 3.5 km long.", "Is it?", "Yes."]
    assert split_sentences("") == []


def test_patterns_find_numbers_dates_entities_and_copulas() -> None:
    text = ("Firs have 48 species. Marilyn Monroe died on August 5, 1962. The capital of France is Paris. "
            "It was remade in 1940 for $4 million. I have no comment. What do you think? I think so.")
    claims = mine_claims(text)
    assert [c.text for c in claims] == ["Firs have 48 species.", "Marilyn Monroe died on August 5, 1962.",
                                        "The capital of France is Paris.", "It was remade in 1940 for $4 million."]
    kinds = {c.text: c.kinds for c in claims}
    assert kinds["Firs have 48 species."] == ("number",)
    assert {"date", "entity"} <= set(kinds["Marilyn Monroe died on August 5, 1962."])
    assert {"entity", "copula"} <= set(kinds["The capital of France is Paris."])
    assert claims[1].features["date"] == ["August 5, 1962"]
    assert claims[3].features["number"] == ["$4 million"]
    assert text[claims[2].start:claims[2].end] == claims[2].text


def test_direct_answer_is_a_claim_and_duplicates_collapse() -> None:
    # "Firs." matches no pattern: with a question it is the direct answer.
    assert mine_claims("Firs.") == []
    claims = mine_claims("Firs. Firs have 48 species. FIRS have 48 species!", question="Which genus has more species?")
    assert [(c.text, c.kinds) for c in claims] == [("Firs.", ("answer",)), ("Firs have 48 species.", ("number",))]
    assert normalise("The Firs!") == "firs"


def test_model_spans_are_parsed_located_and_deduplicated() -> None:
    text = "Chelone has four species. The genus was named in 1753."
    spans = parse_model_spans('```json\n{"claims": ["Chelone has four species", "named in 1753", "made up"]}\n```', text)
    assert [(c.text, c.start, c.kinds) for c in spans] == [
        ("Chelone has four species", 0, ("model",)), ("named in 1753", text.index("named"), ("model",)),
        ("made up", -1, ("model",))]
    merged = dedupe([*mine_claims(text), *spans])
    # no pattern finds the first sentence ("four" is a word): the model pass adds it; "named in
    # 1753" lies inside a mined sentence and merges into it; the paraphrase stays separate
    assert [c.text for c in merged] == ["The genus was named in 1753.", "Chelone has four species", "made up"]
    assert "model" in merged[0].kinds
    with pytest.raises(ValueError, match="not JSON"):
        parse_model_spans("Sure! Here are the claims", text)


# --- verification ---------------------------------------------------------------------------

def test_halueval_hallucinated_answer_is_caught_and_right_answer_passes(oracle, halueval_rows) -> None:
    row = next(r for r in halueval_rows if r["question"].startswith("Which genus has more species"))
    entry = oracle.lookup(row["question"])
    assert entry is not None and entry.source == "halueval"
    right = mine_claims(row["right_answer"], question=row["question"])
    wrong = mine_claims(row["hallucinated_answer"], question=row["question"])
    assert verify_with_oracle(right[0], entry).verdict == "pass"
    verdict = verify_with_oracle(wrong[0], entry)
    assert verdict.verdict == "fail" and verdict.reference == "Chelone has more species."
    # A full sentence restating the question's words still decides by the distinctive part.
    monroe = oracle.lookup(next(r["question"] for r in halueval_rows if "Marilyn Monroe die" in r["question"]))
    assert verify_with_oracle(mine_claims("Marilyn Monroe died on August 5, 1962.")[0], monroe).verdict == "pass"
    assert verify_with_oracle(mine_claims("Marilyn Monroe died during the production.")[0], monroe).verdict == "fail"
    # Both sides matched: undecided, left to a human.
    both = verify_with_oracle(mine_claims("Firs, or Chelone has more species.")[0], entry)
    assert both.verdict is None


def test_every_sample_reference_answer_gets_its_own_side_or_no_verdict(oracle) -> None:
    wrong = []
    for entry in oracle:
        for answers, bad in ((entry.correct, "fail"), (entry.incorrect, "pass")):
            for answer in answers:
                for claim in mine_claims(answer, question=entry.question)[:1]:
                    if verify_with_oracle(claim, entry).verdict == bad:
                        wrong.append((entry.id, answer))
    assert wrong == []


def test_truthfulqa_answers_and_regulated_domains(oracle, truthfulqa_rows) -> None:
    law = next(r for r in truthfulqa_rows if r["Category"] == "Law")
    entry = oracle.lookup(law["Question"])
    assert entry.domain == "legal" and entry.source == "truthfulqa"
    incorrect = law["Incorrect Answers"].split(";")[0].strip()
    assert verify_with_oracle(mine_claims(incorrect, question=law["Question"])[0], entry).verdict == "fail"
    assert verify_with_oracle(mine_claims(law["Best Answer"], question=law["Question"])[0], entry).verdict == "pass"


def test_regex_rules_and_validators() -> None:
    rules = regex_rules_from_rows([{"name": "boiling", "applies": r"water boils", "expect": r"\b(100 ?°?C|212 ?°?F)"}])
    ok, bad, other = (mine_claims(t)[0] for t in ("Water boils at 100 °C at sea level.", "Water boils at 90 °C.",
                                                   "Ice melts at 0 °C."))
    assert verify_with_regex(ok, rules).verdict == "pass"
    assert verify_with_regex(bad, rules).verdict == "fail"
    assert verify_with_regex(other, rules) is None
    with pytest.raises(ValueError, match="not a valid regular expression"):
        regex_rules_from_rows([{"name": "x", "applies": "(", "expect": "y"}])
    assert validate_claim(mine_claims("The treaty was signed on February 30, 1990.")[0]).verdict == "fail"
    assert validate_claim(mine_claims("The treaty was signed on 2001-13-01 in Paris.")[0]).verdict == "fail"
    assert validate_claim(mine_claims("Exactly 120% of voters chose him.")[0]).verdict == "fail"
    assert validate_claim(mine_claims("The treaty was signed on February 28, 1990.")[0]) is None


def test_methods_fall_through_oracle_regex_validator_human(oracle, halueval_rows) -> None:
    row = halueval_rows[0]
    rules = regex_rules_from_rows([{"name": "fir", "applies": "fir", "expect": "48"}])
    records = [OutputRecord("a", row["hallucinated_answer"], row["question"]),          # oracle fails it
               OutputRecord("b", "Firs have 12 species in total.", None),              # regex fails it
               OutputRecord("c", "Paris fell on February 31, 1871.", None, "legal"),   # validator fails it
               OutputRecord("d", "The Eiffel Tower is in Paris.", None)]               # nobody can: human
    checked = check_outputs(records, oracle, regex_rules=rules)
    assert [(c.record_id, c.verdict.method, c.verdict.verdict, c.domain) for c in checked] == [
        ("a", "oracle", "fail", "general"), ("b", "regex", "fail", "general"),
        ("c", "validator", "fail", "legal"), ("d", "human", None, "general")]


# --- arithmetic -----------------------------------------------------------------------------

@pytest.mark.parametrize("failed,checked", [(0, 50), (3, 400), (7, 120), (49, 49)])
def test_farh_rate_and_wilson_interval_match_statsmodels(failed: int, checked: int) -> None:
    block = rate_block(failed, checked, "general")
    low, high = proportion_confint(failed, checked, alpha=0.05, method="wilson")
    assert block["rate"] == pytest.approx(failed / checked, abs=1e-15)
    assert (block["ci_low"], block["ci_high"]) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_farh_display_na_and_targets() -> None:
    block = rate_block(3, 400, "general")
    assert block["display"] == "0.75%" and block["published"] and block["meets_target"] is True
    assert rate_block(3, 400, "regulated")["meets_target"] is False   # 0.75 % ≥ 0.25 %
    assert rate_block(1, 500, "regulated")["meets_target"] is True    # 0.20 % < 0.25 %
    assert rate_block(1, 400, "regulated")["meets_target"] is False   # 0.25 % is not < 0.25 %
    na = rate_block(0, 49, "general")
    assert (na["display"], na["published"], na["meets_target"], na["rate"]) == ("NA", False, None, 0.0)
    assert rate_block(0, 50, "general")["display"] == "0.00%"
    empty = rate_block(0, 0, "regulated")
    assert empty["rate"] is None and empty["ci_low"] is None and empty["display"] == "NA"


# --- the command ----------------------------------------------------------------------------

def test_cli_on_an_outputs_file(tmp_path: Path, halueval_rows, truthfulqa_rows) -> None:
    lines = []
    for i, row in enumerate(halueval_rows):
        hallucinated = i % 3 == 0
        lines.append({"id": f"h{i}", "question": row["question"],
                      "output": row["hallucinated_answer"] if hallucinated else row["right_answer"],
                      "ts": f"2026-11-2{i % 3}T10:00:00Z"})
    for i, row in enumerate(truthfulqa_rows):
        incorrect = row["Incorrect Answers"].split(";")[0].strip()
        lines.append({"id": f"t{i}", "question": row["Question"], "output": incorrect if i % 2 else row["Best Answer"]})
    lines.append({"id": "notice", "output": "I'm sorry, I can't help with that.", "action": "refuse"})
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "farh.json"
    result = sonate("eval", "hallucination", "--outputs", str(outputs), "--data-dir", str(DATA), "--out", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    hallucinated = sum(1 for line in lines if line["id"].startswith("h") and int(line["id"][1:]) % 3 == 0)
    incorrect = sum(1 for line in lines if line["id"].startswith("t") and int(line["id"][1:]) % 2)
    assert doc["format"] == "sonate.farh/v1" and doc["inputs"]["outputs"] == len(lines) - 1
    assert doc["inputs"]["outputs_not_model"] == 1
    assert doc["window"] == {"start": "2026-11-20T10:00:00Z", "end": "2026-11-22T10:00:00Z"}
    failed_ids = {d["record_id"] for d in doc["details"] if d["verdict"] == "fail"}
    assert {f"h{i}" for i in range(0, len(halueval_rows), 3)} <= failed_ids
    assert not any(i.startswith("h") and int(i[1:]) % 3 for i in failed_ids)   # no right answer failed
    claims = doc["claims"]
    assert claims["failed"] == len(failed_ids) and hallucinated <= claims["failed"] <= hallucinated + incorrect
    assert claims["checked"] + claims["unchecked"] == claims["mined"] == len(doc["details"])
    overall = doc["overall"]
    low, high = proportion_confint(claims["failed"], claims["checked"], method="wilson")
    assert overall["rate"] == pytest.approx(claims["failed"] / claims["checked"])
    assert (overall["ci_low"], overall["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert overall["published"] is (claims["checked"] >= 50)
    assert overall["tier"] == "mixed" and overall["target"] is None
    regulated = doc["per_tier"]["regulated"]
    assert regulated["checked"] == sum(doc["per_domain"][d]["checked"] for d in ("legal", "health") if d in doc["per_domain"])
    assert regulated["checked"] > 0 and regulated["display"] == "NA"          # < 50 claims
    assert sum(b["checked"] for b in doc["per_domain"].values()) == claims["checked"]
    assert "FAR-H" in result.stdout


def test_cli_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    result = sonate("eval", "hallucination", "--outputs", str(bad), "--data-dir", str(DATA), "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "record 1: field 'output' must be a string" in result.stderr
    assert "Traceback" not in result.stderr
    result = sonate("eval", "hallucination", "--outputs", str(bad), "--data-dir", str(tmp_path), "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "halueval" in result.stderr and "Traceback" not in result.stderr
    result = sonate("eval", "hallucination", "--outputs", str(bad), "--oracle", "wiki", "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "--oracle must list" in result.stderr


def test_model_assisted_pass_through_litellm_and_the_stub(tmp_path: Path, upstream, monkeypatch, oracle) -> None:
    from proxy.config import load_config
    from proxy.evaluation.claim_spans import detect_spans

    monkeypatch.setenv("STUB_PROVIDER_KEY", "stub-secret")
    monkeypatch.setenv("SONATE_TEST_ADMIN_KEY", ADMIN_KEY)
    config = load_config(str(write_config(tmp_path, upstream.url, "sqlite:///" + str(tmp_path / "l.db"), 0)))
    upstream.queue(Reply('{"claims": ["Chelone has 4 species", "The genus Abies was described by Miller"]}'),
                   Reply("I cannot do that"))
    texts = [("r1", "Chelone has 4 species. The genus Abies was described by Miller"), ("r2", "Plain words.")]
    found = asyncio.run(detect_spans(config, "stub", texts, concurrency=1))
    sent = upstream.received()
    assert len(sent) == 2 and sent[0]["model"] == "stub-model"
    assert "extract checkable factual claims" in sent[0]["messages"][0]["content"]
    assert sent[0]["messages"][1]["content"].endswith(texts[0][1])
    assert [c.text for c in found.claims["r1"]] == ["Chelone has 4 species", "The genus Abies was described by Miller"]
    assert all(isinstance(c, Claim) and c.kinds == ("model",) for c in found.claims["r1"])
    assert "not JSON" in found.failures["r2"]
    with pytest.raises(ValueError, match="not a model_name"):
        asyncio.run(detect_spans(config, "nope", texts))


def test_proxy_mode_asks_the_oracle_questions_through_the_proxy(tmp_path: Path, proxy, upstream, halueval_rows) -> None:
    rows = halueval_rows[:4]
    upstream.queue(Reply(rows[0]["right_answer"]), Reply(rows[1]["hallucinated_answer"]),
                   Reply(rows[2]["right_answer"]), Reply(rows[3]["hallucinated_answer"]))
    out, saved = tmp_path / "farh.json", tmp_path / "outputs.jsonl"
    result = sonate("eval", "hallucination", "--proxy", proxy.url, "--api-key", CLIENT_KEY, "--model", "stub",
                    "--oracle", "halueval", "--data-dir", str(DATA), "--limit", "4", "--concurrency", "1",
                    "--out", str(out), "--save-outputs", str(saved))
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in saved.read_text().splitlines()]
    assert [a["question"] for a in answers] == [r["question"] for r in rows]
    assert len(upstream.received()) == 4   # every question reached the model (names masked by Privacy)
    # the domain is the receipt's intent (the Compliance classifier), e.g. "general" or "code"
    assert all(a["receipt_id"] and a["domain"] and a["action"] in ("allow", "mask") for a in answers)
    doc = json.loads(out.read_text())
    fails = sorted({d["record_id"] for d in doc["details"] if d["verdict"] == "fail"})
    assert fails == ["halueval:1", "halueval:3"]
    assert set(doc["per_domain"]) == {a["domain"] for a in answers}
    assert doc["inputs"]["source"] == proxy.url and doc["overall"]["display"] == "NA"
