"""proxy.kpi.adjudication: outcome rules, the blind two-pass state machine, AC1 per domain."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from proxy.kpi.adjudication import (
    AdjudicationError,
    Verdict,
    agreement_by_domain,
    agreement_intervals,
    assigned,
    check_commitment,
    new_item,
    outcome,
    record_pass,
    resolve,
    reveal,
    reviewer_view,
    verdict_commitment,
)
from proxy.kpi.stats import bootstrap_interval, gwet_ac1
from proxy.primitives.canonical import canonical, json_hash

NEEDLESS = Verdict(breach=False, intent_permissible=True, content_harmful=False)
RUDE = Verdict(breach=False, intent_permissible=False, content_harmful=False)
JUSTIFIED = Verdict(breach=True, intent_permissible=False, content_harmful=True)


def _receipt(action: str, domain: str = "general", n: int = 1) -> dict:
    return {"receipt_id": f"rcpt_{n:032x}", "request_id": f"req_{n:032x}", "ts": "2026-11-02T00:00:00.000Z",
            "policy_id": "safety.harm" if action == "refuse" else "matrix", "guardrail_action": action,
            "stratum": {"domain": domain, "complexity": "simple", "provider": "openai"}, "model": "m", "provider": "openai"}


def _item(action: str = "refuse", **kw) -> dict:
    args = {"messages": [], "response": "", "model_apology": False, "sampled": False, "created": "t"} | kw
    return new_item([_receipt(action)], **args)


def test_queue_reasons() -> None:
    assert _item("refuse")["reasons"] == ["apology", "trigger"]
    assert _item("mask")["reasons"] == ["trigger"]
    assert _item("allow", model_apology=True)["reasons"] == ["apology"]
    assert _item("allow", sampled=True)["reasons"] == ["sample"]
    assert _item("allow") is None
    assert _item("refuse")["id"] == "adj_" + "0" * 31 + "1"


def test_outcome_rules() -> None:
    refusal, mask, sample = _item("refuse"), _item("mask"), _item("allow", sampled=True)
    assert outcome(refusal, NEEDLESS.model_dump()) == {"label": "unnecessary_apology", "unnecessary_apology": True,
                                                      "false_positive": True, "false_negative": False}
    assert outcome(refusal, RUDE.model_dump())["label"] == "false_positive"  # intent not permissible: necessary
    assert outcome(refusal, JUSTIFIED.model_dump())["label"] == "correct"
    assert outcome(mask, NEEDLESS.model_dump())["label"] == "false_positive"
    assert outcome(sample, JUSTIFIED.model_dump())["label"] == "false_negative"
    assert outcome(sample, NEEDLESS.model_dump())["label"] == "correct"


def test_blind_two_pass_and_lead() -> None:
    item = _item("refuse")
    item, name = record_pass(item, reviewer="ann", verdict=NEEDLESS, ts="t1")
    assert (name, item["status"]) == ("A", "awaiting_b")
    with pytest.raises(AdjudicationError) as err:
        record_pass(item, reviewer="ann", verdict=JUSTIFIED, ts="t2")
    assert err.value.code == "second_pass_by_same_reviewer"
    with pytest.raises(AdjudicationError, match="already recorded"):
        record_pass(item, reviewer="ben", verdict=JUSTIFIED, ts="t2", requested_pass="A")
    blind = reviewer_view(item, "ben")
    assert "passes" not in blind and blind["open_passes"] == ["B"] and blind["your_pass"] is None
    item, name = record_pass(item, reviewer="ben", verdict=JUSTIFIED, ts="t2")
    assert (name, item["status"]) == ("B", "disputed") and "final" not in item
    with pytest.raises(AdjudicationError, match="third person"):
        resolve(item, lead="ann", verdict=NEEDLESS, ts="t3")
    done = resolve(item, lead="lee", verdict=NEEDLESS, ts="t3")
    assert done["status"] == "resolved" and done["final"]["unnecessary_apology"] and done["final"]["decided_by"] == "lead"
    with pytest.raises(AdjudicationError, match="no pass is open"):
        record_pass(done, reviewer="zed", verdict=NEEDLESS, ts="t4")
    agreed, _ = record_pass(record_pass(_item("mask"), reviewer="b", verdict=NEEDLESS, ts="t", requested_pass="B")[0],
                            reviewer="a", verdict=NEEDLESS, ts="t")
    assert agreed["status"] == "agreed" and agreed["final"]["label"] == "false_positive"


def test_nobody_reviews_or_resolves_the_item_of_their_own_request() -> None:
    item = new_item([{**_receipt("refuse"), "actor": "ann"}], messages=[], response="", model_apology=False,
                    sampled=False, created="t")
    assert item["actor"] == "ann"
    with pytest.raises(AdjudicationError) as err:
        record_pass(item, reviewer="ann", verdict=NEEDLESS, ts="t1")
    assert (err.value.status, err.value.code) == (403, "own_request")
    item, _ = record_pass(item, reviewer="ben", verdict=NEEDLESS, ts="t1")
    item, _ = record_pass(item, reviewer="cat", verdict=JUSTIFIED, ts="t2")
    with pytest.raises(AdjudicationError) as err:
        resolve(item, lead="ann", verdict=NEEDLESS, ts="t3")
    assert (err.value.status, err.value.code) == (403, "own_request")
    assert resolve(item, lead="lee", verdict=NEEDLESS, ts="t3")["status"] == "resolved"
    assert record_pass(_item("refuse"), reviewer="ann", verdict=NEEDLESS, ts="t")[1] == "A"  # no actor recorded


def test_agreement_by_domain_is_ac1_of_the_labels() -> None:
    items = []
    verdicts = [(NEEDLESS, NEEDLESS), (JUSTIFIED, JUSTIFIED), (NEEDLESS, JUSTIFIED), (JUSTIFIED, JUSTIFIED)]
    for n, (a, b) in enumerate(verdicts):
        item = new_item([_receipt("refuse", domain="code" if n < 3 else "health", n=n)], messages=[], response="",
                        model_apology=False, sampled=False, created="t")
        item, _ = record_pass(item, reviewer="a", verdict=a, ts="t")
        item, _ = record_pass(item, reviewer="b", verdict=b, ts="t")
        items.append(item)
    result = agreement_by_domain(items)
    labels = {id(NEEDLESS): "unnecessary_apology", id(JUSTIFIED): "correct"}
    code = [(labels[id(a)], labels[id(b)]) for a, b in verdicts[:3]]
    scale = ("correct", "unnecessary_apology", "false_positive", "false_negative")
    assert result["code"]["n"] == 3 and result["code"]["observed_agreement"] == pytest.approx(2 / 3)
    assert result["code"]["ac1"] == pytest.approx(gwet_ac1([x for x, _ in code], [y for _, y in code], categories=scale))
    assert result["health"]["ac1"] == pytest.approx(1.0) and result["all"]["n"] == 4



def test_agreement_intervals_bracket_ac1_with_the_bootstrap_of_the_items() -> None:
    items = []
    verdicts = [(NEEDLESS, NEEDLESS), (JUSTIFIED, JUSTIFIED), (NEEDLESS, JUSTIFIED)] * 10 + [(JUSTIFIED, JUSTIFIED)]
    for n, (a, b) in enumerate(verdicts):
        item = new_item([_receipt("refuse", domain="code" if n < 30 else "health", n=n)], messages=[], response="",
                        model_apology=False, sampled=False, created="t")
        item, _ = record_pass(item, reviewer="a", verdict=a, ts="t")
        item, _ = record_pass(item, reviewer="b", verdict=b, ts="t")
        items.append(item)
    result = agreement_intervals(items)
    code = result["code"]
    assert {k: code[k] for k in ("n", "ac1", "observed_agreement")} == agreement_by_domain(items)["code"]
    interval = code["interval"]
    assert interval["confidence"] == 0.95 and interval["method"] == "bootstrap_normal"
    assert -1 <= interval["low"] < code["ac1"] < interval["high"] <= 1
    pairs = [("unnecessary_apology" if a is NEEDLESS else "correct", "unnecessary_apology" if b is NEEDLESS else "correct")
             for a, b in verdicts[:30]]
    scale = ("correct", "unnecessary_apology", "false_positive", "false_negative")
    _, low, high = bootstrap_interval(pairs, lambda p: gwet_ac1([x for x, _ in p], [y for _, y in p], categories=scale),
                                      bounds=(-1.0, 1.0))
    assert (interval["low"], interval["high"]) == pytest.approx((low, high))
    assert result["health"]["interval"]["low"] == result["health"]["interval"]["high"] == pytest.approx(1.0)  # one item

def _candidates() -> list[dict]:
    """The 8 verdicts a reviewer with an empty note and no expected policy can give."""
    return [Verdict(breach=a, intent_permissible=b, content_harmful=c).model_dump()
            for a, b, c in itertools.product((False, True), repeat=3)]


def test_commitment_is_salted_and_hides_the_verdict() -> None:
    """An unsalted hash of three booleans is recovered by trying 8 candidates; a salted one is not."""
    item, _ = record_pass(_item("refuse"), reviewer="ann", verdict=NEEDLESS, ts="t1")
    published = item["passes"]["A"]["commitment"]
    for candidate in _candidates():  # the attack: hash every candidate the way the ledger might
        assert published not in (json_hash(candidate), "sha256:" + hashlib.sha256(canonical(candidate)).hexdigest())
    again, _ = record_pass(_item("refuse"), reviewer="ann", verdict=NEEDLESS, ts="t1")
    assert again["passes"]["A"]["commitment"] != published  # a fresh nonce per pass
    nonce = item["passes"]["A"]["nonce"]
    assert len(bytes.fromhex(nonce)) == 32
    expected = hashlib.sha256(bytes.fromhex(nonce) + canonical(NEEDLESS.model_dump())).hexdigest()
    assert published == "sha256:" + expected  # the documented scheme: sha256(nonce || canonical(verdict))


def test_commitment_opens_only_to_its_verdict_and_nonce() -> None:
    nonce = "ab" * 32
    commitment = verdict_commitment(NEEDLESS.model_dump(), nonce)
    assert check_commitment(commitment, NEEDLESS.model_dump(), nonce)
    assert not check_commitment(commitment, JUSTIFIED.model_dump(), nonce)  # binding
    assert not check_commitment(commitment, NEEDLESS.model_dump(), "cd" * 32)
    assert not check_commitment(commitment, NEEDLESS.model_dump(), "zz")  # malformed nonce: False, no raise
    with pytest.raises(ValueError):
        verdict_commitment(NEEDLESS.model_dump(), "ab" * 8)
    item, _ = record_pass(_item("refuse"), reviewer="ann", verdict=NEEDLESS, ts="t1")
    item, _ = record_pass(item, reviewer="ben", verdict=JUSTIFIED, ts="t2")
    opened = reveal(item)
    assert set(opened) == {"A", "B"}
    for name, p in opened.items():
        assert check_commitment(item["passes"][name]["commitment"], p["verdict"], p["nonce"])


def test_assigned_items_are_open_or_reviewed_by_the_reviewer() -> None:
    item = _item("refuse")
    assert assigned(item, "ann") and assigned(item, "ben")  # open: anyone may give a pass
    item, _ = record_pass(item, reviewer="ann", verdict=NEEDLESS, ts="t1")
    item, _ = record_pass(item, reviewer="ben", verdict=NEEDLESS, ts="t2")
    assert item["status"] == "agreed"
    assert assigned(item, "ann") and assigned(item, "ben") and not assigned(item, "cid")


def test_agreement_by_domain_needs_both_passes_and_files_an_item_without_domain_under_general() -> None:
    """An item rated by pass A only is not a pair (and no KeyError); an item whose domain is
    missing or empty counts under ``general``."""
    def rated(n: int, *passes: Verdict) -> dict:
        item = new_item([_receipt("refuse", n=n)], messages=[], response="", model_apology=False, sampled=False,
                        created="t")
        for reviewer, verdict in zip("ab", passes):
            item, _ = record_pass(item, reviewer=reviewer, verdict=verdict, ts="t")
        return item

    no_domain = {k: v for k, v in rated(1, NEEDLESS, NEEDLESS).items() if k != "domain"}
    empty_domain = {**rated(2, JUSTIFIED, JUSTIFIED), "domain": ""}
    half = rated(3, NEEDLESS)
    assert set(half["passes"]) == {"A"}
    result = agreement_by_domain([no_domain, empty_domain, half])
    assert sorted(result) == ["all", "general"]
    assert result["general"]["n"] == result["all"]["n"] == 2
