"""Judge templates and the Judge client, against the stub judge over real HTTP (litellm → aiohttp).

The stub judge's scores are recomputed here independently (word sets written out in each test), so a
wrong field rendering, a lost sample or a mis-normalised score fails."""

from __future__ import annotations

import asyncio
import re
import statistics
from pathlib import Path

import pytest

from proxy.evaluation.judge import (
    TEMPLATE_DIR,
    Judge,
    JudgeError,
    available_templates,
    load_template,
    parse_answer,
)
from tests.support.stub_judge import StubJudge

SHIPPED = ("semantic-match-v1", "groundedness-v1", "stability-v1", "harm-v1", "jailbreak-v1")


@pytest.fixture(scope="module")
def judge_server():
    server = StubJudge().start()
    yield server
    server.stop()


@pytest.fixture()
def stub(judge_server: StubJudge) -> StubJudge:
    judge_server.reset()
    return judge_server


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


@pytest.mark.parametrize("template_id", SHIPPED)
def test_shipped_templates_load_and_follow_the_contract(template_id: str) -> None:
    t = load_template(template_id)
    assert t.id == template_id and t.path == TEMPLATE_DIR / f"{template_id}.yaml"
    assert f"template: {template_id}" in t.system.splitlines()
    assert '"score"' in t.system and '"reasoning"' in t.system  # the output contract is stated to the judge
    messages = t.render(**{f: f"<<{f} value>>" for f in t.fields})
    assert [m["role"] for m in messages] == ["system", "user"]
    for f in t.fields:
        assert f"<{f}>\n<<{f} value>>\n</{f}>" in messages[1]["content"]


def test_every_shipped_template_is_listed() -> None:
    assert set(SHIPPED) <= set(available_templates())


@pytest.mark.parametrize("template_id", available_templates())
def test_every_template_in_the_folder_loads(template_id: str) -> None:
    """Any template added later (other commands' judges) meets the same checks."""
    template = load_template(template_id)
    assert '"score"' in template.system and template.render(**{f: "x" for f in template.fields})


def test_unknown_template_names_the_file() -> None:
    with pytest.raises(JudgeError, match=r"unknown judge template 'nope-v9'.*nope-v9\.yaml"):
        load_template("nope-v9")


def test_template_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad-v1.yaml").write_text("name: bad\nversion: 1\nscale: [0, 1]\nfields: [a]\nsystem: x\n")
    with pytest.raises(JudgeError, match=r"bad-v1\.yaml: judge template lacks user"):
        load_template("bad-v1", tmp_path)
    (tmp_path / "nol-v1.yaml").write_text("name: nol\nversion: 1\nscale: [0, 1]\nfields: [a]\nsystem: x\nuser: '{a}'\n")
    with pytest.raises(JudgeError, match=r"nol-v1\.yaml: the system text must contain the line 'template: nol-v1'"):
        load_template("nol-v1", tmp_path)
    (tmp_path / "sc-v1.yaml").write_text("name: sc\nversion: 1\nscale: [5, 1]\nfields: [a]\n"
                                         "system: 'template: sc-v1'\nuser: '{a}'\n")
    with pytest.raises(JudgeError, match=r"sc-v1\.yaml: scale"):
        load_template("sc-v1", tmp_path)


def test_render_rejects_missing_and_undeclared_fields() -> None:
    t = load_template("groundedness-v1")
    with pytest.raises(JudgeError, match=r"missing fields \['context'\]"):
        t.render(answer="a")
    with pytest.raises(JudgeError, match=r"undeclared fields \['extra'\]"):
        t.render(answer="a", context="c", extra="x")


@pytest.mark.parametrize("text, score, extra", [
    ('{"score": 0.25, "reasoning": "r"}', 0.25, {}),
    ('Sure!\n```json\n{"score": 1, "reasoning": "r", "k": [1]}\n```', 1.0, {"k": [1]}),
    ('My verdict: {"score": 0, "reasoning": "r"} done', 0.0, {}),
])
def test_parse_answer_accepts_the_contract(text: str, score: float, extra: dict) -> None:
    assert parse_answer(text, load_template("harm-v1")) == (score, "r", extra)


@pytest.mark.parametrize("text, message", [
    ("no json here", "not a JSON object"), ('{"reasoning": "r"}', "no numeric score"),
    ('{"score": true}', "no numeric score"), ('{"score": 1.5}', "outside the scale"),
])
def test_parse_answer_rejects_off_contract(text: str, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        parse_answer(text, load_template("harm-v1"))


def test_judge_over_http_scores_semantic_match(stub: StubJudge) -> None:
    judge = Judge("openai/judge-model", api_base=stub.url, api_key="judge-key")
    answer, reference = "The capital of France is Paris.", "Paris is the French capital city"
    verdict = asyncio.run(judge.score("semantic-match-v1", question="Capital?", answer=answer, reference=reference))
    expected = len(words(reference) & words(answer)) / len(words(reference))  # paris, is, the, capital of 6
    assert expected == pytest.approx(4 / 6)
    assert verdict.score == pytest.approx(expected) and verdict.normalized == pytest.approx(expected)
    assert (verdict.template_id, verdict.model) == ("semantic-match-v1", "openai/judge-model")
    [(template_id, fields, body)] = stub.judge_requests
    assert template_id == "semantic-match-v1" and body["temperature"] == 0 and body["model"] == "judge-model"
    assert fields == {"question": "Capital?", "reference": reference, "answer": answer}


def test_judge_keeps_extra_keys_and_reasoning(stub: StubJudge) -> None:
    judge = Judge("openai/j", api_base=stub.url, api_key="k")
    v = asyncio.run(judge.score("groundedness-v1", answer="Shipping takes 9 days", context="Shipping takes 3 days"))
    assert v.score == pytest.approx(3 / 4)  # shipping, takes, days of shipping, takes, 9, days
    assert v.extra == {"unsupported": ["9"]} and v.reasoning


def test_samples_are_averaged_with_their_std(stub: StubJudge) -> None:
    stub.script("harm-v1", {"score": 0.2, "reasoning": "a"}, {"score": 0.6, "reasoning": "b"},
                {"score": 1.0, "reasoning": "c"})
    judge = Judge("openai/j", api_base=stub.url, api_key="k", samples=3)
    v = asyncio.run(judge.score("harm-v1", prompt="p", answer="a"))
    assert v.samples == (0.2, 0.6, 1.0)
    assert v.score == pytest.approx(statistics.fmean([0.2, 0.6, 1.0]))
    assert v.std == pytest.approx(statistics.stdev([0.2, 0.6, 1.0]))
    assert v.reasoning == "a" and len(stub.judge_requests) == 3


def test_scale_is_normalised(stub: StubJudge, tmp_path: Path) -> None:
    (tmp_path / "ten-v2.yaml").write_text(
        "name: ten\nversion: 2\nscale: [1, 10]\nfields: [answer]\n"
        "system: \"template: ten-v2\\nReply {\\\"score\\\": n, \\\"reasoning\\\": r}\"\nuser: \"<answer>\\n{answer}\\n</answer>\"\n")
    stub.script("ten-v2", {"score": 7, "reasoning": "ok"})
    v = asyncio.run(Judge("openai/j", api_base=stub.url, api_key="k", template_dir=tmp_path).score("ten-v2", answer="x"))
    assert (v.score, v.normalized) == (7.0, pytest.approx((7 - 1) / 9))


def test_off_contract_answer_and_provider_error_raise(stub: StubJudge) -> None:
    judge = Judge("openai/j", api_base=stub.url, api_key="k")
    stub.script("harm-v1", '{"score": 3, "reasoning": "x"}')
    with pytest.raises(JudgeError, match="outside the scale"):
        asyncio.run(judge.score("harm-v1", prompt="p", answer="a"))
    with pytest.raises(JudgeError, match="judge model openai/j failed"):
        asyncio.run(Judge("openai/j", api_base="http://127.0.0.1:9/v1", api_key="k", timeout=5)
                    .score("harm-v1", prompt="p", answer="a"))
