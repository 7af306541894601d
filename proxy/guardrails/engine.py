"""The guardrail engine: applies the policy matrix to a request's messages and a model's answer.

Domain code only: no network, no files, no aiohttp. Detectors are built per policy kind by a
:class:`~proxy.guardrails.registry.DetectorRegistry` and called only through the
:class:`~proxy.guardrails.detector.Detector` protocol (``detect``); the engine never names a
detector class. Detector work is CPU-bound; the server calls :meth:`GuardrailEngine.screen_input`
/ :meth:`~GuardrailEngine.screen_output` from a thread pool. Results are cached by content hash
(:mod:`proxy.guardrails.cache`).

Decisions follow docs/architecture.md "Request flow": each triggered policy yields a
:class:`~proxy.guardrails.decisions.Decision`; precedence refuse > escalate > mask > summarize >
allow decides what the client sees.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import Counter
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any, Callable, NamedTuple

from proxy.guardrails.cache import ScanCache
from proxy.guardrails.conversation import (
    ReplyMatcher,
    Settled,
    current_turn_start,
    open_question,
    settled_turns,
    withheld_indexes,
)
from proxy.guardrails.decisions import (
    Decision,
    decisive_action,
    escalation_decision,
    fmt_score,
    notice_decision,
    privacy_decision,
    safety_decision,
    summary_decision,
    unreadable_decision,
    worst_scores,
)
from proxy.guardrails.detector import ApologyCheck, Detector
from proxy.guardrails.detectors import patterns
from proxy.guardrails.detectors.pii import PiiMasker
from proxy.guardrails.messages import (
    TextPiece,
    asked_questions,
    definition_pieces,
    definition_texts,
    is_question,
    judged_texts,
    map_definitions,
    map_text,
    map_tool_calls,
    message_text,
    screened_text,
    text_pieces,
    unreadable_parts,
)
from proxy.guardrails.plan import ContinuityPlan, DomainRoute, InputScreen, Message, OutputScreen, SummaryResult
from proxy.guardrails.registry import DetectorRegistry, default_registry
from proxy.guardrails.schema import Policy, SafetyPolicy

__all__ = ["GuardrailEngine", "Decision", "decisive_action", "fmt_score", "GENERAL_DOMAIN", "input_texts",
           "InputScreen", "OutputScreen", "ContinuityPlan", "SummaryResult", "DomainRoute", "stop_side_threads"]

log = logging.getLogger("sonate.guardrails")

GENERAL_DOMAIN = "general"
#: ScanCache namespace of the verdicts recorded per user-message text (conversation.py "recorded").
VERDICTS = "verdict"

TokenCounter = Callable[[str, list[Message]], int]

#: Inputs whose text pieces total at most this many characters are screened in two threads at once
#: (when the caller asks for it, ``side_by_side``): Privacy (presidio/spaCy, with its per-thread
#: analyzer) in the calling thread, Safety and Compliance (ONNX Runtime embeddings and numpy
#: classifiers, which release the GIL) in a side thread. Larger inputs are screened in one thread,
#: one policy after the other, so a large prompt never takes more than its lane's thread.
PARALLEL_MAX_CHARS = 8000
#: ... and at most this many text pieces (a detector's cost is mostly per piece).
PARALLEL_MAX_PIECES = 200
#: Texts a detector is given at once; :func:`~proxy.guardrails.detectors.patterns.pause_point` between
#: such groups, so a screen of many short texts (a passed-through list of numbers, a schema ``enum``)
#: gives way to short requests and is abandoned when it timed out, like one long text.
DETECT_GROUP = 32
#: Side threads for Safety and Compliance (a judgement that cannot start at once runs in the caller).
SIDE_THREADS = 4


@lru_cache(maxsize=1)
def _side_pool() -> ThreadPoolExecutor:
    """The process's side threads (created on the first parallel screen; a forked child makes its own)."""
    return ThreadPoolExecutor(SIDE_THREADS, thread_name_prefix="guardrails-side")


def stop_side_threads() -> None:
    """Stop the side threads, waiting for their screens; the next parallel screen starts new ones.
    Before a fork (the child has none of the parent's threads, :mod:`proxy.server.admission.workers`)."""
    if _side_pool.cache_info().currsize:
        _side_pool().shutdown(wait=True)
        _side_pool.cache_clear()


if hasattr(os, "register_at_fork"):  # a child never submits to the parent's pool, whose threads it lacks
    os.register_at_fork(after_in_child=_side_pool.cache_clear)


def _pausing_with(hook: Callable[[], None] | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run under the pause ``hook`` of the thread that submits it (a side thread's share of a
    screen pauses, and is abandoned, with the screen)."""
    if hook is None:
        return fn

    def paused(*args: Any) -> Any:
        with patterns.pausing(hook):
            return fn(*args)

    return paused


class _Judgement(NamedTuple):
    """Safety and Compliance on a request's input (the part of :meth:`GuardrailEngine.screen_input`
    before Privacy): the route, the settled history turns and the refusals."""

    route: DomainRoute
    settled: list[Settled]
    withheld: set[int]
    refusals: list[Decision]
    message_refusals: list[Decision]


class _PrivacyScan(NamedTuple):
    """The first input Privacy policy's spans for the text pieces of a request (definitions first,
    then the messages: ``(message index or None, piece)``), or the error the detector raised."""

    pieces: list[tuple[int | None, TextPiece]]
    spans: list[Any] | None = None
    error: BaseException | None = None


def input_texts(messages: list[Message], assistant_turns: int | None = None) -> list[str]:
    """The texts input Safety judges: every message's :func:`judged_texts` (its joined text, and
    each of its sentences alone, so other fields cannot dilute one), whatever its role.

    Every text the client writes is input, client-written assistant turns included
    (a prefilled or many-shot conversation is the client's text, not the model's);
    ``assistant_turns`` (:attr:`SafetyPolicy.input_assistant_turns`) keeps only the latest N
    assistant turns (None: all). Blank texts are left out.
    """
    assistant = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    skipped = set(assistant[:len(assistant) - assistant_turns]) if assistant_turns is not None else set()
    texts = (t for i, m in enumerate(messages) if i not in skipped for t in judged_texts(m))
    return [t for t in texts if t.strip()]


class GuardrailEngine:
    """Evaluates the guardrails matrix. Thread-safe; one instance per process.

    Args:
        policies: enabled policies (``load_policies``).
        count_tokens: ``(model, messages) -> int`` (litellm's token counter, injected).
        registry: detector factories by policy kind (:func:`default_registry` when omitted).
        detectors: policy_id → detector; built through ``registry`` when omitted.
        apology_detector: detector of model-initiated apologies in outputs (optional).
        cache: scan-result cache (a fresh :class:`ScanCache` when omitted).

    Raises whatever the registry's factories raise (bad ``detector:`` block, missing model).
    """

    def __init__(
        self,
        policies: list[Policy],
        *,
        count_tokens: TokenCounter,
        registry: DetectorRegistry | None = None,
        detectors: dict[str, Detector[Any]] | None = None,
        apology_detector: ApologyCheck | None = None,
        cache: ScanCache | None = None,
    ) -> None:
        self.policies = policies
        self.registry = registry or default_registry()
        self.detectors = detectors if detectors is not None else self.registry.build_all(policies)
        self.count_tokens = count_tokens
        self.apology_detector = apology_detector
        self.cache = cache or ScanCache()
        self.replies = ReplyMatcher([p.apology for p in policies if p.kind == "safety"],
                                    [p.notice for p in policies if p.kind == "compliance"])
        for policy in policies:
            detector = self.detectors.get(policy.id)
            if detector is not None:
                log.info("policy %s (%s): detector %s %s", policy.id, policy.kind,
                         getattr(detector, "name", "?"), getattr(detector, "version", ""))

    def _policies(self, kind: str, stage: str) -> list[Any]:
        """Policies of ``kind`` that screen ``stage``, in configuration order."""
        return [p for p in self.policies if p.kind == kind and stage in p.stages]

    def detect(self, policy: Policy, texts: list[str], answers: bool = False) -> list[Any]:
        """The results of ``policy``'s detector for ``texts`` (cached per policy and text), computed
        :data:`DETECT_GROUP` texts at a time with a pause point between groups (each text's result
        does not depend on the others). ``answers``: the texts are the model's; a detector that reads
        answers differently (its ``detect_answers``: output Safety,
        :meth:`~proxy.guardrails.detectors.safety.SafetyDetector.detect_answers`) is called through
        it, cached apart."""
        detector = self.detectors[policy.id]
        namespace, compute = policy.id, detector.detect
        if answers and hasattr(detector, "detect_answers"):
            namespace, compute = f"{policy.id}#answers", detector.detect_answers
        if len(texts) <= DETECT_GROUP:
            return self.cache.map(namespace, texts, compute)
        results: list[Any] = []
        for start in range(0, len(texts), DETECT_GROUP):
            if start:
                patterns.pause_point()
            results += self.cache.map(namespace, texts[start:start + DETECT_GROUP], compute)
        return results

    # ---- input -----------------------------------------------------------------------------

    def classify_domain(self, messages: list[Message], definitions: dict[str, Any] | None = None,
                        withheld: AbstractSet[int] = frozenset()) -> DomainRoute:
        """The request's domain by the first input compliance policy: of every text of the open
        question (:func:`~proxy.guardrails.conversation.open_question`: the last user message,
        earlier unanswered user messages, the questions asked in system/developer instructions, the
        current turn's tool results, none of ``withheld``) and of the questions in the tool
        definitions (:func:`~proxy.guardrails.messages.is_question`: a tool's own description, "Issue
        a refund for a payment", or a shop's instructions, "refunds within 30 days of delivery", are
        not questions asked; :func:`~proxy.guardrails.messages.asked_questions`), the most
        regulated: an escalated text first, then one with a notice, then the highest regulated
        probability; the last user message wins ties. Each text is judged once per content (the scan
        cache), so a resent conversation costs one new text per turn."""
        policies = self._policies("compliance", "input")
        sources: dict[str, int | None] = {}
        for i in open_question(messages, withheld):
            if messages[i].get("role") in ("system", "developer"):  # the questions asked in instructions
                for question in asked_questions(message_text(messages[i])):
                    sources.setdefault(question, i)
            else:
                sources.setdefault(message_text(messages[i]), i)
        for text in definition_texts(definitions):
            if is_question(text):  # a question, not a tool's own instructions
                sources.setdefault(text, None)
        texts = [t for t in sources if t.strip()]
        if not policies or not texts:
            return DomainRoute(GENERAL_DOMAIN, "1.0000")
        results = self.detect(policies[0], texts)
        regulated = self._regulated_probability(policies[0])
        text, result = max(zip(texts, results),
                           key=lambda tr: (bool(tr[1].regulated), tr[1].notice is not None, regulated(tr[1])))
        return DomainRoute(result.domain, fmt_score(result.confidence), result, policies[0], sources[text])

    def _regulated_probability(self, policy: Policy) -> Callable[[Any], float]:
        """``result -> summed probability of the regulated domains`` for ``policy``'s detector (its
        ``config.domains``; 0.0 for a detector without them)."""
        domains = getattr(getattr(self.detectors[policy.id], "config", None), "domains", {})
        names = {name for name, spec in domains.items() if getattr(spec, "regulated", False)}
        return lambda result: sum(p for d, p in getattr(result, "scores", {}).items() if d in names)

    def _safety(self, stage: str, texts_of: Callable[[SafetyPolicy], list[str]],
                definitions: bool = False) -> list[Decision]:
        """Refuse decisions of every safety policy of ``stage`` that fires on its ``texts_of(policy)``
        (``definitions``: the texts are tool definitions, judged at the policy's
        :meth:`~proxy.guardrails.schema.SafetyPolicy.for_definitions` thresholds)."""
        fired = []
        for policy in self._policies("safety", stage):
            texts = [t for t in texts_of(policy) if t.strip()]
            if texts:
                judged_by = policy.for_definitions() if definitions else policy
                scores = worst_scores(self.detect(policy, texts, answers=stage == "output"))
                fired.append(safety_decision(judged_by, stage, scores, self.detectors[policy.id]))
        return [d for d in fired if d is not None]

    def _unreadable(self, messages: list[Message]) -> list[Decision]:
        """Refuse decisions of the input safety policies that refuse content parts no detector
        reads (:attr:`~proxy.guardrails.schema.SafetyPolicy.unreadable_parts`) when ``messages``
        carry any (the parts are counted only when such a policy exists: the default forwards)."""
        refusing = [p for p in self._policies("safety", "input") if p.unreadable_parts == "refuse"]
        if not refusing:
            return []
        parts = Counter(kind for m in messages for kind in unreadable_parts(m))
        fired = (unreadable_decision(p, parts) for p in refusing)
        return [d for d in fired if d is not None]

    def _policy(self, policy_id: str) -> Any:
        return next(p for p in self.policies if p.id == policy_id)

    def screen_input(self, messages: list[Message], definitions: dict[str, Any] | None = None,
                     side_by_side: bool = True) -> InputScreen:
        """Apply Safety, Privacy and Compliance to the request's messages and tool definitions.

        Everything the client wrote is input (:mod:`proxy.guardrails.messages`): Safety judges
        every message's texts (:func:`input_texts`: client-written assistant turns, tool calls and
        tool results too), and refuses content parts no detector reads (images, audio, file data)
        where its policy says ``unreadable_parts: refuse``; Privacy masks every text piece of every
        message (tool-call arguments inside their JSON), Compliance reads the open question
        (:meth:`classify_domain`). ``definitions`` (the request's
        ``tools`` / ``tool_choice`` / ``response_format``, any subset, None: none) are input too:
        Safety judges their :func:`~proxy.guardrails.messages.definition_texts` (a refusal caused
        by them alone records no verdict for the user's turn), Privacy masks them before the messages
        (:func:`~proxy.guardrails.messages.definition_pieces`; schemas stay valid); the masked
        copy is ``InputScreen.definitions``. History turns the proxy
        already refused or escalated (:mod:`proxy.guardrails.conversation`) keep that verdict:
        they are not judged again and are withheld from the model; the placeholders of the rest
        are numbered over the whole request, so a resent history is masked identically. Returns
        the decisive action and the (masked) messages the model may see. Refusal stops the
        evaluation of weaker policies' actions (their triggers are still reported).

        ``side_by_side``: Privacy may run beside Safety and Compliance (:data:`PARALLEL_MAX_CHARS`);
        False screens one policy after the other in the calling thread, for a caller whose other
        work already keeps the CPUs busy (the proxy under concurrent load, where a second thread per
        screen only contends for the GIL; docs/operations.md "Performance"). Same decisions either way.
        """
        pieces = self._pieces(messages, definitions)
        patterns.pause_point()  # walking a request of many fields takes seconds; an abandoned screen stops here
        scan: _PrivacyScan | None = None
        if side_by_side and self._parallel(pieces):  # Privacy here while Safety and Compliance run in a side thread
            side = _side_pool().submit(_pausing_with(patterns.pause_hook(), self._judge_input), messages, definitions)
            scan = self._privacy_scan(pieces)
            judged = self._judge_input(messages, definitions) if side.cancel() else side.result()
        else:
            judged = self._judge_input(messages, definitions)
        route, settled, withheld, refusals, message_refusals = judged
        if refusals:
            if message_refusals:  # the verdict belongs to the user's turn only when its messages fire
                self._record(messages, "refuse")
            apology = self._policy(refusals[0].policy_id).apology
            return InputScreen("refuse", messages, [refusals[0]], refusals, route.domain, route.confidence,
                               apology=apology, settled=settled, definitions=definitions)
        masked, masked_definitions, masker, mask = self._mask_input(messages, withheld, definitions, scan)
        escalation = self._escalate(route)
        notice = self._notice(route) if escalation is None else None
        decisions = [d for d in (mask, escalation, notice) if d is not None]
        screen = InputScreen(decisive_action([d.action for d in decisions]), masked, decisions, list(decisions),
                             route.domain, route.confidence, masker=masker, settled=settled,
                             definitions=masked_definitions)
        if escalation is not None and route.policy is not None:
            self._record(messages, "escalate", route.source)
            screen.escalation_id = escalation.evidence["escalation_id"]
            screen.notice = route.policy.notice.format(domain=route.domain, escalation_id=screen.escalation_id)
        elif notice is not None:
            screen.notice = route.result.notice
        return screen

    def _judge_input(self, messages: list[Message], definitions: dict[str, Any] | None) -> _Judgement:
        """Compliance's route and Safety's refusals for :meth:`screen_input` (no side effects but
        the scan cache: the caller records verdicts)."""
        settled = self.settled(messages)
        withheld = withheld_indexes(messages, settled)
        route = self.classify_domain(messages, definitions, withheld)
        patterns.pause_point()
        judged = [m for i, m in enumerate(messages) if i not in withheld]
        tool_texts = definition_texts(definitions)
        patterns.pause_point()
        message_refusals = (self._safety("input", lambda p: input_texts(judged, p.input_assistant_turns))
                            or self._unreadable(judged))
        refusals = message_refusals or (self._safety("input", lambda p: tool_texts, definitions=True)
                                        if tool_texts else [])
        return _Judgement(route, settled, withheld, refusals, message_refusals)

    def count_pieces(self, messages: list[Message], definitions: dict[str, Any] | None = None) -> int:
        """How many texts :meth:`screen_input` has Privacy read one by one for these inputs (each
        piece of :func:`~proxy.guardrails.messages.definition_pieces` and
        :func:`~proxy.guardrails.messages.text_pieces`); no detector runs."""
        return len(self._pieces(messages, definitions))

    @staticmethod
    def _pieces(messages: list[Message], definitions: dict[str, Any] | None) -> list[tuple[int | None, TextPiece]]:
        """Every text piece Privacy reads: ``(None, piece)`` for the definitions first, then
        ``(message index, piece)`` for the messages (the order the maskers walk them)."""
        pieces: list[tuple[int | None, TextPiece]] = [(None, p) for p in definition_pieces(definitions)]
        pieces += [(i, p) for i, m in enumerate(messages) for p in text_pieces(m)]
        return pieces

    def _parallel(self, pieces: list[tuple[int | None, TextPiece]]) -> bool:
        """True when the input screen runs Privacy beside Safety/Compliance (see :data:`PARALLEL_MAX_CHARS`)."""
        if not self._policies("privacy", "input"):
            return False
        if not (self._policies("safety", "input") or self._policies("compliance", "input")):
            return False
        return len(pieces) <= PARALLEL_MAX_PIECES and sum(len(p.text) for _, p in pieces) <= PARALLEL_MAX_CHARS

    def _privacy_scan(self, pieces: list[tuple[int | None, TextPiece]]) -> _PrivacyScan:
        """The first input Privacy policy's spans of ``pieces``; a detector error is kept, raised only
        if the masking needs the spans (a refused request never did, and still gets its refusal)."""
        policy = self._policies("privacy", "input")[0]
        try:
            return _PrivacyScan(pieces, self.detect(policy, [p.text for _, p in pieces]))
        except Exception as exc:  # re-raised by _mask_input when it is needed
            return _PrivacyScan(pieces, error=exc)

    def settled(self, messages: list[Message]) -> list[Settled]:
        """History turns of ``messages`` that keep an earlier refuse/escalate verdict
        (:func:`proxy.guardrails.conversation.settled_turns`: the proxy's reply follows them, or a
        verdict was recorded for their text)."""
        return settled_turns(messages, self.replies, lambda text: self.cache.get(VERDICTS, text))

    def _record(self, messages: list[Message], verdict: str, source: int | None = None) -> None:
        """Record ``verdict`` for the current turn's user message and for the user message at index
        ``source`` (the earlier unanswered question that decided an escalation), for a later request's
        history: a question followed by "Thanks!" is settled with the turn it was judged in."""
        start = current_turn_start(messages)
        for i in (start, source):
            if i is not None and messages and messages[i].get("role") == "user":
                self.cache.put(VERDICTS, screened_text(messages[i]), verdict)

    def mask_messages(self, messages: list[Message]) -> list[Message]:
        """``messages`` as the model would see them: the first input Privacy policy's placeholders
        in place of personal data (unchanged when no policy masks). For what is stored outside the
        request, e.g. the review item of a refused prompt (docs/security.md "Review")."""
        return self._mask_input(messages)[0]

    def _mask_input(self, messages: list[Message], withheld: AbstractSet[int] = frozenset(),
                    definitions: dict[str, Any] | None = None, scan: _PrivacyScan | None = None
                    ) -> tuple[list[Message], dict[str, Any] | None, PiiMasker | None, Decision | None]:
        """(messages with PII replaced by placeholders, minus the ``withheld`` indexes; the
        ``definitions`` likewise masked; their masker; the mask decision, over the forwarded
        texts only).

        Pieces are read definitions first (a conversation resends the same tools, so their
        placeholders stay put), then the messages; placeholders are numbered over every message,
        withheld ones included, so the same history gets the same placeholders in every request
        of a conversation. A definition piece's span has ``message: null`` and a ``field`` such as
        ``tools.0.function.description``. Only the first input privacy policy masks; a second
        would only see placeholders. ``scan``: that policy's spans, already found by :meth:`screen_input`.
        """
        forwarded = [m for i, m in enumerate(messages) if i not in withheld]
        for policy in self._policies("privacy", "input")[:1]:
            if scan is None:
                pieces = self._pieces(messages, definitions)
                spans = self.detect(policy, [p.text for _, p in pieces])
            elif scan.error is not None:
                raise scan.error
            else:
                pieces, scan_spans = scan.pieces, scan.spans
                if scan_spans is None:  # a scan without an error carries its spans
                    raise ValueError("privacy scan has neither spans nor an error")
                spans = scan_spans
            corefer = getattr(self.detectors[policy.id], "corefer", None)
            if corefer is not None and len(pieces) > 1:  # a person masked in one text is masked in all
                spans = corefer([p.text for _, p in pieces], spans)
            keep = [k for k, (i, _) in enumerate(pieces) if i not in withheld]
            if not any(spans[k] for k in keep):
                break
            masker = PiiMasker()
            remaining = iter(spans)  # the walkers visit pieces in definition_pieces / text_pieces order
            # The lambdas run within this iteration, which returns: no late binding.
            masked_definitions = map_definitions(definitions, lambda t: masker.mask(t, next(remaining)))  # noqa: B023
            # a message none of whose texts holds a span is passed on as it is (as every message of a
            # request without personal data is), not deep-copied: a resent history costs no copy
            with_spans = {i for (i, _), found in zip(pieces, spans) if found}
            counts = Counter(i for i, _ in pieces)
            masked = []
            for index, message in enumerate(messages):
                if index in with_spans:
                    masked.append(map_text(message, lambda t: masker.mask(t, next(remaining))))  # noqa: B023
                else:
                    for _ in range(counts[index]):  # its pieces' (empty) spans
                        next(remaining)
                    masked.append(message)
            decision = privacy_decision(policy, "input", [pieces[k][0] for k in keep], [spans[k] for k in keep],
                                        self.detectors[policy.id], fields=[pieces[k][1].field for k in keep],
                                        piece_numbers=keep)
            return [m for i, m in enumerate(masked) if i not in withheld], masked_definitions, masker, decision
        return forwarded, definitions, None, None

    def _notice(self, route: DomainRoute) -> Decision | None:
        """A notice decision when the route is in the ambiguous band of a ``notice`` policy."""
        if route.policy is None or route.result is None or not getattr(route.result, "notice", None):
            return None
        return notice_decision(route.policy, route.result, route.confidence, self.detectors[route.policy.id])

    def _escalate(self, route: DomainRoute) -> Decision | None:
        """An escalation (with a fresh ``esc_`` id) when the route is regulated."""
        if not route.regulated or route.policy is None:
            return None
        return escalation_decision(route.policy, route.result, route.confidence, "esc_" + uuid.uuid4().hex,
                                   self.detectors[route.policy.id])

    # ---- continuity ------------------------------------------------------------------------

    def continuity_plan(self, messages: list[Message], model: str) -> ContinuityPlan | None:
        """A summarization plan when the conversation exceeds a continuity policy's budget.

        Leading system/developer messages and the last ``keep_last_messages`` stay verbatim;
        the turns between them are summarized. None when under budget or nothing to summarize.
        The tokens are counted (``count_tokens``) only when there is something to summarize: a
        single-turn request, most of the traffic, never pays for litellm's token counter.
        """
        n_head = 0
        while n_head < len(messages) and messages[n_head].get("role") in ("system", "developer"):
            n_head += 1
        body = messages[n_head:]
        tokens: int | None = None
        for policy in self._policies("continuity", "input"):
            if len(body) <= policy.keep_last_messages:
                continue
            if tokens is None:
                tokens = self.count_tokens(model, messages)
            if tokens <= policy.max_tokens:
                continue
            split = len(body) - policy.keep_last_messages
            return ContinuityPlan(policy, tokens, messages[:n_head], body[:split], body[split:])
        return None

    def summary_request(self, plan: ContinuityPlan) -> list[Message]:
        """The messages to send to the summarizer model for ``plan``: its prompt and a transcript."""
        transcript = "\n".join(f"{m.get('role', 'user')}: {message_text(m)}" for m in plan.older)
        return [{"role": "system", "content": plan.policy.summary_prompt}, {"role": "user", "content": transcript}]

    def apply_summary(self, plan: ContinuityPlan, summary: str, model: str) -> SummaryResult:
        """Replace ``plan.older`` with one system message carrying ``summary``; token counts by ``model``."""
        from proxy.primitives.canonical import sha256_ref

        summary_message = {"role": "system", "content": f"Summary of the earlier conversation: {summary}"}
        messages = [*plan.head, summary_message, *plan.kept]
        decision = summary_decision(plan.policy, sha256_ref(summary.encode("utf-8")), plan.tokens_before,
                                    self.count_tokens(model, messages), len(plan.older))
        return SummaryResult(messages, decision)

    # ---- output ----------------------------------------------------------------------------

    def screen_output(self, text: str, masker: PiiMasker | None = None,
                      tool_calls: list[dict[str, Any]] | None = None) -> OutputScreen:
        """Apply output-stage policies to the model's answer ``text`` (and its ``tool_calls``).

        Order: Safety (refuse replaces the whole answer, tool calls included, with the policy's
        apology), Privacy (new PII in the answer masked when the policy screens outputs), then
        placeholders from the input restored when the policy says so, in the text and in the
        tool calls' names and arguments (inside their JSON); finally model-initiated apology
        detection. Safety judges the answer as the client reads it: with the input's placeholders
        restored when they will be (as input Safety judges the client's own text, not its masked
        form; a ``<PERSON_1>`` is not a word the classifier was trained on).
        """
        restore = masker.restore if masker is not None and any(
            p.restore_in_answer for p in self._policies("privacy", "input")) else None
        readable = restore(text) if restore else text
        refusals = self._safety("output", lambda p: [readable])
        if refusals:
            apology = self._policy(refusals[0].policy_id).apology
            return OutputScreen(apology, [refusals[0]], refused=True, model_apology=False)
        decisions: list[Decision] = []
        for policy in self._policies("privacy", "output"):
            (spans,) = self.detect(policy, [text])
            if spans:
                text = PiiMasker().mask(text, spans)
                decisions.append(privacy_decision(policy, "output", [0], [spans], self.detectors[policy.id]))
        if restore:
            text = restore(text)
            tool_calls = map_tool_calls(tool_calls, restore)
        model_apology = bool(self.apology_detector and text.strip() and self.apology_detector.is_apology(text))
        return OutputScreen(text, decisions, refused=False, model_apology=model_apology, tool_calls=tool_calls)
