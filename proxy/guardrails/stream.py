"""Incremental output screening of a streamed answer: text in → releasable text / stop decision.

Domain code only (no I/O, no threads): the server feeds the provider's content deltas to a
:class:`StreamScanner`, screens the windows it hands back (:func:`screen_window`, in the
detector thread lane) and sends what :meth:`StreamScanner.release` returns.

How it works (docs/operations.md "Streams"):

- **Windows.** The growing answer is cut into windows that close at a sentence end
  (``. ! ? …`` followed by white space, or a newline) or at :data:`MAX_WINDOW_CHARS` (cut at the
  last white space). Each window is screened together with the :data:`OVERLAP_CHARS` before it,
  so a phrase split across chunks or across a window boundary is seen whole. When the provider
  ends, the whole answer is screened once more (what the non-stream path screens), before the
  last held-back text leaves.
- **Hold back.** Text is released once it is more than the output policies' largest
  ``hold_back`` (:class:`proxy.guardrails.schema.HoldBack`) behind the newest text; 0 releases
  every chunk at once, and a guardrail that fires stops the stream at the next window. A hold at
  least :data:`MAX_WINDOW_CHARS` + :data:`OVERLAP_CHARS` guarantees that no text leaves before it
  was screened; a smaller one trades that for time to first token.
- **Privacy restore** across chunk boundaries: text that may be the start of a placeholder
  (``<PER`` waiting for ``SON_1>``) is never released until the placeholder is complete, so
  :meth:`proxy.guardrails.detectors.pii.PiiMasker.restore` always sees whole placeholders.
- **Privacy on output** (a privacy policy with the output stage): text is released only once it
  was screened and masked (:class:`OutputMask`; the hold is then the window). Privacy's windows
  overlap too: each closed window is analysed from up to :data:`OVERLAP_CHARS` of already
  released text (context) to the window's end, and what is released stops before the last
  :data:`MAX_IDENTIFIER_CHARS` (the longest direct identifier written with separators), moved back
  to a white space and before any span that crosses it, so an identifier cut by a window edge is
  analysed whole with the next window and masked whole. One masker serves the whole answer: the
  same value gets the same placeholder in every window, different values different ones.
- **Stop.** After :meth:`StreamScanner.stop` nothing more is released: the held-back text never
  leaves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from proxy.guardrails.decisions import Decision, privacy_decision, safety_decision, worst_scores
from proxy.guardrails.detectors.pii import PiiMasker
from proxy.guardrails.schema import HoldBack, Policy

__all__ = ["MAX_WINDOW_CHARS", "OVERLAP_CHARS", "StreamScanner", "Window", "hold_start", "model_apology",
           "placeholder_safe", "screen_window", "stream_holds", "token_spans", "OutputMask", "gates_on_window"]

#: A window closes at the latest here (characters of new text), cut at the last white space.
MAX_WINDOW_CHARS = 400
#: Characters of already screened text screened again in front of each window.
OVERLAP_CHARS = 120
#: The longest placeholder held back whole (``<US_DRIVER_LICENSE_12>`` is 22).
MAX_PLACEHOLDER_CHARS = 48
#: Privacy on output keeps this many characters of a window back for the next one: the longest
#: direct identifier (policies/privacy.yaml ``context.always``) written with white space in it, an
#: IBAN of 34 characters in groups of four (42), with room for wider separators. Identifiers without
#: white space (e-mail, IP addresses, licence numbers) are never cut: the cut is at a white space.
MAX_IDENTIFIER_CHARS = 64
#: A stream with no white space for this long is cut anyway (at :data:`MAX_IDENTIFIER_CHARS` from its end).
MAX_UNBROKEN_CHARS = 2 * MAX_WINDOW_CHARS
_SPACE = re.compile(r"\s")

_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s|\n")
_PARTIAL_PLACEHOLDER = re.compile(r"<[A-Z0-9_]*\Z")
_TOKEN = re.compile(r"\w+|[^\w\s]")


def token_spans(text: str, pos: int = 0) -> list[int]:
    """Start offsets of the tokens of ``text`` from ``pos``: words, numbers and single punctuation
    marks (an approximation of a BPE tokenizer's count, used for ``hold_back: "N tokens"``)."""
    return [m.start() for m in _TOKEN.finditer(text, pos)]


def hold_start(text: str, hold: HoldBack) -> int:
    """Offset in ``text`` where its held-back tail starts (``len(text)`` for a zero hold)."""
    if hold.size == 0:
        return len(text)
    if hold.unit == "chars":
        return max(0, len(text) - hold.size)
    # Look at a tail first: O(hold), not O(answer). Its first token may be the end of a longer
    # one, so the tail answers only when it holds more tokens than the hold.
    starts = token_spans(text, max(0, len(text) - hold.size * 32))
    if len(starts) <= hold.size:
        starts = token_spans(text)
    return starts[-hold.size] if len(starts) >= hold.size else 0


def placeholder_safe(text: str, end: int) -> int:
    """``end`` moved back so that ``text[:end]`` does not end inside a placeholder (``<PERS``)."""
    lo = max(0, end - MAX_PLACEHOLDER_CHARS)
    at = text.rfind("<", lo, end)
    if at >= 0 and _PARTIAL_PLACEHOLDER.match(text, at, end):
        return at
    return end


@dataclass(frozen=True)
class Window:
    """A closed window: the new text ``[start, end)`` of the answer and ``text``, what is screened
    (the overlap in front of it, then the new text; the whole answer for the final window)."""

    start: int
    end: int
    text: str
    final: bool = False


@dataclass
class StreamScanner:
    """The state of one streamed answer (one per request; not thread-safe).

    ``holds``: the output policies' :class:`HoldBack` (the largest applies); ``restore``: the
    input's placeholder restore (``PiiMasker.restore``, None: no restore); ``gated``: release
    only text whose window was accepted (:meth:`accept`, privacy on output).
    """

    holds: list[HoldBack] = field(default_factory=list)
    restore: Callable[[str], str] | None = None
    gated: bool = False
    window_chars: int = MAX_WINDOW_CHARS
    overlap_chars: int = OVERLAP_CHARS
    raw: str = ""
    scanned: int = 0
    released: int = 0
    stopped: bool = False
    _accepted: list[str] = field(default_factory=list)

    def feed(self, delta: str) -> list[Window]:
        """Append a content delta; returns the windows it closed (screen each, in order)."""
        self.raw += delta
        windows = []
        while (end := self._boundary(self.scanned)) is not None:
            windows.append(self._window(end))
        return windows

    def finish(self) -> Window | None:
        """The provider ended: the final window (new text since the last window; ``text`` = the
        whole answer), None when the answer is blank."""
        if not self.raw.strip():
            return None
        start, self.scanned = self.scanned, len(self.raw)
        return Window(start, len(self.raw), self.raw, final=True)

    def accept(self, window: Window, text: str | None = None) -> None:
        """Gated mode: ``window``'s new text may leave, as ``text`` (e.g. masked) or unchanged."""
        self._accepted.append(self.raw[window.start:window.end] if text is None else text)

    def stop(self) -> None:
        """A guardrail fired: nothing more is released."""
        self.stopped = True

    def readable(self, text: str) -> str:
        """``text`` of the answer as the client reads it: the input's placeholders restored."""
        return self.restore(text) if (self.restore and text) else text

    def release(self, final: bool = False) -> str:
        """The text that may leave now (restored), ``""`` when none or stopped. ``final``: the
        provider ended and the final window passed: everything left is released."""
        if self.stopped:
            return ""
        if self.gated:
            piece, self._accepted = "".join(self._accepted), []
            self.released = self.scanned
        else:
            end = len(self.raw) if final else placeholder_safe(self.raw, self._frontier())
            if end <= self.released:
                return ""
            piece, self.released = self.raw[self.released:end], end
        return self.readable(piece)

    def _frontier(self) -> int:
        return min((hold_start(self.raw, h) for h in self.holds), default=len(self.raw))

    def _boundary(self, start: int) -> int | None:
        """End of the window that starts at ``start``, None while it is still open."""
        match = _SENTENCE_END.search(self.raw, start)
        if match is not None and match.end() - start <= self.window_chars:
            return placeholder_safe(self.raw, match.end()) if match.end() > start else None
        if len(self.raw) - start < self.window_chars:
            return None
        limit = start + self.window_chars
        space = self.raw.rfind(" ", start + 1, limit)
        end = placeholder_safe(self.raw, space + 1 if space > start else limit)
        return end if end > start else limit

    def _window(self, end: int) -> Window:
        start, self.scanned = self.scanned, end
        return Window(start, end, self.raw[max(0, start - self.overlap_chars):end])


# ---- screening with the engine's public API (called in the detector thread lane) -------------

def _output_policies(policies: Iterable[Policy], kind: str) -> list[Any]:
    return [p for p in policies if p.kind == kind and "output" in p.stages]


def stream_holds(policies: Iterable[Policy]) -> list[HoldBack]:
    """The ``hold_back`` of every policy that screens outputs."""
    return [p.hold_back for p in policies if "output" in p.stages]


def gates_on_window(policies: Iterable[Policy]) -> bool:
    """True when a privacy policy masks outputs: text must be masked before it leaves."""
    return bool(_output_policies(policies, "privacy"))


def screen_window(engine: Any, text: str) -> Decision | None:
    """The first output Safety policy's refuse decision for ``text``, None when none fires.

    The same rule as ``GuardrailEngine.screen_output`` (``safety_decision`` over the detector's
    scores, cached by content hash through ``engine.detect``) applied to one window.
    """
    if not text.strip():
        return None
    for policy in _output_policies(engine.policies, "safety"):
        decision = safety_decision(policy, "output", worst_scores(engine.detect(policy, [text], answers=True)),
                                   engine.detectors[policy.id])
        if decision is not None:
            return decision
    return None


def privacy_cut(raw: str, done: int, end: int, spans: Iterable[Any]) -> int:
    """Where the masked release of ``raw[done:end]`` stops while the answer goes on: at most
    :data:`MAX_IDENTIFIER_CHARS` before ``end``, just after a white space (no word is cut; after
    :data:`MAX_UNBROKEN_CHARS` without one, anyway), and before any of ``spans`` (offsets in ``raw``)
    that crosses it. ``done`` when nothing can be released yet."""
    limit = end - MAX_IDENTIFIER_CHARS
    if limit <= done:
        return done
    spaces = [m.end() for m in _SPACE.finditer(raw, done, limit)]
    cut = spaces[-1] if spaces else (placeholder_safe(raw, limit) if limit - done >= MAX_UNBROKEN_CHARS else done)
    for span in sorted(spans, key=lambda s: s.start, reverse=True):
        if span.start < cut < span.end:
            cut = span.start
    return max(done, cut)


@dataclass
class OutputMask:
    """Privacy on output for one stream (module docstring): :meth:`advance` masks the answer up to
    a window's end with one masker (placeholders numbered across the whole answer) and keeps the
    spans of each released part for the decision (offsets per part: ``piece`` = part number)."""

    masker: PiiMasker = field(default_factory=PiiMasker)
    spans: dict[str, list[list[Any]]] = field(default_factory=dict)
    #: Characters of the answer masked and released so far.
    done: int = 0

    def advance(self, engine: Any, raw: str, end: int, final: bool = False) -> str:
        """The masked text of ``raw[done:cut]``, the part of the answer up to ``end`` (a closed
        window's end) that may leave now (:func:`privacy_cut`; ``final``: the answer ended, all of it).

        Analysed: ``raw[context:end]``, ``context`` up to :data:`OVERLAP_CHARS` of released text
        before ``done`` (from a white space), for the words around an identifier. Every output
        privacy policy's spans, overlaps resolved; a span that starts in released text (longer than
        the held tail) is masked from ``done`` on.
        """
        from proxy.guardrails.detectors.pii import resolve_overlaps

        context = self.done - OVERLAP_CHARS
        context = 0 if context <= 0 else (raw.find(" ", context, self.done) + 1 or self.done)
        text = raw[context:end]
        found: dict[str, list[Any]] = {}
        for policy in _output_policies(engine.policies, "privacy"):
            (spans,) = engine.detect(policy, [text]) if text.strip() else ([],)
            found[policy.id] = [replace(s, start=s.start + context, end=s.end + context) for s in spans]
        every = resolve_overlaps(s for spans in found.values() for s in spans)
        cut = end if final else privacy_cut(raw, self.done, end, every)
        if cut <= self.done:
            return ""
        start = self.done

        def part(spans: list[Any]) -> list[Any]:  # inside [start, cut), relative to start
            return [replace(s, start=max(s.start, start) - start, end=s.end - start)
                    for s in spans if s.end > start and s.start < cut and s.end <= cut]

        for policy_id, spans in found.items():
            self.spans.setdefault(policy_id, []).append(part(spans))
        self.done = cut
        return self.masker.mask(raw[start:cut], part(every))

    def decisions(self, engine: Any) -> list[Decision]:
        """One mask decision per output privacy policy that found anything."""
        out = []
        for policy in _output_policies(engine.policies, "privacy"):
            spans = self.spans.get(policy.id, [])
            if any(spans):
                out.append(privacy_decision(policy, "output", [0] * len(spans), spans, engine.detectors[policy.id]))
        return out


def model_apology(engine: Any, text: str) -> bool:
    """True when the engine's apology detector says the delivered answer is a model apology (FAR-A)."""
    detector = getattr(engine, "apology_detector", None)
    return bool(detector and text.strip() and detector.is_apology(text))
