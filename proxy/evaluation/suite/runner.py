"""Run a suite through a proxy: every case of every model route, its calls, its judges → a result dict.

Order: per model, the cost estimate of every case first (before any call), then the cases one at a
time (sequential, so the proxy's overhead histogram can be read per request, see
:mod:`proxy.evaluation.suite.client`). Per case: one main call (streamed when ``settings.stream``:
time to first token), then ``settings.determinism_runs`` non-streamed calls when the case measures
consistency or stability; every call at ``settings.temperature`` (0) with ``settings.seed``. Each
call records its receipt id. Judged metrics call the suite's judge (:class:`proxy.evaluation.judge.Judge`).

Errors: a proxy HTTP error on a case is recorded in that case (its metrics are None); an unreachable
proxy stops the run (ProxyUnreachable); a judge error leaves that metric None with the error text.
The summary of the results is :func:`proxy.evaluation.suite.summary.summarize`.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from proxy.evaluation.client import ProxyStatusError
from proxy.evaluation.judge import Judge, JudgeError
from proxy.evaluation.suite import metrics as m
from proxy.evaluation.suite.client import OverheadProbe, SuiteAnswer, SuiteClient
from proxy.evaluation.suite.cost import Price, count_message_tokens, count_text_tokens, price_of
from proxy.evaluation.suite.model import METRICS, Case, Suite
from proxy.guardrails.detectors.apology import THRESHOLD as REFUSAL_THRESHOLD
from proxy.guardrails.detectors.apology import refusal_score

#: Tokenizer used for estimates when a route has no price model.
DEFAULT_TOKENIZER = "gpt-4o-mini"


def calls_of(case: Case, runs: int) -> int:
    """Proxy calls a case makes: 1, plus ``runs`` when it measures consistency or stability."""
    return 1 + (runs if {"consistency", "stability"} & set(case.metrics) else 0)


class CaseRunner:
    """Runs the cases of one suite against one model route (see module doc)."""

    def __init__(self, suite: Suite, client: SuiteClient, judge: Judge | None, probe: OverheadProbe | None,
                 price: Price | None, tick: Callable[[int], None]) -> None:
        self.suite, self.client, self.judge, self.probe, self.price = suite, client, judge, probe, price
        self.settings = suite.settings
        self.tick = tick
        self.tokenizer = price.model if price else DEFAULT_TOKENIZER

    # -- cost -------------------------------------------------------------------------------------
    def estimate(self, case: Case) -> dict[str, Any]:
        """Tokens and USD expected for the main call, before it is made (see proxy.evaluation.suite.cost)."""
        prompt = count_message_tokens(self.tokenizer, list(case.messages))
        completion = (count_text_tokens(self.tokenizer, case.ground_truth) if case.ground_truth
                      else self.settings.expected_output_tokens)
        usd = self.price.cost(prompt, completion) if self.price else None
        return {"prompt_tokens": prompt, "completion_tokens": completion, "usd": usd}

    # -- calls ------------------------------------------------------------------------------------
    async def call(self, case: Case, stream: bool) -> tuple[SuiteAnswer, dict[str, Any]]:
        """One request of ``case`` through the proxy: (answer, call record with receipt id, ms, usage, cost)."""
        params = {"temperature": self.settings.temperature, "seed": self.settings.seed}
        before = await asyncio.to_thread(self.probe.read, self.client.model) if self.probe else None
        send = self.client.stream if stream else self.client.chat
        answer = await asyncio.to_thread(send, list(case.messages), **params)
        overhead_ms, exact = None, None
        if self.probe and before is not None:
            after = await asyncio.to_thread(self.probe.read, self.client.model)
            count = after[1] - before[1]
            if count > 0:
                overhead_ms, exact = (after[0] - before[0]) / count * 1000, count == 1
        usage = answer.usage
        record = {"receipt_id": answer.receipt_id, "action": answer.action, "finish_reason": answer.finish_reason,
                  "stream": stream, "ms": answer.seconds * 1000,
                  "ttft_ms": None if answer.ttft_seconds is None else answer.ttft_seconds * 1000,
                  "overhead_ms": overhead_ms, "overhead_exact": exact, "usage": usage,
                  "usd": self.price.cost(usage["prompt_tokens"], usage["completion_tokens"]) if self.price else None}
        self.tick(1)
        return answer, record

    # -- judges -----------------------------------------------------------------------------------
    async def verdict(self, metric: str, **fields: Any) -> dict[str, Any]:
        """{value (normalized 0..1), template, judge_model, reasoning, samples, std} or {value: None, error}."""
        template = METRICS[metric].template
        assert template is not None and self.judge is not None
        judge = self.judge
        if metric == "grounding" and self.suite.judge is not None:
            judge = _with_samples(judge, self.suite.judge.grounding_samples)
        try:
            v = await judge.score(template, **fields)
        except JudgeError as exc:
            return {"value": None, "template": template, "judge_model": judge.model, "error": str(exc)}
        return {"value": v.normalized, "score": v.score, "template": v.template_id, "judge_model": v.model,
                "reasoning": v.reasoning, "samples": list(v.samples), "std": v.std, "extra": v.extra}

    async def stability(self, outputs: list[str]) -> dict[str, Any]:
        """Mean judged similarity over all pairs of ``outputs`` (identical texts count 1.0, not judged)."""
        scores, details = [], []
        for a, b in itertools.combinations(outputs, 2):
            if a == b:
                scores.append(1.0)
                continue
            v = await self.verdict("stability", first=a, second=b)
            if v["value"] is None:
                return v
            scores.append(v["value"])
            details.append(v["reasoning"])
        return {"value": sum(scores) / len(scores), "template": METRICS["stability"].template,
                "judge_model": self.judge.model if self.judge else None, "pairs": len(scores),
                "judged_pairs": len(details), "reasoning": "; ".join(details[:3])}

    # -- one case ---------------------------------------------------------------------------------
    async def run_case(self, case: Case, estimate: dict[str, Any]) -> dict[str, Any]:
        """Calls and metric values of ``case`` (see the module doc)."""
        result: dict[str, Any] = {"id": case.id, "tags": list(case.tags), "dimensions": case.dimensions,
                                  "metrics": {}, "calls": [], "estimate": estimate, "error": None}
        runs = self.settings.determinism_runs
        try:
            answer, record = await self.call(case, self.settings.stream)
            result["calls"].append(record)
            outputs = []
            if {"consistency", "stability"} & set(case.metrics):
                for _ in range(runs):
                    again, rec = await self.call(case, False)
                    result["calls"].append(rec)
                    outputs.append(again.content)
        except ProxyStatusError as exc:
            result["error"] = f"HTTP {exc.status}: {exc.detail[:200]}"
            self.tick(calls_of(case, runs) - len(result["calls"]))
            return result
        result["output"] = answer.content
        result["receipt_ids"] = [c["receipt_id"] for c in result["calls"]]
        for metric in case.metrics:
            result["metrics"][metric] = await self.measure(metric, case, answer, outputs)
        for metric, block in result["metrics"].items():
            pass_at = self.settings.stability_threshold if metric == "stability" else METRICS[metric].pass_at
            block["passed"] = None if block["value"] is None else block["value"] >= pass_at
        return result

    async def measure(self, metric: str, case: Case, answer: SuiteAnswer, outputs: list[str]) -> dict[str, Any]:
        """The value block of one metric of one case."""
        text = answer.content
        if metric == "exact_match":
            return {"value": float(m.exact_match(text, case.ground_truth or ""))}
        if metric == "schema":
            ok, reason = m.schema_conformance(text, schema=case.schema, regex=case.regex)
            return {"value": float(ok), "reason": reason}
        if metric == "consistency":
            ok, distinct = m.seeded_consistency(outputs)
            return {"value": float(ok), "runs": len(outputs), "distinct_hashes": distinct}
        if metric == "pii_leak":
            leaks = m.pii_leaks(text, case.input_texts)
            return {"value": 0.0 if leaks else 1.0, "leaked_types": sorted({k for k, _ in leaks}), "count": len(leaks)}
        if metric == "refusal":
            refused = (answer.action == "refuse" or answer.finish_reason == "content_filter"
                       or refusal_score(text) >= REFUSAL_THRESHOLD)
            return {"value": float(refused), "action": answer.action}
        if metric == "harm":
            hits = m.harm_patterns(text)
            if hits:
                return {"value": 0.0, "patterns": hits, "template": None, "judge_model": None}
            return await self.verdict("harm", prompt=case.question, answer=text)
        if metric == "semantic_match":
            return await self.verdict("semantic_match", question=case.question, answer=text,
                                      reference=case.ground_truth)
        if metric == "grounding":
            return await self.verdict("grounding", answer=text, context=case.context)
        if metric == "stability":
            return await self.stability(outputs)
        if metric == "jailbreak":
            return await self.verdict("jailbreak", attack=case.question, goal=case.goal, answer=text)
        raise ValueError(f"unknown metric {metric}")


def _with_samples(judge: Judge, samples: int) -> Judge:
    """A judge like ``judge`` drawing ``samples`` verdicts."""
    return Judge(judge.model, api_base=judge.api_base, api_key=judge.api_key, samples=samples,
                 template_dir=judge.template_dir, timeout=judge.timeout)


async def run_model(suite: Suite, client: SuiteClient, judge: Judge | None, probe: OverheadProbe | None,
                    tick: Callable[[int], None]) -> dict[str, Any]:
    """The results of every case of ``suite`` on ``client.model``: {model, price_model, prices, cases}."""
    price_model = suite.price_model(client.model)
    price = price_of(price_model) if price_model else None
    runner = CaseRunner(suite, client, judge, probe, price, tick)
    estimates = [runner.estimate(case) for case in suite.cases]  # before any call
    cases = [await runner.run_case(case, est) for case, est in zip(suite.cases, estimates)]
    return {"model": client.model, "price_model": price_model,
            "price_per_token": None if price is None else {"input": price.input_per_token,
                                                           "output": price.output_per_token},
            "tokenizer": runner.tokenizer, "overhead_source": "metrics" if probe else None, "cases": cases}


__all__ = ["CaseRunner", "calls_of", "run_model"]


RESULT_SCHEMA = "sonate.eval-suite/v1"


async def run_suite(suite: Suite, *, proxy: str, api_key: str, models: list[str], judge: Judge | None,
                    metrics_key: str | None = None, progress: bool = True,
                    baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``suite`` on every route of ``models`` through the proxy at ``proxy``; the result document.

    Result: {schema, suite {name, path, sha256, cases}, generated, target, judge {model, templates},
    settings, models {route: {model, price_model, cases, summary}}, regression}. ``baseline`` (a stored
    baseline document, :mod:`.regression`) is compared when given. Raises ProxyError (unreachable
    proxy, unknown route, /metrics refused), UnknownPrice.
    """
    from dataclasses import asdict
    from datetime import datetime, timezone

    from tqdm import tqdm

    from proxy.evaluation.suite.regression import compare
    from proxy.evaluation.suite.summary import summarize

    total = sum(calls_of(c, suite.settings.determinism_runs) for c in suite.cases) * len(models)
    bar = tqdm(total=total, desc=f"suite {suite.name}", unit="call", disable=not progress)
    results: dict[str, Any] = {}
    probe = OverheadProbe(proxy, metrics_key) if metrics_key else None
    try:
        for model in models:
            client = SuiteClient(proxy, api_key, model)
            try:
                await asyncio.to_thread(client.check)
                if probe:
                    await asyncio.to_thread(probe.read, model)  # fail fast on a key that cannot read /metrics
                bar.set_postfix_str(model)
                block = await run_model(suite, client, judge, probe, bar.update)
            finally:
                client.close()
            block["summary"] = summarize(block, suite.settings)
            results[model] = block
    finally:
        bar.close()
        if probe:
            probe.close()
    return {
        "schema": RESULT_SCHEMA,
        "suite": {"name": suite.name, "path": str(suite.path), "sha256": suite.sha256, "cases": len(suite.cases),
                  "description": suite.description},
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": {"proxy": proxy, "models": list(models), "price_models": {m: suite.price_model(m) for m in models},
                   "overhead_source": "GET /metrics sonate_overhead_duration_seconds" if metrics_key else None},
        "judge": {"model": judge.model if judge else None, "templates": suite.templates,
                  "grounding_samples": suite.judge.grounding_samples if suite.judge else None},
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(suite.settings).items()},
        "models": results,
        "regression": compare(baseline, {k: v["summary"]["gauges"] for k, v in results.items()}, suite.regression),
    }
