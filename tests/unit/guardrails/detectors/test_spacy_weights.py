"""Every detector thread's spaCy pipeline reads one copy of the weights, holds no package string
store, and parses as its own would."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import spacy
import yaml

from proxy.guardrails.detectors.context_enhancer import LemmaBound
from proxy.guardrails.detectors.pii import (
    PiiDetector,
    PiiDetectorConfig,
    _index_entry_points,
    _nlp_engine,
    _spacy_model_path,
)
from proxy.guardrails.detectors.privacy_names import english_words
from proxy.guardrails.detectors.spacy_weights import share_weights

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[4]
CONFIG = PiiDetectorConfig(**yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"])
TEXTS = [
    "Marguerite Okafor lives at 2437 Maple Street and called Bob yesterday.",
    "Which bus goes from the central station to the airport after midnight?",
    "My daughter Chloe has a fever of 39 degrees; should I call Dr. Patel?",
    "The quick brown fox jumps over the lazy dog while the geese were flying south.",
    "Send the signed lease to Jonas Berg at jonas.berg@example.com before Friday.",
    "Ich heiße Anna und wohne in Berlin.",
]


def load():
    return spacy.load(_spacy_model_path(CONFIG.spacy_model))


def parse(nlp, texts=TEXTS):
    return [[(t.text, t.tag_, t.pos_, t.dep_, t.head.i, t.lemma_, t.ent_type_, t.ent_iob_) for t in doc]
            for doc in nlp.pipe(texts)]


def arrays(nlp):
    models = [getattr(nlp.get_pipe(pipe), "model", None) for pipe in nlp.pipe_names]
    return [node.get_param(name) for model in models if hasattr(model, "walk")
            for node in model.walk() for name in node.param_names if node.has_param(name)]


def test_a_pipeline_reading_anothers_weights_parses_as_it_did_alone():
    source, target, alone = load(), load(), load()
    given_up = share_weights(source, target)
    assert given_up > 10_000_000  # en_core_web_sm: ~13 MB of weights
    assert all(a is b for a, b in zip(arrays(source), arrays(target)))
    assert not any(a is b for a, b in zip(arrays(source), arrays(alone)))
    assert target.get_pipe("lemmatizer").lookups is source.get_pipe("lemmatizer").lookups
    assert parse(target) == parse(alone) == parse(source)
    assert share_weights(source, target) == 0  # nothing left to give up


def test_a_pipeline_without_the_package_strings_parses_as_one_with_them():
    with_strings = load()
    without = _nlp_engine(CONFIG).nlp[CONFIG.language]
    assert len(with_strings.vocab.strings) > 50_000 > 5_000 > len(without.vocab.strings)
    texts = TEXTS + ["Dr. O'Neill-Smith paid $1,200.50 on 3/4/2021 via café Zürich; e-mail: a.b@c.io :-)",
                     "UNESCO's Nkosazana Dlamini-Zuma met Xi Jinping in Addis Ababa on Tuesday."]
    assert parse(without, texts) == parse(with_strings, texts)
    with without.memory_zone():  # the strings a text adds inside a zone are dropped after it
        assert parse(without, texts) == parse(with_strings, texts)
    assert parse(without, texts) == parse(with_strings, texts)  # and are added again
    assert english_words(without) == english_words(with_strings) and len(english_words(without)) > 80_000
    ours, theirs = LemmaBound(without), LemmaBound(with_strings)
    docs = list(with_strings.pipe(texts + ["I'm gonna wanna go, ain't it? The mice were running."]))
    assert [ours.lemmas(doc) for doc in docs] == [theirs.lemmas(doc) for doc in docs]


def test_indexed_entry_points_are_the_installed_ones_and_registries_resolve_them():
    import importlib.metadata

    import catalogue

    _index_entry_points()
    _index_entry_points()  # idempotent
    installed = importlib.metadata.entry_points()
    indexed = catalogue.AVAILABLE_ENTRY_POINTS
    assert not hasattr(indexed, "select") and set(indexed) == set(installed.groups)  # a plain dict by group
    assert all(sorted(ep.name for ep in indexed[group]) == sorted(ep.name for ep in installed.select(group=group))
               for group in indexed)
    # a name only an entry point provides (spacy-legacy's), and one spaCy registers itself
    legacy = "spacy-legacy.HashEmbedCNN.v1"
    (entry_point,) = installed.select(group="spacy_architectures", name=legacy)
    assert spacy.registry.architectures.get(legacy) is entry_point.load()
    assert "spacy.Tok2Vec.v2" in spacy.registry.architectures.get_all()


def test_pipelines_of_another_structure_keep_their_own_weights():
    source = load()
    blank = spacy.blank("en")
    blank.add_pipe("sentencizer")
    assert share_weights(source, blank) == 0
    smaller = load()
    smaller.remove_pipe("parser")
    assert share_weights(source, smaller) > 0  # the components both have
    assert "parser" not in smaller.pipe_names and parse(smaller)  # still parses


def test_every_threads_analyzer_reads_the_first_ones_weights():
    detector = PiiDetector(CONFIG)
    detector.prepare(3)
    found: list = []
    together = threading.Barrier(3)

    def take() -> None:
        batch = detector.analyzer()
        found.append((batch.analyzer_engine.nlp_engine.nlp[CONFIG.language],
                      detector.detect(["My name is Marguerite Okafor, call me at 415-555-0134."])))
        together.wait()  # all three hold their analyzers at once: none is handed on to another thread

    threads = [threading.Thread(target=take) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pipelines, spans = [p for p, _ in found], [s for _, s in found]
    assert len({id(p) for p in pipelines}) == 3 and detector.analyzers_built >= 3
    assert all(len(p.vocab.strings) < 5_000 for p in pipelines)  # no package string store
    first = arrays(pipelines[0])
    assert all(all(a is b for a, b in zip(first, arrays(p))) for p in pipelines[1:])
    assert spans[0] == spans[1] == spans[2] and "PHONE_NUMBER" in {s.entity_type for s in spans[0][0]}
