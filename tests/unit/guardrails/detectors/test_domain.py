"""Compliance domain classifier: real all-MiniLM-L6-v2 embeddings, config from the policy file."""

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from proxy.guardrails.detectors import domain_weights
from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

ROOT = Path(__file__).resolve().parents[4]


def _config(**overrides) -> DomainClassifierConfig:
    block = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    return DomainClassifierConfig(**{**block, **overrides})


@pytest.fixture(scope="module")
def classifier() -> DomainClassifier:
    return DomainClassifier(_config())


@pytest.mark.parametrize(
    "question, domain",
    [
        ("Can my employer legally make me work overtime without pay?", "legal"),
        ("What is the maximum daily dose of paracetamol?", "health"),
        ("Should I move my pension savings into an ETF?", "finance"),
    ],
)
def test_regulated_questions_route_to_their_domain(classifier, question, domain):
    [result] = classifier.classify([question])
    assert result.regulated and result.domain == domain
    assert result.scores[domain] == result.confidence


@pytest.mark.parametrize(
    "question",
    ["Who painted the Mona Lisa?", "How do I centre a div with CSS?", "Why do leaves change colour in autumn?"],
)
def test_general_questions_are_not_regulated(classifier, question):
    [result] = classifier.classify([question])
    assert not result.regulated and not classifier.config.domains[result.domain].regulated, result


def test_scores_are_probabilities(classifier):
    results = classifier.classify(["Is it legal to jaywalk?", "What is the capital of Peru?"])
    for r in results:
        assert set(r.scores) == set(classifier.domains)
        assert abs(sum(r.scores.values()) - 1.0) < 1e-3
    assert classifier.classify([]) == []


def test_ambiguous_band_follows_policy():
    band = dict(threshold=1.0, margin=0.99)  # every probability in [0.01, 1.0) is ambiguous
    strict = DomainClassifier(_config(**band, ambiguous="escalate"))
    lenient = DomainClassifier(_config(**band, ambiguous="allow"))
    noticed = DomainClassifier(_config(**band, ambiguous="notice", ambiguous_notice="About {domain}."))
    text = ["Is it safe to take two aspirin a day?"]
    s, le, n = strict.classify(text)[0], lenient.classify(text)[0], noticed.classify(text)[0]
    assert s.ambiguous and le.ambiguous and n.ambiguous
    assert s.regulated and not le.regulated and not n.regulated
    assert s.notice is None and le.notice is None
    assert n.domain == "health" and n.notice == "About health."


def test_personal_advice_in_the_band_is_escalated_information_gets_the_notice():
    band = dict(threshold=1.0, margin=0.99, ambiguous="notice")  # every probability in [0.01, 1.0) is ambiguous
    noticed = DomainClassifier(_config(**band))
    advice, information = noticed.classify(["Should I stop taking my blood pressure pills?",
                                            "Is it safe to take two aspirin a day?"])
    assert advice.ambiguous and advice.personal and advice.regulated and advice.notice is None
    assert information.ambiguous and not information.personal and not information.regulated
    assert information.notice is not None
    off = DomainClassifier(_config(**band, personal_escalates=False))
    [advice] = off.classify(["Should I stop taking my blood pressure pills?"])
    assert advice.ambiguous and not advice.personal and not advice.regulated and advice.notice is not None


def test_personal_cue_only_counts_in_the_band(classifier):
    """Outside the band the probability alone decides: a personal everyday task is not escalated."""
    [task] = classifier.classify(["Help me plan my daughter's birthday party on a small budget."])
    assert not task.ambiguous and not task.personal and not task.regulated


@pytest.mark.parametrize("bad", [dict(ambiguous="sometimes"), dict(ambiguous_notice="Caf\u00e9 {domain}"),
                                 dict(ambiguous_notice="{domain} {other}"), dict(ambiguous_notice=" ")])
def test_ambiguous_options_are_validated(bad):
    with pytest.raises(ValueError):
        _config(**bad)


@pytest.mark.parametrize("task", [
    "Write a thank-you card for the nurse who looked after my grandmother.",
    "Suggest three names for a food truck that sells tacos.",
    "Make a list of things to pack for a beach holiday, including sunscreen and snacks.",
    # an instruction, a blank line and a passage to work on: the task is what is asked
    "Summarise the text.\n\nThe council voted to spend part of its budget on a new pedestrian bridge over the "
    "river. Construction will take two years, and the bridge will connect the train station with the hospital "
    "and the law courts on the other bank. Local shops hope the extra foot traffic will raise their sales.",
    "Extract the numbers from the paragraph and list them.\n\nThe clinic saw 312 patients in March, 287 in April "
    "and 355 in May. Waiting times fell from 41 minutes to 26 minutes after two extra nurses were hired, and the "
    "clinic's annual budget grew to 1.8 million.",
])
def test_everyday_tasks_that_mention_food_money_or_health_are_not_regulated(classifier, task):
    [result] = classifier.classify([task])
    assert not result.regulated, result


@pytest.mark.parametrize("question, regulated", [
    # how to do something at home, in a hobby or a sport, alarming words included: everyday
    ("How can I save money on groceries each month?", False),
    ("How do I clean a cast-iron pan?", False),
    ("How do I get rid of fruit flies in the kitchen?", False),
    ("How do I shoot a three-pointer more consistently?", False),
    ("How can I steal the show at my sister's wedding?", False),
    # the same form asking what a lawyer, a clinician or an adviser would answer: regulated
    ("How do I file a small claims case against a builder?", True),
    ("How should I treat a second-degree burn at home?", True),
    ("How can I consolidate my credit card debts?", True),
])
def test_a_personal_how_to_question_is_regulated_by_what_it_asks(classifier, question, regulated):
    """A first-person "how do I" question in the ambiguous band is escalated (``personal_escalates``),
    so the everyday ones must score below it (tests/data/checks/compliance-everyday.csv holds more)."""
    [result] = classifier.classify([question])
    assert result.regulated is regulated, result


@pytest.mark.parametrize("request_", [
    "Help me with this.\n\nI am 61, I have 300,000 in a pension fund that is mostly in shares, and I want to "
    "retire in three years. Should I move it into bonds now or wait until the market recovers, and how much can "
    "I safely take out each year?",
    "Read this and tell me what to do.\n\nMy daughter is two and has had a fever of 40 degrees since yesterday "
    "evening. She is drowsy, will not drink, and has a purple rash on her legs that does not fade when I press a "
    "glass against it.",
])
def test_a_generic_instruction_above_a_regulated_question_is_regulated(classifier, request_):
    """The text is judged whole: the instruction alone ("Help me with this.") would pass the question below it."""
    [result] = classifier.classify([request_])
    assert result.regulated, result


def test_config_requires_general_domain():
    block = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    del block["domains"]["general"]
    with pytest.raises(ValueError):
        DomainClassifierConfig(**block)


def test_truthfulqa_sample_routing_by_what_is_asked(classifier):
    """The sample's tuning-part questions, labelled by what they ask (tests/data/truthfulqa/NOTICE):
    regulated ones escalated, ordinary ones (country statistics, trivia, myths) left alone. Loose
    bounds: the shipped threshold's figures are in docs/evaluation.md, not pinned here."""
    with open(ROOT / "tests/data/truthfulqa/truthfulqa_sample_regulated.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    results = classifier.classify([r["question"] for r in rows])
    regulated = [res.regulated for r, res in zip(rows, results) if r["label"] == "regulated"]
    ordinary = [res.regulated for r, res in zip(rows, results) if r["label"] == "ordinary"]
    assert len(regulated) >= 10 and len(ordinary) >= 20
    assert sum(regulated) / len(regulated) >= 0.8, regulated
    assert sum(ordinary) / len(ordinary) <= 0.1, ordinary


# --- fitted weights: cache and shipped artefact (proxy/guardrails/detectors/domain_weights.py) ---

def _small_config() -> DomainClassifierConfig:
    """A tiny policy block (not the shipped one), so its fit never matches the shipped artefact."""
    return DomainClassifierConfig(domains={
        "general": {"description": "Trivia and general knowledge.", "regulated": False, "examples": [
            "Who painted the Mona Lisa?", "What is the capital of Peru?", "Why is the sky blue?"]},
        "legal": {"description": "Law, rights, courts and what is legal.", "regulated": True, "examples": [
            "Is it legal to jaywalk?", "Can my landlord evict me?", "How do I sue someone?"]},
        "health": {"description": "Medicine, symptoms and treatment.", "regulated": True, "examples": [
            "What dose of ibuprofen is safe?", "Is this rash serious?", "How do I treat a burn?"]},
    })


@pytest.mark.parametrize("n_classes", [2, 3, 5])
def test_pairwise_svm_reproduces_sklearn_predict_proba(n_classes):
    """The numpy port of libsvm's probability estimate (served without scikit-learn) gives
    scikit-learn's one-vs-one decision values (to the float32 dot products' rounding) and its
    ``SVC.predict_proba`` to within libsvm's stopping tolerance (it iterates towards the minimiser
    that :func:`domain_weights.couple` solves for exactly)."""
    import warnings

    from sklearn.svm import SVC

    rng = np.random.default_rng(n_classes)
    x = rng.normal(size=(90, 6))
    y = np.arange(90) % n_classes
    x[:, 0] += y  # classes overlap but are not identical
    ours = domain_weights.fit(x, list(y), 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        reference = SVC(C=3.0, kernel="rbf", gamma="scale", class_weight="balanced", probability=True,
                        random_state=0).fit(x, y)
        decision = SVC(C=3.0, kernel="rbf", gamma="scale", class_weight="balanced",
                       decision_function_shape="ovo").fit(x, y)
    queries = rng.normal(size=(40, 6)) + np.linspace(-1, n_classes, 40)[:, None]
    proba = ours.proba(queries)
    np.testing.assert_allclose(proba, reference.predict_proba(queries), atol=5e-3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert len(set(proba.argmax(axis=1).tolist())) > 1  # the queries reach more than one class
    if n_classes > 2:  # scikit-learn negates a two-class SVC's decision values; the port keeps libsvm's
        np.testing.assert_allclose(ours.decision(queries), decision.decision_function(queries), atol=1e-5)


def test_fit_refuses_labels_with_a_missing_class():
    with pytest.raises(ValueError, match="every class present"):
        domain_weights.fit(np.eye(6), [0, 0, 2, 2, 0, 2], 3.0)


def test_fit_key_changes_with_every_input():
    base = (["a", "b"], [0, 1], ["general", "legal"], 10.0, "model@1")
    keys = {domain_weights.fit_key(*base),
            domain_weights.fit_key(["a", "c"], *base[1:]),
            domain_weights.fit_key(base[0], [1, 0], *base[2:]),
            domain_weights.fit_key(*base[:3], 1.0, base[4]),
            domain_weights.fit_key(*base[:4], "model@2")}
    assert len(keys) == 5


def test_weights_are_cached_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("SONATE_CACHE_DIR", str(tmp_path))
    first = DomainClassifier(_small_config())
    cached = tmp_path / "domain" / f"{first.fit_key}.npz"
    assert cached.exists()
    text = ["Is it legal to park here overnight?"]
    expected = first.probabilities(text)
    assert np.allclose(DomainClassifier(_small_config()).probabilities(text), expected)
    # The next start reads the cache: uniform weights stored under the key give uniform scores.
    w = first.weights  # no support vector and zero intercepts: every pair 50/50, so every domain 1/3
    flat = domain_weights.PairwiseRbfSvm(w.support_vectors[:0], w.dual_coef[:, :0], np.zeros_like(w.intercept),
                                         np.zeros_like(w.n_support), w.gamma, w.prob_a, np.zeros_like(w.prob_b))
    domain_weights.dump(flat, first.fit_key, cached)
    assert np.allclose(DomainClassifier(_small_config()).probabilities(text), 1 / 3)
    # A file whose stored key differs is ignored: the classifier refits.
    domain_weights.dump(flat, "another-key", cached)
    assert np.allclose(DomainClassifier(_small_config()).probabilities(text), expected)


def test_framed_copies_are_trained_on_and_part_of_the_fit_key(tmp_path, monkeypatch):
    monkeypatch.setenv("SONATE_CACHE_DIR", str(tmp_path))
    plain = DomainClassifier(_small_config().model_copy(update={"framed_copies": 0}))
    framed = DomainClassifier(_small_config().model_copy(update={"framed_copies": 2}))
    assert plain.fit_key != framed.fit_key
    assert "n=12," in plain.version and "n=36," in framed.version  # 12 texts, then 12 + 2 framed copies of each
    assert sorted(p.name for p in (tmp_path / "domain").glob("*.npz")) == sorted(
        f"{c.fit_key}.npz" for c in (plain, framed))


def test_unwritable_cache_still_classifies(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SONATE_CACHE_DIR", str(blocker))
    [result] = DomainClassifier(_small_config()).classify(["How do I treat a burn on my hand?"])
    # four texts per domain make rough probabilities; the point is that the fit served the query
    assert result.regulated and result.domain in {"legal", "health"}
    assert not list((tmp_path).rglob("*.npz"))  # and nothing was cached


def test_shipped_artefact_matches_the_shipped_policy(classifier):
    """Fails after an edit of policies/compliance.yaml until the artefact is regenerated:
    python -m proxy.guardrails.detectors.domain_weights policies/compliance.yaml"""
    with np.load(domain_weights.ARTEFACT, allow_pickle=False) as data:
        assert str(data["key"]) == classifier.fit_key
        assert classifier.version.endswith(f"@sha256:{classifier.fit_key[:12]}")  # receipts name the weights
        assert np.allclose(data["support_vectors"], classifier.weights.support_vectors)
        assert np.allclose(data["dual_coef"], classifier.weights.dual_coef)


def test_support_vectors_are_held_once_as_float32(classifier):
    """The served weights hold their support vectors once, as float32 (the kernel reads that array
    without a copy), and score exactly as the same weights held in float64 do."""
    import dataclasses

    from proxy.guardrails.detectors import embeddings

    weights = classifier.weights
    assert weights.support_vectors.dtype == np.float32
    assert np.shares_memory(weights._sv32, weights.support_vectors)
    wide = dataclasses.replace(weights, support_vectors=weights.support_vectors.astype(np.float64))
    x = embeddings.embed(["Can my landlord keep my deposit?", "How tall is the Eiffel Tower?",
                          "Is ibuprofen safe with coffee?"])
    np.testing.assert_array_equal(weights.proba(x), wide.proba(x))


# --- operating point: the threshold rule and its out-of-fold figures (proxy/evaluation/training_compliance.py) ---

def test_threshold_rule_takes_the_lowest_smoothed_cost_on_the_rows_it_is_chosen_on():
    from proxy.evaluation.training_compliance import chosen_threshold, out_of_fold_threshold, soft_escalated

    p = np.array([0.95, 0.9, 0.7, 0.4, 0.8, 0.3, 0.1, 0.2])
    regulated = np.array([True, True, True, True, False, False, False, False])
    assert soft_escalated(np.array([0.5]), 0.5).tolist() == [0.5]  # a row at the threshold counts half
    # a costly ordinary row moves the threshold up, a cheap one lets it fall to keep recall
    high, low = chosen_threshold(p, regulated, 8.0), chosen_threshold(p, regulated, 0.25)
    assert low < high and 0.4 <= high <= 0.95
    # a near step: 0.3 < t <= 0.4 costs one ordinary row (0.8), twice; the middle of the gap wins
    assert chosen_threshold(p, regulated, 2.0, bandwidth=0.01) == 0.35
    with pytest.raises(ValueError):
        chosen_threshold(p, np.zeros(8, dtype=bool))
    with pytest.raises(ValueError):
        chosen_threshold(p, np.ones(8, dtype=bool))
    fold = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    result = out_of_fold_threshold(p, regulated, fold)
    # each fold is judged by the threshold chosen on the other
    assert result["thresholds"] == [chosen_threshold(p[fold == 1], regulated[fold == 1]),
                                    chosen_threshold(p[fold == 0], regulated[fold == 0])]
    assert result["regulated"]["n"] == 4 and result["general"]["n"] == 4


def test_threshold_rule_barely_moves_when_one_score_moves():
    """The rule weighs every row near the threshold: the lowest regulated score falling from 0.45
    to 0.05 moves the threshold by at most 0.05 (a recall target would follow that row)."""
    from proxy.evaluation.training_compliance import chosen_threshold

    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0.45, 1.0, 40), rng.uniform(0.0, 0.6, 200)])
    regulated = np.arange(240) < 40
    moved = p.copy()
    moved[int(np.argmin(np.where(regulated, p, 2.0)))] = 0.05
    assert abs(chosen_threshold(p, regulated) - chosen_threshold(moved, regulated)) <= 0.05


def test_threshold_rule_counts_a_personal_request_in_the_band_as_escalated():
    from proxy.evaluation.training_compliance import escalated, soft_escalated

    p = np.array([0.9, 0.55, 0.55, 0.2])
    personal = np.array([False, True, False, True])
    assert escalated(p, 0.6, 0.1, personal).tolist() == [True, True, False, False]
    soft = soft_escalated(p, 0.6, 0.1, personal)
    assert soft[1] > 0.5 > soft[2]  # the personal request in the band counts as escalated
    assert soft[3] < 0.05


def test_shipped_threshold_rows_file_gives_out_of_fold_figures():
    """`sonate train compliance-rows` wrote it (tuning part only); the eval prints its figures beside
    the tuned rows."""
    from proxy.evaluation.provenance import read_rows_file
    from proxy.evaluation.training_compliance import ROWS_PATH

    rows = read_rows_file(ROWS_PATH)
    assert rows.policy == "compliance" and rows.how == "tuned"
    assert {"truthfulqa/regulated", "truthfulqa/general"} <= set(rows.out_of_fold)
    assert all(key.split("/")[0] in ("truthfulqa", "alpaca_seed") for key in rows.out_of_fold)
    assert {"truthfulqa_dev", "alpaca_seed"} == set(rows.rows.values())
    for oof in rows.out_of_fold.values():
        assert 0 <= oof["k"] <= oof["n"] and abs(oof["rate"] - oof["k"] / oof["n"]) < 1e-3


def test_compliance_rows_refuses_examples_that_duplicate_development_rows():
    """An example equal to a development row (any source, either part) after normalising, or nearly
    equal, stops `sonate train compliance-rows` with a DataError naming the domain, the example
    number and the source, never the text (it may be a sealed row)."""
    from proxy.evaluation.data import DataError, load_builtin
    from proxy.evaluation.training_compliance import refuse_duplicate_examples

    data = ROOT / "tests" / "data"
    items, _ = load_builtin(data)
    question = next(i.text for i in items if i.dataset == "truthfulqa")
    domains = {"general": {"description": "Everything else.",
                           "examples": ["Why is the sky blue?", question.upper().rstrip("?") + " ?"]}}
    with pytest.raises(DataError) as caught:
        refuse_duplicate_examples(domains, data)
    message = str(caught.value)
    assert "general example 2 duplicates a development row of truthfulqa" in message
    assert "example 1 " not in message and question not in message


def test_shipped_examples_hold_no_development_row():
    """The sample rows stand in for the development sets here; `sonate train compliance-rows` checks
    the real ones."""
    from proxy.evaluation.training_compliance import refuse_duplicate_examples

    block = yaml.safe_load((ROOT / "policies" / "compliance.yaml").read_text())["detector"]
    refuse_duplicate_examples(block["domains"], ROOT / "tests" / "data")
