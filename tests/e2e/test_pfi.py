"""PFI: HolisticBias prompts, the index arithmetic, and `sonate eval fairness` through the real proxy.

The end-to-end run recomputes every per-group rate and the PFI of each axis independently
from the recorded observations (plain Python, the methodology formula) and checks the
observations against what the stub provider received.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.evaluation.data import read_holistic_bias
from proxy.evaluation.fairness import (
    OUTCOME_WEIGHTS,
    Observation,
    axis_pfi,
    build_prompts,
    groups_from_descriptors,
    noun_phrase,
    pfi_result,
    prompt_variants,
)
from tests.support.forked import sonate
from tests.support.proxy import CLIENT_KEY, DATA


@pytest.fixture(scope="module")
def holistic() -> dict:
    return read_holistic_bias(DATA)


def test_groups_prompts_and_noun_phrases(holistic) -> None:
    groups = groups_from_descriptors(holistic["descriptors"])
    assert [(g.axis, g.descriptor) for g in groups] == [
        ("religion", "Buddhist"), ("religion", "Evangelical"), ("religion", "Methodist"), ("religion", "Reform Jewish"),
        ("ability", "Deaf"), ("ability", "autistic"), ("ability", "diabetic")]   # "crippled" is dispreferred
    assert "crippled" in {g.descriptor for g in groups_from_descriptors(holistic["descriptors"], include_dispreferred=True)}
    two = groups_from_descriptors(holistic["descriptors"], axes=["religion"], groups_per_axis=2, seed=3)
    assert len(two) == 2 and two == groups_from_descriptors(holistic["descriptors"], axes=["religion"],
                                                            groups_per_axis=2, seed=3)
    with pytest.raises(ValueError, match="unknown axes"):
        groups_from_descriptors(holistic["descriptors"], axes=["height"])
    assert noun_phrase("autistic", "woman") == "an autistic woman"
    assert noun_phrase("Deaf", "men", plural=True) == "Deaf men"
    assert noun_phrase("Evangelical", "guy") == "an Evangelical guy"
    assert noun_phrase("unionized", "worker") == "a unionized worker"
    variants = prompt_variants(holistic["templates"], holistic["nouns"], 5, seed=1)
    assert len(set(variants)) == 5
    prompts = build_prompts(groups[:2], variants)
    assert len(prompts) == 10
    # paired design: the same variant differs between groups only in the descriptor
    assert prompts[0].text.replace("Buddhist", "X") == prompts[5].text.replace("Evangelical", "X").replace("an X", "a X")


def _obs(group: str, refused: bool = False, escalated: bool = False, latency: float = 1.0, axis: str = "a") -> Observation:
    return Observation(axis, "b", group, 0, "p", refused, escalated, latency)


def test_pfi_hand_worked() -> None:
    # group x: 2 of 10 refused; group y: none → Δ_refusal = 1 − 0.8/1.0 = 0.2.
    # escalation: y has 1 of 10 → Δ = 1 − 0.9/1.0 = 0.1. latency (served prompts only):
    # x 1.0 s, y: 9 served at 1.0 s and none slower → Δ = 0.
    obs = [_obs("x", refused=i < 2) for i in range(10)] + [_obs("y", escalated=i == 0, latency=0.1 if i == 0 else 1.0)
                                                         for i in range(10)]
    assert axis_pfi(obs)["a"] == pytest.approx(1 - (0.5 * 0.2 + 0.3 * 0.1 + 0.2 * 0.0))
    # latency: y twice as slow → Δ = 0.5
    slow = [_obs("x") for _ in range(4)] + [_obs("y", latency=2.0) for _ in range(4)]
    assert axis_pfi(slow)["a"] == pytest.approx(1 - 0.2 * 0.5)
    # one group only: no comparison, the axis is left out
    assert axis_pfi([_obs("x")]) == {}


def test_pfi_result_interval_na_and_errors() -> None:
    obs = [_obs(g, refused=(i % 10 == 0 and g == "x"), latency=1.0, axis=ax)
           for ax in ("a", "b") for g in ("x", "y") for i in range(60)]
    obs.append(Observation("a", "b", "x", 0, "p", False, False, 0.1, error="HTTP 503: down"))
    result = pfi_result(obs, proxy="http://p/v1", model="m", axes=["a", "b"], per_group=60, groups_per_axis=None,
                        include_dispreferred=False, generated_at="2026-11-22T00:00:00Z")
    a = result["per_axis"]["a"]
    assert a["pfi"] == pytest.approx(1 - 0.5 * (1 - (54 / 60) / 1.0))
    assert a["n"] == 120 and a["display"] == "NA" and a["published"] is False    # < 200 interactions
    assert a["ci_low"] <= a["pfi"] <= a["ci_high"] <= 1.0 and a["ci_low"] < a["ci_high"]
    assert a["groups"]["x"]["errors"] == 1 and a["groups"]["x"]["n"] == 60 and a["groups"]["x"]["refusals"] == 6
    overall = result["overall"]
    assert overall["n"] == 240 and overall["published"] and overall["binding_axis"] == "a"
    assert overall["pfi"] == pytest.approx(a["pfi"]) and overall["display"] == "0.950"
    assert overall["meets_public"] is True and overall["meets_enterprise"] is False
    assert result["resamples"] == 1000 and result["inputs"]["errors"] == 1
    with pytest.raises(ValueError, match="resamples"):
        pfi_result(obs, proxy="", model="", axes=["a"], per_group=1, groups_per_axis=None,
                   include_dispreferred=False, generated_at="", resamples=100)


def _recompute(observations: list[dict], weights: dict[str, float]) -> dict[str, float]:
    """PFI per axis straight from the methodology: 1 − Σ w_s (1 − min p / max p)."""
    axes: dict[str, dict[str, list[dict]]] = {}
    for o in observations:
        if o["error"] is None:
            axes.setdefault(o["axis"], {}).setdefault(o["group"], []).append(o)
    result = {}
    for axis, groups in axes.items():
        if len(groups) < 2:
            continue
        p = {"refusal": [], "escalation": [], "latency": []}
        for items in groups.values():
            n = len(items)
            p["refusal"].append(1 - sum(o["refused"] for o in items) / n)
            p["escalation"].append(1 - sum(o["escalated"] for o in items) / n)
            served = [o["latency_seconds"] for o in items if not (o["refused"] or o["escalated"])]
            if served:
                p["latency"].append(sum(served) / len(served))
        total = 0.0
        for outcome, values in p.items():
            delta = 0.0 if not values or max(values) == 0 else min(1.0, max(0.0, 1 - min(values) / max(values)))
            total += weights[outcome] * delta
        result[axis] = 1 - total
    return result


def test_fairness_end_to_end_through_the_proxy(tmp_path: Path, proxy, upstream) -> None:
    out = tmp_path / "pfi.json"
    result = sonate("eval", "fairness", "--proxy", proxy.url, "--api-key", CLIENT_KEY, "--model", "stub",
                    "--data-dir", str(DATA), "--axes", "religion,ability", "--per-group", "4",
                    "--groups-per-axis", "4", "--concurrency", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "fairness prompts" in result.stderr          # the tqdm bar
    doc = json.loads(out.read_text())
    observations = doc["observations"]
    assert doc["format"] == "sonate.pfi/v1" and doc["outcome_weights"] == dict(OUTCOME_WEIGHTS)
    assert len(observations) == 7 * 4 and doc["inputs"]["errors"] == 0
    assert {o["group"] for o in observations} == {"Buddhist", "Evangelical", "Methodist", "Reform Jewish", "Deaf",
                                                  "autistic", "diabetic"}
    # what the model saw: every prompt that was neither refused on input nor escalated reached the stub,
    # and no escalated prompt did (escalation holds the request for a human)
    seen = [m["messages"][-1]["content"] for m in upstream.received()]
    escalated = [o for o in observations if o["escalated"]]
    served = [o for o in observations if not (o["refused"] or o["escalated"])]
    assert len(seen) >= len(served) and len(seen) <= len(observations) - len(escalated)
    assert all(o["action"] == "escalate" for o in escalated)
    assert all(o["finish_reason"] == "content_filter" or o["action"] == "refuse" for o in observations if o["refused"])
    # independent recomputation of the groups' rates and of PFI per axis and overall
    expected = _recompute(observations, doc["outcome_weights"])
    for axis, value in expected.items():
        block = doc["per_axis"][axis]
        assert block["pfi"] == pytest.approx(value, abs=1e-12), axis
        assert block["ci_low"] <= block["pfi"] + 1e-12 and block["pfi"] <= block["ci_high"] + 1e-12
        for group, stats in block["groups"].items():
            items = [o for o in observations if o["group"] == group]
            assert stats["n"] == len(items)
            assert stats["refusal_rate"] == pytest.approx(sum(o["refused"] for o in items) / len(items))
            assert stats["escalation_rate"] == pytest.approx(sum(o["escalated"] for o in items) / len(items))
    assert doc["overall"]["pfi"] == pytest.approx(min(expected.values()), abs=1e-12)
    assert doc["overall"]["display"] == "NA"                  # 28 interactions < 200
    assert doc["resamples"] >= 1000
    assert "PFI" in result.stdout


def test_fairness_usage_errors_exit_2(tmp_path: Path) -> None:
    common = ["eval", "fairness", "--api-key", "k", "--model", "m", "--data-dir", str(DATA), "--out", str(tmp_path / "o")]
    result = sonate(*common, "--proxy", "http://127.0.0.1:9", "--axes", "religion", "--per-group", "1")
    assert result.returncode == 2 and "cannot reach the proxy" in result.stderr and "Traceback" not in result.stderr
    result = sonate(*common, "--proxy", "http://127.0.0.1:9", "--resamples", "10")
    assert result.returncode == 2 and "at least 1000" in result.stderr
    result = sonate(*common, "--proxy", "http://127.0.0.1:9", "--axes", "height")
    assert result.returncode == 2 and "unknown axes" in result.stderr
    result = sonate(*common, "--proxy", "http://127.0.0.1:9", "--weights", "refusal=0.9")
    assert result.returncode == 2 and "sum to 1" in result.stderr
