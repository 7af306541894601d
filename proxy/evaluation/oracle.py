"""Claim verification for FAR-H: an oracle set, a regex matcher and format validators.

Pure functions (no I/O): the rows come from :mod:`proxy.evaluation.data`.

**Oracle set.** Each :class:`OracleEntry` holds a question with reference answers known to be
correct and known to be wrong:

- HaluEval QA (Li et al. 2023, "HaluEval: A Large-Scale Hallucination Evaluation Benchmark",
  EMNLP): ``right_answer`` → correct, ``hallucinated_answer`` → incorrect;
- TruthfulQA (Lin, Hilton & Evans 2022, ACL): ``Best Answer`` and ``Correct Answers`` →
  correct, ``Incorrect Answers`` → incorrect (``;``-separated).

A claim about the question is compared with both sides by *distinctive-token coverage*: the
content tokens (:func:`content_tokens`: normalised, stop words dropped, light suffix
stripping) of each reference answer minus every token of the other side's answers and of the
question (the question is left in when removing it would empty the set: ``Fir or Chelone?``
→ ``Firs``). A side's score is the best coverage ``|claim ∩ distinct(r)| / |distinct(r)|`` over
its references. Verdict: ``pass`` when the correct side scores ≥ :data:`MATCH_THRESHOLD` and
the incorrect side does not, ``fail`` the other way round, otherwise (both, neither, or a
negated claim matching a non-negated reference) no verdict: the claim goes to a human.

**Regex matcher.** A :class:`RegexRule` selects claims with ``applies`` and requires that they
match ``expect`` (pass) — otherwise fail: e.g. claims about water's boiling point must say
100 °C / 212 °F.

**Validators.** Calendar dates must exist (no 30 February) and a percentage of a whole must be
within 0–100 %. A validator fails impossible values and otherwise gives no verdict.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from proxy.evaluation.claims import Claim, normalise

__all__ = [
    "MATCH_THRESHOLD",
    "REGULATED_DOMAINS",
    "TRUTHFULQA_DOMAINS",
    "Oracle",
    "OracleEntry",
    "RegexRule",
    "OracleVerdict",
    "content_tokens",
    "halueval_entries",
    "regex_rules_from_rows",
    "truthfulqa_entries",
    "validate_claim",
    "verify_with_oracle",
    "verify_with_regex",
]

#: Minimum distinctive-token coverage for a side to count as matched.
MATCH_THRESHOLD = 0.5
#: Proxy domains (Compliance classifier names) that are regulated: FAR-H target 0.25 %.
REGULATED_DOMAINS = frozenset({"legal", "health", "finance"})
#: TruthfulQA categories mapped to the proxy's regulated domains (the rest are "general").
TRUTHFULQA_DOMAINS = {"Law": "legal", "Health": "health", "Nutrition": "health", "Finance": "finance",
                      "Economics": "finance"}

_STOP = frozenset(
    "a an the of in on at to for from by with about as into over after before than then and or but if so "
    "is are was were be been being am do does did has have had having it its this that these those there "
    "here which who whom whose what when where why how i you he she we they me him her us them my your his "
    "our their will would shall should can could may might must also just very more most much many some "
    "any all each every such only own same other another one".split())
_NEGATIONS = frozenset({"no", "not", "never", "nothing", "none", "nobody", "neither", "nor", "cannot", "don't",
                        "doesn't", "didn't", "isn't", "aren't", "wasn't", "weren't", "won't", "can't"})


def _stem(word: str) -> str:
    # Light suffix stripping (a subset of Porter 1980 step 1a/1b), enough to match
    # "funds"/"funded"/"fund" and "species"/"species".
    if len(word) <= 3 or word.isdigit() or word in _NEGATIONS:
        return word
    for suffix, repl in (("sses", "ss"), ("ies", "y"), ("ied", "y")):
        if word.endswith(suffix):
            return word[: -len(suffix)] + repl
    if word.endswith("ing") and len(word) > 5:
        return word[:-3]
    if word.endswith("ed") and len(word) > 4:
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


def content_tokens(text: str) -> frozenset[str]:
    """Content tokens of ``text``: :func:`~proxy.evaluation.claims.normalise`, stop words dropped
    (negations kept), light suffix stripping. ``"Firs have 4 species"`` → ``{fir, 4, species}``."""
    return frozenset(_stem(w) for w in normalise(text).split() if w not in _STOP)


def _negated(tokens: Iterable[str]) -> bool:
    return any(t in _NEGATIONS for t in tokens)


@dataclass(frozen=True)
class OracleEntry:
    """A question with reference answers: ``correct`` and ``incorrect`` (non-empty strings).

    ``source`` is ``halueval`` or ``truthfulqa``; ``domain`` the proxy domain the question
    belongs to (``general``, ``legal``, ``health``, ``finance``); ``id`` is stable within the
    source (``halueval:12``, ``truthfulqa:40``).
    """

    id: str
    source: str
    question: str
    correct: tuple[str, ...]
    incorrect: tuple[str, ...]
    domain: str = "general"
    category: str = ""


@dataclass(frozen=True)
class OracleVerdict:
    """Outcome of one check: ``verdict`` ``pass``/``fail`` or None (undecided), the ``method``
    that decided, the reference that matched best (``reference``) and the side scores."""

    verdict: str | None
    method: str
    reference: str | None = None
    score_correct: float = 0.0
    score_incorrect: float = 0.0
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"verdict": self.verdict, "method": self.method, "reference": self.reference,
                "score_correct": round(self.score_correct, 4), "score_incorrect": round(self.score_incorrect, 4),
                "detail": self.detail}


class Oracle:
    """Oracle entries indexed by normalised question (:func:`normalise`).

    Raises ValueError when two entries of one oracle share a question but disagree (a
    question must have one set of answers); exact duplicates are merged.
    """

    def __init__(self, entries: Iterable[OracleEntry]) -> None:
        self.entries: dict[str, OracleEntry] = {}
        for entry in entries:
            key = normalise(entry.question)
            old = self.entries.get(key)
            if old is not None and (set(old.correct), set(old.incorrect)) != (set(entry.correct), set(entry.incorrect)):
                raise ValueError(f"oracle questions {old.id} and {entry.id} are the same question with different answers")
            self.entries.setdefault(key, entry)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries.values())

    def lookup(self, question: str | None) -> OracleEntry | None:
        """The entry for ``question`` (normalised match), or None."""
        return self.entries.get(normalise(question)) if question else None


def _require(row: Mapping[str, Any], name: str, where: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {name!r} must be a non-empty string")
    return value.strip()


def halueval_entries(rows: Iterable[Mapping[str, Any]]) -> list[OracleEntry]:
    """Oracle entries from HaluEval QA rows (``question``, ``right_answer``,
    ``hallucinated_answer``); row i gets id ``halueval:i``, domain ``general``.
    Raises ValueError naming the row when a field is missing or empty."""
    entries = []
    for i, row in enumerate(rows):
        where = f"HaluEval QA row {i + 1}"
        entries.append(OracleEntry(f"halueval:{i}", "halueval", _require(row, "question", where),
                                   (_require(row, "right_answer", where),),
                                   (_require(row, "hallucinated_answer", where),)))
    return entries


def _split_answers(value: str) -> list[str]:
    return [a.strip() for a in value.split(";") if a.strip()]


def truthfulqa_entries(rows: Iterable[Mapping[str, Any]]) -> list[OracleEntry]:
    """Oracle entries from TruthfulQA rows (``Question``, ``Best Answer``, ``Correct Answers``,
    ``Incorrect Answers``; answers ``;``-separated). The domain comes from ``Category`` via
    :data:`TRUTHFULQA_DOMAINS` (else ``general``). Correct answers that only decline
    (``I have no comment``) are kept: they match nothing a claim says. Raises ValueError
    naming the row for missing fields."""
    entries = []
    for i, row in enumerate(rows):
        where = f"TruthfulQA row {i + 1}"
        question = _require(row, "Question", where)
        correct = list(dict.fromkeys([_require(row, "Best Answer", where), *_split_answers(row.get("Correct Answers") or "")]))
        incorrect = _split_answers(_require(row, "Incorrect Answers", where))
        category = (row.get("Category") or "").strip()
        entries.append(OracleEntry(f"truthfulqa:{i}", "truthfulqa", question, tuple(correct), tuple(incorrect),
                                   TRUTHFULQA_DOMAINS.get(category, "general"), category))
    return entries


def _distinct(refs: Sequence[str], other: frozenset[str], question: frozenset[str]) -> list[tuple[str, frozenset[str]]]:
    result = []
    for ref in refs:
        tokens = content_tokens(ref) - other
        narrowed = tokens - question
        tokens = narrowed or tokens
        if tokens:
            result.append((ref, tokens))
    return result


def _best(claim: frozenset[str], refs: list[tuple[str, frozenset[str]]]) -> tuple[float, str | None, frozenset[str]]:
    best_tokens: frozenset[str]
    best, best_ref, best_tokens = 0.0, None, frozenset()
    for ref, tokens in refs:
        score = len(claim & tokens) / len(tokens)
        if score > best:
            best, best_ref, best_tokens = score, ref, tokens
    return best, best_ref, best_tokens


def verify_with_oracle(claim: Claim, entry: OracleEntry) -> OracleVerdict:
    """Check ``claim`` against ``entry``'s answers by distinctive-token coverage (module doc).

    Returns an OracleVerdict with method ``oracle``: ``pass``, ``fail`` or None (undecided).
    """
    tokens = content_tokens(claim.text)
    question = content_tokens(entry.question)
    correct_all = frozenset().union(*(content_tokens(a) for a in entry.correct))
    incorrect_all = frozenset().union(*(content_tokens(a) for a in entry.incorrect))
    sc, ref_c, _ = _best(tokens, _distinct(entry.correct, incorrect_all, question))
    si, ref_i, _ = _best(tokens, _distinct(entry.incorrect, correct_all, question))
    if sc >= MATCH_THRESHOLD and si < MATCH_THRESHOLD:
        if _negated(tokens) and not _negated(content_tokens(ref_c or "")):
            return OracleVerdict(None, "oracle", ref_c, sc, si, "negated claim matches a correct answer")
        return OracleVerdict("pass", "oracle", ref_c, sc, si)
    if si >= MATCH_THRESHOLD and sc < MATCH_THRESHOLD:
        if _negated(tokens) and not _negated(content_tokens(ref_i or "")):
            return OracleVerdict(None, "oracle", ref_i, sc, si, "negated claim matches an incorrect answer")
        return OracleVerdict("fail", "oracle", ref_i, sc, si)
    detail = "matches both correct and incorrect answers" if sc >= MATCH_THRESHOLD else "matches no reference answer"
    return OracleVerdict(None, "oracle", ref_c if sc >= si else ref_i, sc, si, detail)


@dataclass(frozen=True)
class RegexRule:
    """A regex fact check: claims matching ``applies`` must match ``expect``.

    Both are Python regular expressions, searched case-insensitively in the claim text.
    ``name`` identifies the rule in results.
    """

    name: str
    applies: re.Pattern[str]
    expect: re.Pattern[str]


def regex_rules_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[RegexRule]:
    """Rules from ``[{"name", "applies", "expect"}, ...]`` (e.g. a YAML/JSON file's list).

    Raises ValueError naming the rule for a missing field or an invalid regular expression.
    """
    rules = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"regex rule {i + 1}: must be a mapping with name, applies, expect")
        name = str(row.get("name") or f"rule-{i + 1}")
        patterns = []
        for key in ("applies", "expect"):
            value = row.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"regex rule {name!r}: {key!r} must be a non-empty regular expression")
            try:
                patterns.append(re.compile(value, re.IGNORECASE))
            except re.error as exc:
                raise ValueError(f"regex rule {name!r}: {key!r} is not a valid regular expression: {exc}") from None
        rules.append(RegexRule(name, patterns[0], patterns[1]))
    return rules


def verify_with_regex(claim: Claim, rules: Sequence[RegexRule]) -> OracleVerdict | None:
    """The first rule whose ``applies`` matches decides (``pass`` when ``expect`` matches,
    else ``fail``); None when no rule applies."""
    for rule in rules:
        if rule.applies.search(claim.text):
            ok = rule.expect.search(claim.text) is not None
            return OracleVerdict("pass" if ok else "fail", "regex", rule.name, detail=f"rule {rule.name}")
    return None


_MONTH_NUMBERS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTH_NUMBERS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH_NUMBERS["sept"] = 9
_DAY_MONTH_YEAR = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?([A-Za-z]+)\.?,?\s+(\d{3,4})")
_MONTH_DAY_YEAR = re.compile(r"([A-Za-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{3,4})")
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_PERCENT_OF = re.compile(r"(\d+(?:\.\d+)?)\s?(?:%|percent|per\s?cent)\s+of\b", re.IGNORECASE)


def _date_ok(year: int, month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(max(year, 1), month)[1]


def validate_claim(claim: Claim) -> OracleVerdict | None:
    """Format validators: an impossible calendar date (``February 30, 2001``, ``2001-13-01``)
    or a share of a whole above 100 % (``120% of voters``) fails the claim. Returns None when
    no validator finds a problem (a valid date is not thereby true: no verdict)."""
    for value in claim.features.get("date", []):
        for regex, order in ((_ISO, "ymd"), (_MONTH_DAY_YEAR, "mdy"), (_DAY_MONTH_YEAR, "dmy")):
            m = regex.fullmatch(value.strip())
            if not m:
                continue
            parts = dict(zip(order, m.groups()))
            month = parts["m"]
            month_number = int(month) if month.isdigit() else _MONTH_NUMBERS.get(month.lower())
            if month_number is None:
                continue
            if not _date_ok(int(parts["y"]), month_number, int(parts["d"])):
                return OracleVerdict("fail", "validator", value, detail=f"no such date: {value}")
    for m in _PERCENT_OF.finditer(claim.text):
        if float(m.group(1)) > 100:
            return OracleVerdict("fail", "validator", m.group(0), detail=f"a share above 100%: {m.group(0)}")
    return None
