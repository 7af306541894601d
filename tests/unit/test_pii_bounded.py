"""Issue 15, "A 12 KB prompt stalls every client": bounded PII work (real presidio + spaCy, no mocks).

No recognizer sees more than the configured window; e-mail and URL use bounded patterns; each
thread has its own analyzer (no lock serialising PII analysis).
"""

import threading
from pathlib import Path

import pytest
import yaml

from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig, PiiSpan, merge_windows

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
PATHOLOGICAL = "a." * 6000 + "@"


def _config(**overrides) -> PiiDetectorConfig:
    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    return PiiDetectorConfig(**{**block, **overrides})


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    # every detected span reported: these tests are about the recognizers' bounded work, not about
    # which spans are personal data (tests/unit/test_privacy_context.py)
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
