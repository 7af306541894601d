"""One ``sonate eval conversation`` run: the metrics over the conversations → the result document.

Inputs are prepared by the caller (:mod:`proxy.cli.evaluate`): the conversations (recorded, or
replayed through the proxy by :mod:`.replay`), an optional LLM :class:`~proxy.evaluation.judge.Judge`,
the proxy's Safety detectors (:class:`.risk.SafetyScorer`, loaded once), the sentence embedder and
the HurtLex lexicon. Judge calls run concurrently (``concurrency`` at a time) on one event loop;
every verdict's template id and judge model are kept in the result.

Result document (:data:`FORMAT_ID`)::

    {"format", "run_id", "generated", "source", "judge": {model, templates}, "options",
     "turns": [{session_id, qa_id, query, answer, receipt_id, action, attributes, humanity, risk, bias, quality,
                context_adherence}],
     "bestof": [{session_id, qa_id, candidates, winner, winner_text, rounds, byes, contests, confidence}],
     "bias_by_attribute": {attribute: {group: {n, non_biased, share, ci}}},
     "clustering": {points, clusters, silhouette, lexicon, embedder} | {"skipped": reason},
     "summary": {metric: mean over turns (None when not measured)}}
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence

from proxy.evaluation.conversation import JUDGE_METRICS, METRICS, bestof, bias, clustering, humanity, quality, risk
from proxy.evaluation.conversation.data import Conversation, Turn
from proxy.receipts.receipt import utc_timestamp

__all__ = ["FORMAT_ID", "JUDGE_METRICS", "METRICS", "Options", "TEMPLATES", "run"]

FORMAT_ID = "sonate.eval.conversation/v1"
#: Judge template of each use (proxy/evaluation/judges/<id>.yaml).
TEMPLATES = {"memory": "memory-v1", "language": "language-adaptation-v1", "grice": "grice-v1", "ssa": "ssa-v1",
             "context": "context-adherence-v1", "bias": "bias-guardian-v1", "bestof": "bestof-contest-v1"}
#: Guardian weights wᵢ of B(R) (renormalised over the guardians present).
GUARDIAN_WEIGHTS = {"llm-judge": 0.7, "toxicity-classifier": 0.3}
_NONE = "(none)"


@dataclass
class Options:
    """What to measure and how: ``metrics`` (subset of :data:`METRICS`), the weights of risk,
    guardians and BestOf criteria, the ``seed`` of UMAP, ``concurrency`` of judge calls."""

    metrics: tuple[str, ...] = METRICS
    risk_weights: Mapping[str, float] = field(default_factory=lambda: dict(risk.RISK_WEIGHTS))
    guardian_weights: Mapping[str, float] = field(default_factory=lambda: dict(GUARDIAN_WEIGHTS))
    criteria_weights: Mapping[str, float] = field(default_factory=lambda: dict(bestof.CRITERIA_WEIGHTS))
    seed: int = 0
    concurrency: int = 4
    progress: bool = False


def _history(turns: Sequence[Turn]) -> str:
    return "\n".join(f"User: {t.query}\nAssistant: {t.assistant}" for t in turns) or _NONE


def _attributes(conversation: Conversation) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(conversation.attributes.items())) or _NONE


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


class _Judging:
    """The judge calls of a run, bounded to ``concurrency`` at a time, with a progress bar."""

    def __init__(self, judge: Any, concurrency: int, progress: bool) -> None:
        from tqdm import tqdm

        self.judge = judge
        self.limit = asyncio.Semaphore(max(1, concurrency))
        self.bar = tqdm(desc="judging", unit="verdict", disable=not progress, file=sys.stderr)

    async def verdict(self, key: str, **fields: Any) -> Any:
        async with self.limit:
            result = await self.judge.score(TEMPLATES[key], **fields)
        self.bar.update(1)
        return result


def _scorer_risk(scorer: Any, conversations: Sequence[Conversation]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (session, qa_id): prompt/response/context risk from the proxy's Safety detectors."""
    turns = [(c, t) for c in conversations for t in c.turns]
    prompts = scorer.scores([t.query for _, t in turns], "input")
    responses = scorer.scores([t.assistant for _, t in turns], "output")
    contexts = {c.session_id: scorer.scores([c.context], "input")[0] for c in conversations if c.context}
    out = {}
    for (c, t), p, r in zip(turns, prompts, responses):
        parts = {"prompt": risk.text_risk(p), "response": risk.text_risk(r)}
        if c.session_id in contexts:
            parts["context"] = risk.text_risk(contexts[c.session_id])
        out[(c.session_id, t.qa_id)] = parts
    return out


async def _turn_judged(judging: _Judging, conversation: Conversation, index: int,
                       metrics: Sequence[str]) -> dict[str, Any]:
    """The judge verdicts of one turn: quality, context adherence, the LLM bias guardian."""
    turn = conversation.turns[index]
    history = _history(conversation.turns[:index])
    calls: dict[str, Awaitable[Any]] = {}
    if "quality" in metrics:
        calls["memory"] = judging.verdict("memory", history=history, query=turn.query, answer=turn.assistant)
        calls["language"] = judging.verdict("language", query=turn.query, answer=turn.assistant)
        for maxim in quality.MAXIMS:
            calls[f"grice:{maxim}"] = judging.verdict("grice", maxim=maxim, query=turn.query, answer=turn.assistant)
        for criterion in quality.SSA_CRITERIA:
            calls[f"ssa:{criterion}"] = judging.verdict("ssa", criterion=criterion, history=history,
                                                        query=turn.query, answer=turn.assistant)
    if "context" in metrics:
        calls["context"] = judging.verdict("context", context=conversation.context or _NONE,
                                           ground_truth=turn.ground_truth_assistant or _NONE,
                                           query=turn.query, answer=turn.assistant)
    if "bias" in metrics:
        for dimension in bias.DIMENSIONS:
            calls[f"bias:{dimension}"] = judging.verdict("bias", dimension=dimension,
                                                         attribute=_attributes(conversation),
                                                         query=turn.query, answer=turn.assistant)
    verdicts = dict(zip(calls, await asyncio.gather(*calls.values())))
    out: dict[str, Any] = {}
    if "quality" in metrics:
        grice = {m: verdicts[f"grice:{m}"].score for m in quality.MAXIMS}
        s, sp = verdicts["ssa:sensibleness"].score, verdicts["ssa:specificity"].score
        out["quality"] = {
            "memory": quality.memory(verdicts["memory"].score), "memory_reasoning": verdicts["memory"].reasoning,
            "language_adaptation": quality.unit_score(verdicts["language"].score),
            "language_reasoning": verdicts["language"].reasoning,
            "grice": {"maxims": grice, "G": quality.grice(grice)},
            "ssa": {"sensibleness": s, "specificity": sp, "SSA": quality.ssa(s, sp)}}
    if "context" in metrics:
        out["context_adherence"] = {"score": quality.unit_score(verdicts["context"].score),
                                    "reasoning": verdicts["context"].reasoning}
    if "bias" in metrics:
        out["bias_judge"] = {d: verdicts[f"bias:{d}"].score for d in bias.DIMENSIONS}
    return out


async def _bestof(judging: _Judging, conversation: Conversation, turn: Turn,
                  weights: Mapping[str, float]) -> dict[str, Any]:
    """The BestOf tournament over a turn's candidates: the judge's criterion verdicts per pair."""
    candidates = list(turn.candidates)
    bracket = bestof.Bracket(len(candidates), weights)
    while pairs := bracket.next_round():
        rounds = await asyncio.gather(*(asyncio.gather(*(
            judging.verdict("bestof", criterion=c, query=turn.query, answer_a=candidates[a], answer_b=candidates[b])
            for c in bestof.CRITERIA)) for a, b in pairs))
        bracket.record([({c: v.score for c, v in zip(bestof.CRITERIA, row)},
                         {c: v.reasoning for c, v in zip(bestof.CRITERIA, row)}) for row in rounds])
    result = bracket.result()
    return {"session_id": conversation.session_id, "qa_id": turn.qa_id, "candidates": len(candidates),
            "winner_text": candidates[result["winner"]], **result}


def _clustering(answers: list[tuple[str, str, str]], embed: Callable[[list[str]], Any],
                lexicon: Mapping[str, str], seed: int) -> dict[str, Any]:
    """UMAP → HDBSCAN over the answers (``(session_id, qa_id, text)``), per-cluster toxicity, silhouette."""
    texts = [a[2] for a in answers if a[2].strip()]
    keys = [(a[0], a[1]) for a in answers if a[2].strip()]
    if len(set(texts)) < clustering.MIN_POINTS:  # identical answers would make UMAP scatter noise into "clusters"
        return {"skipped": f"needs at least {clustering.MIN_POINTS} distinct non-empty answers, got {len(set(texts))}"}
    coords, labels = clustering.project_and_cluster(embed(texts), seed=seed)
    points = []
    for (session_id, qa_id), text, (x, y), label in zip(keys, texts, coords, labels):
        toxic, total = clustering.toxic_word_counts(text, lexicon)
        points.append({"session_id": session_id, "qa_id": qa_id, "x": float(x), "y": float(y), "label": int(label),
                       "toxicity": toxic / total if total else 0.0})
    return {"points": points, "clusters": {str(k): v for k, v in clustering.cluster_toxicity(texts, labels, lexicon).items()},
            "silhouette": clustering.silhouette(coords, labels), "seed": seed}


def _summary(turns: list[dict[str, Any]], best: list[dict[str, Any]], clusters: dict[str, Any],
             conversations: Sequence[Conversation]) -> dict[str, Any]:
    def pick(*path: str) -> list[float | None]:
        values = []
        for row in turns:
            value: Any = row
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            values.append(value)
        return values

    biased = [b for b in pick("bias", "biased") if b is not None]
    return {
        "conversations": len(conversations), "turns": len(turns),
        "humanity_entropy": _mean(pick("humanity", "entropy")),
        "humanity_spearman": _mean(pick("humanity", "spearman")),
        "risk_total": _mean(pick("risk", "total")),
        "bias_score": _mean(pick("bias", "B")),
        "non_biased_share": (sum(1 for b in biased if not b) / len(biased)) if biased else None,
        "memory": _mean(pick("quality", "memory")),
        "language_adaptation": _mean(pick("quality", "language_adaptation")),
        "grice": _mean(pick("quality", "grice", "G")),
        "ssa": _mean(pick("quality", "ssa", "SSA")),
        "context_adherence": _mean(pick("context_adherence", "score")),
        "bestof_confidence": _mean([b["confidence"] for b in best]),
        "silhouette": clusters.get("silhouette"),
    }


def _templates_used(metrics: Sequence[str]) -> list[str]:
    keys = {"quality": ("memory", "language", "grice", "ssa"), "context": ("context",), "bias": ("bias",),
            "bestof": ("bestof",)}
    return sorted(TEMPLATES[k] for m in metrics for k in keys.get(m, ()))


def run(conversations: Sequence[Conversation], options: Options, *, judge: Any = None, scorer: Any = None,
        embed: Callable[[list[str]], Any] | None = None, lexicon: Mapping[str, str] | None = None,
        source: Mapping[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
    """Measure ``options.metrics`` over ``conversations``; the result document (module docstring).

    Needs ``judge`` for :data:`JUDGE_METRICS`, ``scorer`` for risk (and the bias classifier),
    ``embed`` and ``lexicon`` for clustering. Raises ValueError when a metric lacks what it needs
    or an answer is missing, :class:`~proxy.evaluation.judge.JudgeError` when the judge fails.
    """
    metrics = tuple(options.metrics)
    needs = {"quality": judge, "context": judge, "bestof": judge, "risk": scorer, "clustering": embed and lexicon}
    lacking = [m for m in metrics if m in needs and not needs[m]]
    if lacking:
        raise ValueError(f"metrics {', '.join(lacking)} need "
                         + ", ".join(sorted({'a judge model' if m in JUDGE_METRICS else 'the Safety detectors'
                                             if m == 'risk' else 'a lexicon' for m in lacking})))
    if "bias" in metrics and judge is None and scorer is None:
        raise ValueError("bias needs a guardian: a judge model or the Safety detectors")
    unanswered = [f"{c.session_id}/{t.qa_id}" for c in conversations for t in c.turns if not t.assistant.strip()
                  and t.action is None]
    if unanswered:
        raise ValueError(f"turns without an assistant answer: {', '.join(unanswered[:5])} (record the answers "
                         "or replay the queries through the proxy with --proxy)")
    risks = _scorer_risk(scorer, conversations) if scorer is not None and ("risk" in metrics or "bias" in metrics) else {}

    async def judged() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if judge is None:
            return [{} for c in conversations for _ in c.turns], []
        judging = _Judging(judge, options.concurrency, options.progress)
        try:
            per_turn = await asyncio.gather(*(_turn_judged(judging, c, i, metrics)
                                              for c in conversations for i in range(len(c.turns))))
            tournaments = await asyncio.gather(*(_bestof(judging, c, t, options.criteria_weights)
                                                 for c in conversations for t in c.turns
                                                 if "bestof" in metrics and len(t.candidates) >= 2))
        finally:
            judging.bar.close()
        return list(per_turn), list(tournaments)

    per_turn, tournaments = asyncio.run(judged())
    # The local classifier guardian: the toxicity the proxy's output Safety detector gave each answer.
    toxicity = {c_t[1].assistant: parts["response"][1].get("toxicity", 0.0) for c_t, parts in
                (((c, t), risks[(c.session_id, t.qa_id)]) for c in conversations for t in c.turns
                 if (c.session_id, t.qa_id) in risks)}
    classifier = bias.ClassifierGuardian("toxicity-classifier", "proxy-safety-output",
                                         lambda texts: [toxicity.get(t, 0.0) for t in texts], "language")
    rows: list[dict[str, Any]] = []
    bias_rows = []
    for (conversation, turn), verdicts in zip(((c, t) for c in conversations for t in c.turns), per_turn):
        row: dict[str, Any] = {"session_id": conversation.session_id, "qa_id": turn.qa_id,
                               "query": turn.query, "answer": turn.assistant,
                               "receipt_id": turn.receipt_id, "action": turn.action,
                               "attributes": conversation.attributes}
        if "humanity" in metrics:
            row["humanity"] = humanity.humanity(turn.assistant, turn.ground_truth_assistant)
        parts = risks.get((conversation.session_id, turn.qa_id))
        if "risk" in metrics and parts:
            row["risk"] = {**{p: parts[p][0] for p in parts},
                           "total": risk.total_risk({p: parts[p][0] for p in parts}, options.risk_weights),
                           "categories": {p: parts[p][1] for p in parts}}
        if "bias" in metrics:
            guardians: dict[str, dict[str, float]] = {}
            if "bias_judge" in verdicts:
                guardians["llm-judge"] = verdicts.pop("bias_judge")
            if parts:
                guardians[classifier.name] = classifier.assess(turn.query, turn.assistant)
            scores = {name: bias.guardian_score(dims) for name, dims in guardians.items()}
            mass = sum(options.guardian_weights[n] for n in scores)
            b = bias.combined_score(scores, {n: options.guardian_weights[n] / mass for n in scores})
            row["bias"] = {"guardians": {n: {"dimensions": guardians[n], "G": scores[n]} for n in guardians},
                           "B": b, "biased": b >= bias.BIAS_THRESHOLD}
            bias_rows.append((conversation.attributes, b >= bias.BIAS_THRESHOLD))
        row.update(verdicts)
        rows.append(row)
    clusters: dict[str, Any] = {}
    if "clustering" in metrics:
        if embed is None or lexicon is None:  # checked above: clustering needs both
            raise ValueError("metrics clustering need a lexicon")
        clusters = _clustering([(c.session_id, t.qa_id, t.assistant) for c in conversations for t in c.turns],
                               embed, lexicon, options.seed)
    return {
        "format": FORMAT_ID,
        "run_id": run_id or "conv_" + uuid.uuid4().hex[:16],
        "generated": utc_timestamp(),  # the receipts' form: RFC 3339 UTC with milliseconds
        "source": dict(source or {}),
        "judge": ({"model": judge.model, "templates": _templates_used(metrics)} if judge else None),
        "options": {"metrics": list(metrics), "risk_weights": dict(options.risk_weights),
                    "guardian_weights": dict(options.guardian_weights),
                    "criteria_weights": dict(options.criteria_weights), "bias_threshold": bias.BIAS_THRESHOLD,
                    "seed": options.seed},
        "risk_detectors": scorer.describe() if scorer is not None else None,
        "turns": rows,
        "bestof": tournaments,
        "bias_by_attribute": bias.attribute_shares(bias_rows) if bias_rows else {},
        "clustering": clusters or None,
        "summary": _summary(rows, tournaments, clusters, conversations),
    }
