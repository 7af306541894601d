"""The Fair Forge conversation metrics against independent computations.

Every formula of proxy/evaluation/conversation is checked against another implementation:
entropy against scipy.stats.entropy, Spearman's ρ against scipy.stats.spearmanr, the
Clopper–Pearson interval against statsmodels' proportion_confint(method="beta"), the silhouette
against scikit-learn's silhouette_score; B(R), R_total, Grice G, SSA, per-cluster toxicity and
the tournament's shape against hand computations. Also the readers (conversations JSONL, HurtLex
TSV) and the two renderings (Markdown, HTML with a strict CSP and no script).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.evaluation.conversation import bestof, bias, clustering, humanity, quality, risk
from proxy.evaluation.conversation.data import DataError, load_conversations, load_hurtlex
from proxy.evaluation.conversation.report import render_html, render_markdown
from proxy.evaluation.conversation.results import to_jsonl, trend_rows

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "conversations"

shares = st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=8, max_size=8)


# ---- Humanity ----------------------------------------------------------------------------------

def test_lexicon_is_nrc_from_nrclex() -> None:
    words = humanity.lexicon()
    assert len(words) > 3000
    assert words["abandon"] == {"fear", "sadness"}  # nrc_en.json: abandon -> fear, negative, sadness
    assert all(set(e) <= set(humanity.EMOTIONS) for e in words.values())  # sentiments dropped


def test_emotion_distribution_counts_associations() -> None:
    words = {"happy": frozenset({"joy", "trust"}), "afraid": frozenset({"fear"})}
    dist = humanity.emotion_distribution("Happy, happy and AFRAID! unknown", words)
    assert dist == pytest.approx({"anger": 0, "anticipation": 0, "disgust": 0, "fear": 0.2, "joy": 0.4,
                                  "sadness": 0, "surprise": 0, "trust": 0.4})
    assert set(humanity.emotion_distribution("nothing here", words).values()) == {0.0}


@settings(deadline=None)  # the first call imports scipy
@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=8, max_size=8))
def test_entropy_matches_scipy(counts: list[float]) -> None:
    from scipy.stats import entropy

    total = sum(counts)
    dist = {e: (c / total if total else 0.0) for e, c in zip(humanity.EMOTIONS, counts)}
    expected = float(entropy(counts, base=2)) if total else 0.0
    assert humanity.emotional_entropy(dist) == pytest.approx(expected, abs=1e-9)
    assert 0.0 <= humanity.emotional_entropy(dist) <= 3.0 + 1e-12


def test_entropy_of_uniform_and_single() -> None:
    assert humanity.emotional_entropy(dict.fromkeys(humanity.EMOTIONS, 1 / 8)) == pytest.approx(3.0)
    assert humanity.emotional_entropy({"joy": 1.0}) == 0.0


@settings(max_examples=200, deadline=None)
@given(shares, shares)
def test_spearman_matches_scipy(a: list[float], b: list[float]) -> None:
    from scipy.stats import spearmanr

    ours = humanity.spearman(a, b)
    if len(set(a)) == 1 or len(set(b)) == 1:
        assert ours is None
    else:
        assert ours == pytest.approx(float(spearmanr(a, b).statistic), abs=1e-9)


def test_spearman_with_ties_and_errors() -> None:
    from scipy.stats import spearmanr

    a, b = [0, 0, 1, 2, 2, 2, 5, 0], [3, 1, 1, 0, 2, 2, 9, 4]
    assert humanity.spearman(a, b) == pytest.approx(float(spearmanr(a, b).statistic))
    with pytest.raises(ValueError):
        humanity.spearman([1], [1])


def test_humanity_of_an_answer() -> None:
    result = humanity.humanity("I am happy and grateful", "I am happy and grateful")
    assert result["spearman"] == pytest.approx(1.0)
    assert humanity.humanity("table", None)["spearman"] is None


# ---- Bias ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, n", [(0, 1), (0, 10), (3, 10), (10, 10), (1, 2), (57, 200), (199, 200)])
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_clopper_pearson_matches_statsmodels(k: int, n: int, confidence: float) -> None:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    assert bias.clopper_pearson(k, n, confidence) == pytest.approx((float(low), float(high)), abs=1e-12)


def test_clopper_pearson_edges() -> None:
    assert bias.clopper_pearson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        bias.clopper_pearson(3, 2)


def test_guardian_and_combined_score() -> None:
    assert bias.guardian_score({"demographic": 0.8, "cultural": 0.2, "language": 0.4, "content": 0.6}) == pytest.approx(0.5)
    assert bias.combined_score({"a": 0.5, "b": 1.0}, {"a": 0.7, "b": 0.3}) == pytest.approx(0.65)
    for bad in ({}, {"demographic": 1.5}, {"tone": 0.1}):
        with pytest.raises(ValueError):
            bias.guardian_score(bad)
    with pytest.raises(ValueError):
        bias.combined_score({"a": 0.5}, {"a": 0.9})


def test_classifier_guardian_clips() -> None:
    guardian = bias.ClassifierGuardian("c", "1", lambda texts: [1.7 for _ in texts], "language")
    assert guardian.assess("q", "a") == {"language": 1.0}


def test_attribute_shares() -> None:
    rows = [({"gender": "f"}, False), ({"gender": "f"}, True), ({"gender": "m"}, False), ({}, True)]
    shares_ = bias.attribute_shares(rows)
    assert shares_["gender"]["f"]["share"] == 0.5 and shares_["gender"]["f"]["n"] == 2
    assert shares_["gender"]["f"]["ci"] == list(bias.clopper_pearson(1, 2))
    assert shares_["gender"]["m"] == {"n": 1, "non_biased": 1, "share": 1.0, "ci": list(bias.clopper_pearson(1, 1))}


# ---- Risk ----------------------------------------------------------------------------------------

def test_text_risk_is_the_worst_category() -> None:
    value, worst = risk.text_risk([{"toxicity": 0.2, "harmful_intent": 0.7}, {"toxicity": 0.9}])
    assert value == 0.9 and worst == {"toxicity": 0.9, "harmful_intent": 0.7}
    assert risk.text_risk([]) == (0.0, {})


def test_total_risk() -> None:
    assert risk.total_risk({"prompt": 0.5, "response": 1.0, "context": 0.0}) == pytest.approx(0.4 * 0.5 + 0.4)
    # no context: its weight is spread over the other two
    assert risk.total_risk({"prompt": 0.5, "response": 1.0, "context": None}) == pytest.approx((0.2 + 0.4) / 0.8)
    with pytest.raises(ValueError):
        risk.total_risk({"prompt": 0.5}, {"prompt": 0.5, "response": 0.6, "context": 0.0})
    with pytest.raises(ValueError):
        risk.total_risk({})


# ---- Conversational quality -----------------------------------------------------------------------

def test_grice_and_ssa() -> None:
    assert quality.grice({"quantity": 1.0, "quality": 0.5, "relation": 0.25, "manner": 0.25}) == pytest.approx(0.5)
    assert quality.ssa(1.0, 0.4) == pytest.approx(0.7)
    assert quality.memory(7.5) == 7.5
    with pytest.raises(ValueError):
        quality.memory(11)
    with pytest.raises(KeyError):
        quality.grice({"quantity": 1.0})
    with pytest.raises(ValueError):
        quality.ssa(1.2, 0.0)


# ---- Toxicity clustering --------------------------------------------------------------------------

def test_toxic_word_counts_and_cluster_toxicity() -> None:
    lexicon = {"idiot": "cds", "shut up": "cds"}
    assert clustering.toxic_word_counts("You IDIOT, shut up! idiot's", lexicon) == (2, 5)
    result = clustering.cluster_toxicity(["idiot idiot fine", "all fine here", "calm"], [0, 0, -1], lexicon)
    assert result[0] == {"size": 2, "toxic_words": 2, "words": 6, "toxicity": pytest.approx(2 / 6)}
    assert result[-1]["toxicity"] == 0.0


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_silhouette_matches_sklearn(seed: int) -> None:
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 30))
    points = rng.normal(size=(n, 2))
    labels = rng.integers(-1, 4, size=n)
    kept = labels != -1
    clusters = len(set(labels[kept]))
    ours = clustering.silhouette(points, labels)
    if clusters < 2 or clusters >= kept.sum():
        assert ours is None
    else:
        assert ours == pytest.approx(float(silhouette_score(points[kept], labels[kept])), abs=1e-9)


@pytest.mark.models  # umap-learn compiles its numba kernels on a first use (tens of seconds)
def test_project_and_cluster_separates_two_groups() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.01, size=(8, 16)) + np.eye(16)[0]
    b = rng.normal(0, 0.01, size=(8, 16)) + np.eye(16)[1]
    coords, labels = clustering.project_and_cluster(np.vstack([a, b]), seed=0)
    assert coords.shape == (16, 2)
    assert len(set(labels[:8])) == 1 and len(set(labels[8:])) == 1 and labels[0] != labels[8] and -1 not in labels
    with pytest.raises(ValueError):
        clustering.project_and_cluster(a[:3])
    # umap's compiled kernels were written to numba's disk cache: the next process loads them
    from numba.core.caching import NullCache
    from umap import umap_

    cache = umap_.smooth_knn_dist._cache
    assert not isinstance(cache, NullCache) and list(Path(cache._cache_path).glob("umap_.smooth_knn_dist-*.nbi"))


# ---- BestOf --------------------------------------------------------------------------------------

@settings(deadline=None)
@given(st.integers(min_value=1, max_value=40))
def test_tournament_shape(n: int) -> None:
    calls: list[tuple[int, int]] = []

    def judge(a: int, b: int):  # the higher index is always better
        calls.append((a, b))
        return dict.fromkeys(bestof.CRITERIA, 0.0), dict.fromkeys(bestof.CRITERIA, "b")

    result = bestof.tournament(n, judge)
    assert result["rounds"] == (math.ceil(math.log2(n)) if n > 1 else 0)
    assert len(result["contests"]) == n - 1 == len(calls)
    assert result["winner"] == n - 1
    assert max((c["round"] for c in result["contests"]), default=0) == result["rounds"]
    assert all(c["confidence"] == 1.0 for c in result["contests"])
    seen = [i for pair in calls for i in pair] + [i for _, i in result["byes"]]
    assert set(range(n)) <= set(seen) or n == 1


def test_tournament_verdicts_weights_and_byes() -> None:
    # 3 candidates: round 1 is 0 vs 1 (2 has a bye), round 2 the winner vs 2.
    table = {(0, 1): {"relevance": 1.0, "accuracy": 0.5, "coherence": 0.5, "helpfulness": 0.5},
             (0, 2): {"relevance": 0.0, "accuracy": 0.2, "coherence": 1.0, "helpfulness": 0.4}}
    result = bestof.tournament(3, lambda a, b: (table[(a, b)], {}))
    first, final = result["contests"]
    assert first["score"] == pytest.approx(0.25 * 1 + 0.35 * 0.5 + 0.15 * 0.5 + 0.25 * 0.5) and first["winner"] == 0
    assert final["score"] == pytest.approx(0.35 * 0.2 + 0.15 + 0.25 * 0.4) and final["winner"] == 2
    assert result["byes"] == [(1, 2)] and result["winner"] == 2
    assert result["confidence"] == pytest.approx(abs(2 * final["score"] - 1))
    with pytest.raises(ValueError):
        bestof.contest_score({"relevance": 1.0})
    assert bestof.tournament(1, lambda a, b: ({}, {}))["confidence"] == 1.0
    bracket = bestof.Bracket(4)
    assert bracket.next_round() == [(0, 1), (2, 3)]
    with pytest.raises(ValueError):
        bracket.record([(dict.fromkeys(bestof.CRITERIA, 1.0), {})])  # one verdict for two pairs
    with pytest.raises(ValueError):
        bracket.result()


# ---- Readers -------------------------------------------------------------------------------------

def test_example_files_load() -> None:
    conversations = load_conversations(EXAMPLE / "support.jsonl")
    assert len(conversations) >= 8 and all(c.turns for c in conversations)
    assert any(len(t.candidates) >= 3 for c in conversations for t in c.turns)
    lexicon = load_hurtlex(EXAMPLE / "toxic-lexicon.tsv")
    assert lexicon["idiot"] == "cds" and "shut up" in lexicon


@pytest.mark.parametrize("line, message", [
    ('{"session_id": "a"}', "'conversation' must be a non-empty list"),
    ('{"session_id": "a", "conversation": [{"assistant": "x"}]}', "'query' must be a non-empty string"),
    ('{"session_id": "a", "conversation": [{"query": "q", "candidates": "x"}]}', "'candidates'"),
    ('{"session_id": "a", "attributes": {"g": 1}, "conversation": [{"query": "q"}]}', "'attributes'"),
    ('{"conversation": [{"query": "q"}]}', "'session_id'"),
    ('{"session_id": "a", "conversation": [{"qa_id": "x", "query": "q"}, {"qa_id": "x", "query": "r"}]}',
     "qa_id values repeat"),
    ('[1]', "JSON object"),
    ('{bad', "invalid JSON"),
])
def test_bad_conversations_name_the_place(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DataError, match=re.escape(message)) as caught:
        load_conversations(path)
    assert str(path) in str(caught.value)


def test_repeated_session_id(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"session_id": "a", "conversation": [{"query": "q"}]}\n' * 2)
    with pytest.raises(DataError, match="repeats"):
        load_conversations(path)


@pytest.mark.parametrize("text", ["", "lemma\tcategory\nidiot\tcds\n", "id\tpos\tcategory\tstereotype\tlemma\tlevel\nX\tn\n"])
def test_bad_lexicon(tmp_path: Path, text: str) -> None:
    path = tmp_path / "lex.tsv"
    path.write_text(text)
    with pytest.raises(DataError, match=str(path)):
        load_hurtlex(path)


# ---- Renderings and export -----------------------------------------------------------------------

def _result() -> dict:
    return {
        "format": "sonate.eval.conversation/v1", "run_id": "conv_1", "generated": "2026-11-23T00:00:00Z",
        "source": {"file": "x.jsonl"}, "judge": {"model": "openai/judge", "templates": ["memory-v1"]},
        "turns": [{"session_id": "s<1>", "qa_id": "q1", "receipt_id": "rcpt_1", "humanity": {"entropy": 1.5, "spearman": None},
                   "risk": {"total": 0.25}, "bias": {"B": 0.1}, "quality": {"memory": 8.0, "grice": {"G": 0.9},
                                                                          "ssa": {"SSA": 0.8}, "language_adaptation": 1.0},
                   "context_adherence": {"score": 0.7, "reasoning": "ok"}}],
        "bestof": [{"session_id": "s", "qa_id": "q1", "candidates": 3, "rounds": 2, "contests": [{}, {}], "winner": 2,
                    "confidence": 0.4}],
        "bias_by_attribute": {"gender": {"f": {"n": 2, "non_biased": 1, "share": 0.5, "ci": [0.01, 0.99]}}},
        "clustering": {"points": [{"session_id": "s", "qa_id": "q1", "x": 0.0, "y": 1.0, "label": 0, "toxicity": 0.5},
                                  {"session_id": "t", "qa_id": "q1", "x": 1.0, "y": 0.0, "label": -1, "toxicity": 0.0}],
                       "clusters": {"-1": {"size": 1, "toxic_words": 0, "words": 3, "toxicity": 0.0},
                                    "0": {"size": 1, "toxic_words": 1, "words": 2, "toxicity": 0.5}},
                       "silhouette": None},
        "summary": {"conversations": 1, "turns": 1, "humanity_entropy": 1.5, "ssa": 0.8, "memory": 8.0,
                    "silhouette": None},
    }


def test_markdown_tables() -> None:
    text = render_markdown(_result())
    assert "| SSA | 0.800 |" in text and "| Memory (0–10) | 8.000 |" in text and "| Entropy (bits, max 3) | 1.500 |" in text
    assert "| gender | f | 2 | 1 | 0.500 | 0.010–0.990 |" in text
    assert "| noise | 1 | 0 | 3 | 0.000 |" in text and "rcpt_1" in text


def test_html_is_strict_and_escaped() -> None:
    import base64
    import hashlib

    page = render_html(_result())
    assert "<script" not in page.lower() and "s&lt;1&gt;" in page and "s<1>" not in page
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert f"'sha256-{base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()}'" in csp
    assert page.count("<circle") == 2 and 'class="scatter"' in page


def test_jsonl_and_trends() -> None:
    rows = [_result(), {"run_id": "other"}]
    text = to_jsonl(rows)
    assert [json.loads(line)["run_id"] for line in text.splitlines()] == ["conv_1", "other"]
    (trend,) = trend_rows(rows)
    assert trend["run_id"] == "conv_1" and trend["ssa"] == 0.8 and trend["grice"] is None
