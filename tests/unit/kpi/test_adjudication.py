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
    final_outcome,
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

def _double_rated(verdicts: list[tuple[Verdict, Verdict]], domain: str = "code") -> list[dict]:
    items = []
    for n, (a, b) in enumerate(verdicts):
        item = new_item([_receipt("refuse", domain=domain, n=n)], messages=[], response="", model_apology=False,
                        sampled=False, created="t")
        item, _ = record_pass(item, reviewer="a", verdict=a, ts="t")
        item, _ = record_pass(item, reviewer="b", verdict=b, ts="t")
        items.append(item)
    return items


def test_agreement_intervals_use_the_confidence_asked_for_and_stay_within_ac1s_range() -> None:
    """Another confidence gives the bootstrap interval at that confidence (narrower for a lower one);
    two items, one agreed and one not, spread so widely that the interval is clipped to [-1, 1]
    at both ends."""
    verdicts = [(NEEDLESS, NEEDLESS), (JUSTIFIED, JUSTIFIED), (NEEDLESS, JUSTIFIED)] * 10
    items = _double_rated(verdicts)
    wide, narrow = agreement_intervals(items)["code"]["interval"], agreement_intervals(items, 0.8)["code"]["interval"]
    assert narrow["confidence"] == 0.8 and narrow["high"] - narrow["low"] < wide["high"] - wide["low"]
    labels = {id(NEEDLESS): "unnecessary_apology", id(JUSTIFIED): "correct"}
    pairs = [(labels[id(a)], labels[id(b)]) for a, b in verdicts]
    scale = ("correct", "unnecessary_apology", "false_positive", "false_negative")
    _, low, high = bootstrap_interval(pairs, lambda p: gwet_ac1([x for x, _ in p], [y for _, y in p], categories=scale),
                                      confidence=0.8)
    assert (narrow["low"], narrow["high"]) == pytest.approx((low, high))
    tiny = agreement_intervals(_double_rated([(JUSTIFIED, JUSTIFIED), (NEEDLESS, JUSTIFIED)]), 0.9999)["code"]
    assert -1 < tiny["ac1"] < 1
    assert (tiny["interval"]["low"], tiny["interval"]["high"]) == (-1.0, 1.0)
    assert agreement_intervals(_double_rated([(JUSTIFIED, JUSTIFIED), (NEEDLESS, JUSTIFIED)]))["code"]["interval"][
        "high"] == 1.0  # at 95% only the upper end reaches the bound


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


_RECEIPT = {"request_id": "req_1", "receipt_id": "r1", "ts": "2026-11-01T00:00:00.000Z",
            "policy_id": "safety", "guardrail_action": "refuse"}


_NONCE_A, _NONCE_B = "a" * 64, "b" * 64


def _bare_item(status: str = "pending") -> dict:
    return {"id": "adj_1", "status": status, "reasons": ["apology", "trigger"], "passes": {}}


def _verdict(breach: bool) -> Verdict:
    return Verdict(breach=breach, intent_permissible=True, content_harmful=False)


def test_final_outcome_only_for_agreed_or_resolved_items() -> None:
    """``final`` is the outcome only once the item is agreed/resolved; open or disputed → None."""
    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    assert item["status"] == "awaiting_b" and final_outcome(item) is None
    agreed, _ = record_pass(item, reviewer="bob", verdict=_verdict(True), ts="t2", nonce=_NONCE_B)
    assert agreed["status"] == "agreed"
    assert final_outcome(agreed) == agreed["final"] and final_outcome(agreed)["label"] == "correct"
    resolved = {**agreed, "status": "resolved"}
    assert final_outcome(resolved) is agreed["final"]
    for status in ("pending", "awaiting_a", "awaiting_b", "disputed"):
        assert final_outcome({**agreed, "status": status}) is None


def test_reveal_opens_every_pass_with_its_commitment() -> None:
    """The second pass's receipt publishes verdict, nonce and commitment of both passes, by name."""
    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=_verdict(False), ts="t2", nonce=_NONCE_B)
    opened = reveal(item)
    assert list(opened) == ["A", "B"]
    for name, nonce in (("A", _NONCE_A), ("B", _NONCE_B)):
        assert opened[name] == {"verdict": item["passes"][name]["verdict"], "nonce": nonce,
                                "commitment": item["passes"][name]["commitment"]}
    assert reveal({"passes": None}) == {}


def test_reviewer_view_is_blind_and_names_the_reviewers_own_pass() -> None:
    """A reviewer sees no verdicts; ``your_pass`` is the pass they gave; closed items have no open passes."""
    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    ann, bob = reviewer_view(item, "ann"), reviewer_view(item, "bob")
    assert "passes" not in ann and "final" not in ann and "lead" not in ann
    assert ann["your_pass"] == "A" and bob["your_pass"] is None
    assert ann["open_passes"] == ["B"] == bob["open_passes"]
    agreed, _ = record_pass(item, reviewer="bob", verdict=_verdict(True), ts="t2", nonce=_NONCE_B)
    closed = reviewer_view(agreed, "bob")
    assert closed["open_passes"] == [] and closed["your_pass"] == "B"
    assert reviewer_view(agreed, "lead", lead=True) is agreed


def test_report_window_is_start_inclusive_end_exclusive() -> None:
    """Methodology: interactions with ``ts`` in ``[start, end)``."""
    from proxy.evaluation.kpi_report import _in_window

    start, end = "2026-11-01T00:00:00.000Z", "2026-11-08T00:00:00.000Z"
    assert _in_window(start, start, end)
    assert not _in_window(end, start, end)
    assert _in_window("2026-11-07T23:59:59.999Z", start, end)
    assert not _in_window("2026-10-31T23:59:59.999Z", start, end)


def test_resolve_records_the_lead_and_the_final_outcome() -> None:
    """A disputed item resolved by the lead keeps who decided, their verdict and when."""
    from proxy.kpi.adjudication import resolve

    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=_verdict(False), ts="t2", nonce=_NONCE_B)
    assert item["status"] == "disputed" and final_outcome(item) is None
    lead_verdict = _verdict(False)
    resolved = resolve(item, lead="lea", verdict=lead_verdict, ts="t3")
    assert resolved["status"] == "resolved"
    assert resolved["lead"] == {"reviewer": "lea", "verdict": lead_verdict.model_dump(), "ts": "t3"}
    assert final_outcome(resolved)["decided_by"] == "lead" and final_outcome(resolved)["ts"] == "t3"
    assert final_outcome(resolved)["label"] == "unnecessary_apology"


def test_new_item_records_when_it_was_created_and_outcome_needs_no_reasons() -> None:
    from proxy.kpi.adjudication import new_item, outcome

    item = new_item([_RECEIPT], messages=[], response=None, model_apology=False, sampled=False,
                    created="2026-11-02T00:00:00.000Z")
    assert item["created"] == "2026-11-02T00:00:00.000Z" and item["reasons"] == ["apology", "trigger"]
    assert item["ts"] == _RECEIPT["ts"] and item["receipt_ids"] == ["r1"] and item["apology_source"] == "guardrail"
    # an item without reasons (none recorded) is judged like a sampled allowed interaction
    assert outcome({}, {"breach": True, "intent_permissible": True, "content_harmful": False})["label"] == "false_negative"
    assert outcome({}, {"breach": False, "intent_permissible": True, "content_harmful": False})["label"] == "correct"


def test_new_item_domain_falls_back_to_intent_then_general() -> None:
    from proxy.kpi.adjudication import new_item

    def domain(**fields: object) -> str:
        receipt = {**_RECEIPT, **fields}
        return new_item([receipt], messages=[], response=None, model_apology=False, sampled=False, created="t")["domain"]

    assert domain(stratum={"domain": "health"}, intent="legal") == "health"
    assert domain(intent="legal") == "legal"
    assert domain(stratum={}, intent=None) == "general"
    assert domain() == "general"


def test_pass_b_first_awaits_a_and_every_pass_keeps_its_time() -> None:
    """Pass B given first leaves the item awaiting A; a pass is exactly reviewer, verdict, ts,
    nonce and commitment."""
    from proxy.kpi.adjudication import verdict_commitment

    item, name = record_pass(_bare_item(), reviewer="bob", verdict=_verdict(True), ts="t1", requested_pass="B",
                             nonce=_NONCE_B)
    assert name == "B" and item["status"] == "awaiting_a"
    dumped = _verdict(True).model_dump()
    assert item["passes"] == {"B": {"reviewer": "bob", "verdict": dumped, "ts": "t1", "nonce": _NONCE_B,
                                    "commitment": verdict_commitment(dumped, _NONCE_B)}}
    item, name = record_pass(item, reviewer="ann", verdict=_verdict(True), ts="t2", nonce=_NONCE_A)
    assert name == "A" and item["status"] == "agreed" and item["passes"]["A"]["ts"] == "t2"


def _agree(expected_a: str | None, expected_b: str | None) -> dict:
    """The final outcome of two agreeing passes naming ``expected_policy_id`` A and B."""
    def verdict(expected: str | None) -> Verdict:
        return Verdict(breach=True, intent_permissible=True, content_harmful=False, expected_policy_id=expected)
    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=verdict(expected_a), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=verdict(expected_b), ts="t2", nonce=_NONCE_B)
    assert item["status"] == "agreed"
    return item["final"]


def test_agreed_final_names_the_expected_policy_of_pass_a_else_pass_b() -> None:
    """``final`` = the outcome + expected_policy_id (A's, else B's), decided_by agreement, ts of
    the second pass."""
    assert _agree(None, "privacy.pii") == {"label": "correct", "unnecessary_apology": False, "false_positive": False,
                                           "false_negative": False, "expected_policy_id": "privacy.pii",
                                           "decided_by": "agreement", "ts": "t2"}
    assert _agree("safety.harm", None)["expected_policy_id"] == "safety.harm"
    assert _agree("safety.harm", "privacy.pii")["expected_policy_id"] == "safety.harm"
    assert _agree(None, None)["expected_policy_id"] is None


def test_resolved_final_is_the_leads_outcome_with_its_expected_policy() -> None:
    from proxy.kpi.adjudication import resolve

    item, _ = record_pass(_bare_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=_verdict(False), ts="t2", nonce=_NONCE_B)
    lead = Verdict(breach=True, intent_permissible=False, content_harmful=True, expected_policy_id="safety.harm")
    assert resolve(item, lead="lea", verdict=lead, ts="t3")["final"] == {
        "label": "correct", "unnecessary_apology": False, "false_positive": False, "false_negative": False,
        "expected_policy_id": "safety.harm", "decided_by": "lead", "ts": "t3"}


def test_new_item_is_exactly_the_published_item_record() -> None:
    """Every field of a new item: the final receipt's ids, action, stratum, model and provider; the
    policies that triggered (refuse/mask/escalate/summarize only); the apology's source."""
    from proxy.kpi.adjudication import new_item

    receipts = [{**_RECEIPT, "receipt_id": "r0", "guardrail_action": "mask", "policy_id": "privacy.pii"},
                {**_RECEIPT, "receipt_id": "r1", "guardrail_action": "allow", "policy_id": "matrix",
                 "stratum": {"domain": "code", "complexity": "simple"}, "model": "m1", "provider": "openai"}]
    item = new_item(receipts, messages=[{"role": "user", "content": "hi"}], response="ok", model_apology=True,
                    sampled=True, created="c")
    assert item == {"id": "adj_1", "status": "pending", "created": "c", "reasons": ["apology", "trigger"],
                    "apology_source": "model", "request_id": "req_1", "receipt_id": "r1", "receipt_ids": ["r0", "r1"],
                    "ts": _RECEIPT["ts"], "policy_id": "matrix", "guardrail_action": "allow",
                    "triggered_policies": ["privacy.pii"], "domain": "code",
                    "stratum": {"domain": "code", "complexity": "simple"}, "model": "m1", "provider": "openai",
                    "messages": [{"role": "user", "content": "hi"}], "response": "ok", "passes": {}, "actor": None}
    no_apology = new_item(receipts[:1], messages=[], response=None, model_apology=False, sampled=False, created="c")
    assert no_apology["apology_source"] is None and no_apology["stratum"] == {} and no_apology["model"] is None
    assert no_apology["reasons"] == ["trigger"]
    refused = new_item([_RECEIPT], messages=[], response=None, model_apology=True, sampled=False, created="c")
    assert refused["apology_source"] == "guardrail"
