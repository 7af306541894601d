"""The both-sides scorecard of guardrail decisions (proxy/evaluation/scorecard.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.evaluation.data import Item
from proxy.evaluation.guardrails import ItemOutcome
from proxy.evaluation.metrics import Span
from proxy.evaluation.scorecard import read_person_labels, render_scorecard, scorecard


def _out(action="allow", *, safety=False, escalated=False, spans=None):
    return ItemOutcome(action, safety, escalated, None, spans, 0.001)


def test_each_measure_counts_its_rows_on_both_sides():
    items = [Item("truthfulqa", "general", "compliance", "q1", False, "t.csv:1"),
             Item("truthfulqa", "regulated", "compliance", "q2", True, "t.csv:2"),
             Item("alpaca_seed", "benign", "safety", "task", False, "seed_task_1"),
             Item("xstest", "safe", "safety", "s", False, "x.csv:1"),
             Item("xstest", "unsafe", "safety", "u", True, "x.csv:2"),
             Item("advbench", "harmful", "safety", "a", True, "a.csv:1"),
             Item("presidio", "pii", "privacy", "Ann Lee wrote to Bob Dylan at a@b.io", True, "p.json:3",
                  (Span("PERSON", 0, 7), Span("PERSON", 17, 26), Span("EMAIL_ADDRESS", 30, 36)))]
    outcomes = [_out("escalate", escalated=True), _out("escalate", escalated=True), _out("mask"),
                _out(), _out("refuse", safety=True), _out(),
                _out("mask", spans=(Span("PERSON", 0, 7), Span("PERSON", 17, 26), Span("EMAIL_ADDRESS", 30, 36)))]
    labels = {("p.json", 3, 0, 7): "private", ("p.json", 3, 17, 26): "public"}
    rows = {r["measure"]: r for r in scorecard(items, outcomes, labels)}
    assert (rows["ordinary_unchanged"]["k"], rows["ordinary_unchanged"]["n"]) == (0, 2)
    assert (rows["regulated_escalated"]["k"], rows["regulated_escalated"]["n"]) == (1, 1)
    assert (rows["ordinary_escalated"]["k"], rows["ordinary_escalated"]["n"]) == (1, 2)
    assert rows["xstest_safe_refused"]["k"] == 0 and rows["xstest_unsafe_caught"]["k"] == 1
    assert rows["advbench_refused"]["k"] == 0 and rows["advbench_refused"]["target"]["met"] is False
    assert rows["direct_identifiers_hidden"]["k"] == 1
    assert rows["private_names_hidden"]["k"] == 1
    assert (rows["public_names_left"]["k"], rows["public_names_left"]["n"]) == (0, 1)  # masked: not left
    lines = render_scorecard(list(rows.values()), "sealed")
    assert "sealed part" in lines[0] and any("public names left | 0/1" in line for line in lines)


def test_refused_text_hides_its_spans_and_lengths_must_match():
    item = Item("presidio", "pii", "privacy", "Ann Lee", True, "p.json:1", (Span("PERSON", 0, 7),))
    rows = scorecard([item], [_out("refuse", safety=True)], {("p.json", 1, 0, 7): "private"})
    assert rows[0]["measure"] == "private_names_hidden" and rows[0]["k"] == 1
    with pytest.raises(ValueError):
        scorecard([item], [])


def test_person_labels_file_is_complete_and_well_formed():
    labels = read_person_labels()
    assert len(labels) == 467 and set(labels.values()) == {"private", "public"}


def test_person_labels_reject_unknown_label(tmp_path: Path):
    path = tmp_path / "l.tsv"
    path.write_text("file\trow\tstart\tend\tmention\tlabel\tconfidence\np.json\t1\t0\t3\tAnn\tfamous\thigh\n")
    with pytest.raises(ValueError, match="private or public"):
        read_person_labels(path)
