"""Bounded PII work: a 12 KB prompt must not stall every client (real presidio + spaCy, no mocks).

No recognizer sees more than the configured window; e-mail and URL use bounded patterns; each
thread has its own analyzer (no lock serialising PII analysis).
"""

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig, PiiSpan, merge_windows

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[4]
PATHOLOGICAL = "a." * 6000 + "@"


def _config(**overrides) -> PiiDetectorConfig:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetectorConfig(**{**block, **overrides})


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    # every detected span reported: these tests are about the recognizers' bounded work, not about
    # which spans are personal data (tests/unit/guardrails/detectors/test_privacy_context.py)
    return PiiDetector(_config(analysis_window_chars=400, analysis_overlap_chars=60, context={"enabled": False}))


class _Recorder:
    """Wraps a real recognizer's analyze to record the length of every text it is given."""

    def __init__(self, recognizer, sizes: list[int]):
        self._analyze, self._sizes = recognizer.analyze, sizes

    def __call__(self, text, entities, nlp_artifacts=None):
        self._sizes.append(len(text))
        return self._analyze(text, entities, nlp_artifacts)


def test_windows_cover_text_within_size_and_overlap():
    text = ("word " * 50 + "x" * 37 + " ") * 40
    bounds = patterns.windows(text, 300, 40)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(text)
    assert all(0 < end - start <= 300 for start, end in bounds)
    assert all(b_start <= a_end - 40 for (_, a_end), (b_start, _) in zip(bounds, bounds[1:]))
    assert all(b_start > a_start for (a_start, _), (b_start, _) in zip(bounds, bounds[1:]))
    assert patterns.windows("short text", 300, 40) == [(0, 10)]
    with pytest.raises(ValueError):
        patterns.windows(text, 100, 50)
    with pytest.raises(ValueError):
        _config(analysis_window_chars=400, analysis_overlap_chars=200)


def test_no_recognizer_sees_more_than_the_window(detector):
    sizes: list[int] = []
    registry = detector.analyzer().analyzer_engine.registry
    for recognizer in registry.recognizers:
        recognizer.analyze = _Recorder(recognizer, sizes)
    try:
        detector.analyze(PATTERN_TEXT := PATHOLOGICAL[:3000])
    finally:
        for recognizer in registry.recognizers:
            del recognizer.analyze
    assert len(PATTERN_TEXT) > 400 and sizes
    assert max(sizes) <= 400


def test_email_and_url_recognizers_are_the_bounded_ones(detector):
    recognizers = detector.analyzer().analyzer_engine.registry.recognizers
    by_entity = {r.supported_entities[0]: r for r in recognizers if r.name in ("EmailRecognizer", "UrlRecognizer")}
    assert [p.regex for p in by_entity["EMAIL_ADDRESS"].patterns] == [patterns.EMAIL_REGEX]
    assert [p.regex for p in by_entity["URL"].patterns] == list(patterns.url_regexes())
    assert sum(r.name == "UrlRecognizer" for r in recognizers) == 1
    assert sum(r.name == "EmailRecognizer" for r in recognizers) == 1


@pytest.mark.parametrize("text, found", [
    ("Visit www.example.com.", "www.example.com"),
    ("see https://foo.bar.co.uk/path?x=1 ok", "https://foo.bar.co.uk/path?x=1"),
    ("get ftp://files.example.org now", "files.example.org"),
    ("Write to first.last+tag@sub.domain.io, thanks", "first.last+tag@sub.domain.io"),
    ("user@mail-server.example-domain.com", "user@mail-server.example-domain.com"),
])
def test_bounded_patterns_find_what_presidio_finds(detector, text, found):
    assert found in {text[s.start:s.end] for s in detector.analyze(text)}


def test_pii_straddling_a_window_boundary_is_found_at_full_text_offsets(detector):
    filler = "The quick brown fox jumps over the lazy dog again. " * 7  # 357 chars
    email = "maria.fernanda.lopez-garcia@example-company.com"  # 47 chars, no space to cut at
    text = "lorem ipsum " * 30 + email + " and " + filler + "call Maria on 212-555-0198. " + filler
    start = text.index(email)
    windows = detector.windows(text)
    assert len(windows) > 2
    assert windows[0] == (0, 400) and start < 400 < start + len(email)  # the first window cuts the e-mail
    spans = detector.analyze(text)
    assert PiiSpan("EMAIL_ADDRESS", start, start + len(email), 1.0) in spans
    phone = text.index("212-555-0198")
    assert any(s.entity_type == "PHONE_NUMBER" and (s.start, s.end) == (phone, phone + 12) for s in spans)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_merge_windows_unites_one_entity_seen_by_two_windows():
    # window 0 = [0, 100) saw the e-mail cut at its edge; window 1 starting at 80 saw it whole
    spans = merge_windows([[PiiSpan("URL", 90, 100, 0.5)], [PiiSpan("URL", 5, 30, 0.6), PiiSpan("PERSON", 40, 45, 0.85)]],
                          [0, 80])
    assert spans == [PiiSpan("URL", 85, 110, 0.6), PiiSpan("PERSON", 120, 125, 0.85)]


def test_pathological_prompt_is_cut_into_windows(detector):
    bounds = detector.windows(PATHOLOGICAL)
    assert len(bounds) > 1 and max(end - start for start, end in bounds) <= 400
    assert detector.analyze(PATHOLOGICAL) == []


def test_threads_use_distinct_analyzers_without_a_shared_lock(detector):
    barrier = threading.Barrier(2)
    seen: dict[str, object] = {}
    results: dict[str, list] = {}

    def work(name: str) -> None:
        barrier.wait()  # both threads analyse at the same time
        seen[name] = detector.analyzer()
        results[name] = detector.analyze("Contact John Smith at john.smith@example.com")

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"]
    assert seen["a"].analyzer_engine.nlp_engine is not seen["b"].analyzer_engine.nlp_engine
    assert results["a"] == results["b"] and {s.entity_type for s in results["a"]} >= {"PERSON", "EMAIL_ADDRESS"}
    assert not hasattr(detector, "_lock")


def test_prepared_analyzers_go_to_the_threads_that_ask_first(detector):
    # A process about to fork workers keeps one ready per thread (proxy.server.http.app.preload);
    # the calling thread's own goes back to the pool. (The pool may hold more: threads of earlier
    # tests give theirs back when they end, which can be just after their join returned.)
    mine = detector.analyzer()
    detector.prepare(2)
    ready = list(detector._spare)
    assert len(ready) >= 2 and any(a is mine for a in ready)
    built = detector.analyzers_built
    taken: list[object] = []
    both = threading.Barrier(2)

    def take() -> None:
        taken.append(detector.analyzer())
        both.wait()  # both threads hold theirs at once

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(a) for a in taken}) == 2 and all(any(a is r for r in ready) for a in taken)
    assert detector.analyzers_built == built


def test_a_thread_that_ends_gives_its_analyzer_to_the_next_thread(detector):
    # A new executor's threads (an in-process restart, a replaced pool) reuse the analyzers of the
    # threads that ended instead of loading a spaCy pipeline each.
    taken: list[object] = []

    def take() -> None:
        taken.append(detector.analyzer())

    first = threading.Thread(target=take)
    first.start()
    first.join()
    deadline = time.monotonic() + 10  # given back when the thread's state is cleared, just after join
    while not any(a is taken[0] for a in detector._spare) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any(a is taken[0] for a in detector._spare)
    built = detector.analyzers_built
    second = threading.Thread(target=take)
    second.start()
    second.join()
    assert detector.analyzers_built == built  # taken from the pool, not built


def test_long_text_is_parsed_in_groups_with_a_pause_point_between_them(detector):
    # batch_windows bounds the windows spaCy holds at once; the spans do not depend on it
    text = " ".join(f"Note {i}: write to Maria Lopez at maria{i}@example.com or call 212-555-{1000 + i:04d} "
                    f"about the invoice for Paris." for i in range(60))
    calls: list[int] = []
    with patterns.pausing(lambda: calls.append(1)):
        grouped = detector.analyze(text)
    windows = len(detector.windows(text))
    size = detector.config.batch_windows
    assert windows > 2 * size and len(calls) == -(-windows // size) - 1
    one_batch = PiiDetector(_config(analysis_window_chars=400, analysis_overlap_chars=60, context={"enabled": False},
                                    batch_windows=1000))
    assert one_batch.analyze(text) == grouped and {s.entity_type for s in grouped} >= {"EMAIL_ADDRESS", "PERSON"}

    def stop() -> None:
        raise RuntimeError("abandoned")

    with patterns.pausing(stop), pytest.raises(RuntimeError, match="abandoned"):
        detector.analyze(text + " again")  # a hook that raises stops the analysis at the first pause
    assert detector.analyze("Write to ada@example.com")[0].entity_type == "EMAIL_ADDRESS"  # hook gone


# --- bounded work on digit runs, repeated honorifics, dense spans --------

import random  # noqa: E402

from phonenumbers import phonenumbermatcher  # noqa: E402
from presidio_analyzer.context_aware_enhancers import LemmaContextAwareEnhancer  # noqa: E402

from proxy.guardrails.detectors.context_enhancer import IndexedContextEnhancer, first_token_ending_after  # noqa: E402
from proxy.guardrails.detectors.pii import resolve_overlaps  # noqa: E402

PHONE_REGIONS = 8  # presidio's PhoneRecognizer.DEFAULT_SUPPORTED_REGIONS


class _ParseCounter:
    """Counts python-phonenumbers' candidate parses (its ``_parse_and_verify``): the phone work."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = phonenumbermatcher.PhoneNumberMatcher._parse_and_verify

        def counted(matcher, candidate, offset):
            self.calls += 1
            return original(matcher, candidate, offset)

        monkeypatch.setattr(phonenumbermatcher.PhoneNumberMatcher, "_parse_and_verify", counted)


def test_phone_recognizer_is_the_bounded_one(detector):
    phones = [r for r in detector.analyzer().analyzer_engine.registry.recognizers if r.name == "PhoneRecognizer"]
    assert len(phones) == 1 and type(phones[0]).__name__ == "BoundedPhoneRecognizer"
    assert len(phones[0].supported_regions) == PHONE_REGIONS
    with pytest.raises(ValueError):
        patterns.phone_recognizer("en", max_tries=0)
    with pytest.raises(ValueError):
        _config(phone_max_tries=0)


@pytest.mark.parametrize("unit", ["1 ", "12-", "555 123 ", "2020-01-02 ", "(1) "])
def test_phone_parses_per_window_are_capped_on_digit_runs(detector, monkeypatch, unit):
    text = (unit * 3000)[:6000]
    counter = _ParseCounter(monkeypatch)
    spans = detector.analyze(text)
    windows = len(detector.windows(text))
    # each region's matcher gives up after max_tries rejected candidates; each accepted one is a result
    phone_results = sum(s.entity_type == "PHONE_NUMBER" for s in spans)
    assert counter.calls <= windows * PHONE_REGIONS * (detector.config.phone_max_tries + 1) + 4 * phone_results
    assert counter.calls > 0


def test_phone_work_grows_linearly_with_length(detector, monkeypatch):
    counts = []
    for size in (3000, 12000):
        counter = _ParseCounter(monkeypatch)
        detector.analyze(("1 " * size)[:size])
        counts.append(counter.calls)
    assert counts[1] <= 4.5 * counts[0]  # 4x the text, at most ~4x the parses (windows overlap)


def test_phone_bound_keeps_ordinary_phone_numbers(detector):
    text = "Call me on 212-555-0198 or +44 20 7946 0958; the office line is (415) 555-2671."
    found = {text[s.start:s.end] for s in detector.analyze(text) if s.entity_type == "PHONE_NUMBER"}
    assert {"212-555-0198", "+44 20 7946 0958"} <= found
    assert any("555-2671" in f for f in found)


def _phone_spans(recognizer, text: str, min_digits: int = 6) -> list[tuple[int, int, float]]:
    results = recognizer.analyze(text, ["PHONE_NUMBER"])
    return sorted((r.start, r.end, r.score) for r in results
                  if sum(c.isdigit() for c in text[r.start:r.end]) >= min_digits)


def test_phone_matcher_is_skipped_only_where_no_long_enough_span_could_come_out(monkeypatch):
    # the exact skip (patterns.phone_candidates_reach) finds what the matcher keeps after
    # min_digits, on the presidio sample, hand-written edges and seeded random strings of digits,
    # separators, brackets, plus signs and extension words
    gated, plain = patterns.phone_recognizer("en", min_digits=6), patterns.phone_recognizer("en")
    rnd = random.Random(11)
    alphabet = list("0123456789") * 4 + list(" -.()+/x#,;:") + ["ext", "ext. ", " x", "a", "\n", "\u0661", "\uff11"]
    bench, extension, short = ("Request 17 (2ed30f5c). What is the capital of Portugal?", "Call 12345 ext 6 today",
                               "Call 12345 today")
    sample = [row["full_text"] for row in json.loads((ROOT / "tests/data/presidio/synth_sample.json").read_text())]
    texts = sample + [bench, extension, short, "Dial +1 (415) 555-2671 x 99", "in 1681 and 1999",
                      "(1) (2) (3) (4) (5) (6)", "１２３-４５６-７８９０"]
    texts += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 40))) for _ in range(1500)]
    skipped = [t for t in texts if not patterns.phone_candidates_reach(t, 6)]
    assert len(skipped) > len(texts) // 4 and bench in skipped and short in skipped
    assert patterns.phone_candidates_reach(extension, 6)  # 5 digits and an extension digit: not skipped
    assert [_phone_spans(gated, t) for t in texts] == [_phone_spans(plain, t) for t in texts]
    counter = _ParseCounter(monkeypatch)
    assert gated.analyze(bench, ["PHONE_NUMBER"]) == [] and counter.calls == 0
    assert _phone_spans(gated, "Call 212-555-0198 now") == _phone_spans(plain, "Call 212-555-0198 now") != []


def test_context_enhancer_never_walks_the_token_list(detector, monkeypatch):
    engine = detector.analyzer().analyzer_engine
    assert isinstance(engine.context_aware_enhancer, IndexedContextEnhancer)
    walks = []
    original = LemmaContextAwareEnhancer._find_index_of_match_token

    def counted(word, start, tokens, tokens_indices):
        walks.append(start)
        return original(word, start, tokens, tokens_indices)

    monkeypatch.setattr(LemmaContextAwareEnhancer, "_find_index_of_match_token", staticmethod(counted))
    spans = detector.analyze("My phone number is 212-555-0198. " * 40)
    assert spans and walks == []


def test_indexed_token_lookup_agrees_with_presidio():
    doc_tokens = ["Call", "me", "on", "212", "-", "555", "now", "."]
    indices, position = [], 0
    for token in doc_tokens:
        indices.append(position)
        position += len(token) + 1
    ends = [i + len(t) for i, t in zip(indices, doc_tokens)]
    for start in range(position - 2):
        assert first_token_ending_after(ends, start) == LemmaContextAwareEnhancer._find_index_of_match_token(
            "w", start, doc_tokens, indices)


def _resolve_reference(spans):
    """The quadratic definition resolve_overlaps must agree with."""
    kept = []
    for span in sorted(spans, key=lambda s: (-s.score, -(s.end - s.start), s.start)):
        if all(span.end <= k.start or span.start >= k.end for k in kept):
            kept.append(span)
    return sorted(kept, key=lambda s: s.start)


def test_resolve_overlaps_agrees_with_the_pairwise_definition():
    rng = random.Random(15)
    for _ in range(500):
        spans = [PiiSpan(rng.choice("AB"), a, a + rng.randint(0, 8), rng.choice([0.3, 0.5, 0.9]))
                 for a in (rng.randint(0, 60) for _ in range(rng.randint(0, 25)))]
        assert resolve_overlaps(spans) == _resolve_reference(spans)


def test_merge_windows_compares_only_spans_open_at_the_window_start(monkeypatch):
    # 60 windows of 20 spans each: every span is compared only with the spans of the window before
    unions = []
    from proxy.guardrails.detectors import pii

    original = pii._union
    monkeypatch.setattr(pii, "_union", lambda a, b: unions.append(1) or original(a, b))
    starts = [i * 180 for i in range(60)]
    per_window = [[PiiSpan("PERSON", j * 10, j * 10 + 4, 0.85) for j in range(20)] for _ in starts]
    merged = merge_windows(per_window, starts)
    assert len(merged) == len({(s + j * 10) for s in starts for j in range(20)})
    assert len(unions) <= len(starts) * 20 * 2  # spans of the 20-char overlap only, not all earlier spans


LETTERLESS = ["4111 1111 1111 1111", "212-555-0198", "078-05-1120", "81.2.69.160",
              "12/05/1990 555 123 4567", "+44 20 7946 0958", "2020-01-02?", "(415) 555-2671, 1 2 3"]


@pytest.fixture(scope="module")
def personal_detector() -> PiiDetector:
    """The shipped policy as is (context rule on)."""
    return PiiDetector(_config(analysis_window_chars=400, analysis_overlap_chars=60))


def _spacy_texts(detector, monkeypatch) -> list[str]:
    seen: list[str] = []
    nlp_engine = detector.analyzer().analyzer_engine.nlp_engine
    original = nlp_engine.process_batch

    def recorded(texts, language, **kwargs):
        texts = list(texts)
        seen.extend(texts)
        return original(texts=texts, language=language, **kwargs)

    monkeypatch.setattr(nlp_engine, "process_batch", recorded)
    return seen


def test_letterless_windows_skip_spacys_models(detector, monkeypatch):
    seen = _spacy_texts(detector, monkeypatch)
    detector.analyze("1 " * 3000)
    assert seen == []
    mixed = "12-" * 400 + " My name is John Smith. " + "12-" * 400
    detector.analyze(mixed)
    assert seen and len(seen) < len(detector.windows(mixed)) and all(any(c.isalpha() for c in t) for t in seen)


@pytest.mark.parametrize("text", LETTERLESS)
def test_letterless_texts_find_what_the_full_pipeline_finds(personal_detector, monkeypatch, text):
    shortcut = personal_detector.analyze(text)
    from proxy.guardrails.detectors import pii

    monkeypatch.setattr(pii, "_LETTER", pii.re.compile(""))  # every piece through spaCy's models
    assert personal_detector.analyze(text) == shortcut


def test_letterless_direct_identifiers_are_still_found(personal_detector):
    types = {s.entity_type for text in LETTERLESS for s in personal_detector.analyze(text)}
    assert {"CREDIT_CARD", "PHONE_NUMBER", "IP_ADDRESS"} <= types


def test_new_words_do_not_stay_in_the_pipelines_vocab(detector: PiiDetector):
    """Each request's new words leave spaCy's StringStore when its pass ends (memory_zone): 200
    prompts of never-seen words add nothing to the vocab, and their spans are still found and
    still read their text after the zone ends."""
    nlp = detector.analyzer().analyzer_engine.nlp_engine.get_nlp(detector.config.language)
    detector.analyze("Warm the strings of this thread: write to ada.l@example.org.")
    before = len(nlp.vocab.strings)
    texts = [f"Zorbl{i}quax fremd{i}plink: write to person{i}@example.org." for i in range(200)]
    spans = detector.analyze_batch(texts)
    assert len(nlp.vocab.strings) == before
    assert [texts[i][s.start:s.end] for i, found in enumerate(spans) for s in found
            if s.entity_type == "EMAIL_ADDRESS"] == [f"person{i}@example.org" for i in range(200)]
