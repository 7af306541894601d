"""The steps of a ``sonate eval conversation`` run that touch files, models and the network.

Read the conversations (:mod:`.data`), replay them through a proxy when asked (:mod:`.replay`),
build what the metrics need once (the judge, the proxy's Safety detectors from a policies
directory, the sentence embedder, the lexicon), then :func:`~.runner.run`. The CLI
(:mod:`proxy.cli.evaluate`) turns the exceptions into usage errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from proxy.evaluation.conversation import JUDGE_METRICS, METRICS
from proxy.evaluation.conversation.data import load_conversations, load_hurtlex
from proxy.evaluation.conversation.runner import Options, run

__all__ = ["default_metrics", "evaluate"]


def default_metrics(judged: bool, lexicon: bool) -> tuple[str, ...]:
    """Every metric the inputs allow: judge metrics only with a judge, clustering only with a lexicon."""
    return tuple(m for m in METRICS if (judged or m not in JUDGE_METRICS) and (lexicon or m != "clustering"))


def evaluate(path: Path, options: Options, *, policies_dir: Path | None, lexicon_path: Path | None = None,
             judge_model: str | None = None, judge_api_base: str | None = None, judge_api_key: str | None = None,
             proxy: str | None = None, api_key: str | None = None, model: str | None = None,
             run_id: str | None = None) -> dict[str, Any]:
    """One run end to end; the result document of :func:`~.runner.run`.

    Raises DataError (conversations, lexicon), ProxyError (replay), JudgeError, ValueError
    (metric without what it needs), ConfigError (policies) and the detectors' load errors.
    """
    conversations = load_conversations(path)
    source: dict[str, Any] = {"file": str(path)}
    if proxy:
        from proxy.evaluation.conversation.replay import ConversationClient, replay

        client = ConversationClient(proxy, api_key or "", model or "demo")
        try:
            conversations = replay(client, conversations, progress=options.progress)
        finally:
            client.close()
        source.update(proxy=client.base, model=client.model)
    judge = None
    if judge_model:
        from proxy.evaluation.judge import Judge

        judge = Judge(judge_model, api_base=judge_api_base, api_key=judge_api_key)
    scorer = None
    if policies_dir is not None and ("risk" in options.metrics or "bias" in options.metrics):
        from proxy.evaluation.conversation.risk import SafetyScorer
        from proxy.guardrails.schema import load_policies

        scorer = SafetyScorer(load_policies(policies_dir))
        source["policies"] = str(policies_dir)
    lexicon: dict[str, str] | None = None
    embed: Callable[[list[str]], Any] | None = None
    if "clustering" in options.metrics and lexicon_path is not None:
        from proxy.guardrails.detectors.embeddings import embed

        lexicon = load_hurtlex(lexicon_path)
        source["lexicon"] = {"path": str(lexicon_path), "lemmas": len(lexicon)}
    result = run(conversations, options, judge=judge, scorer=scorer, embed=embed, lexicon=lexicon, source=source,
                 run_id=run_id)
    if result.get("clustering") and "points" in result["clustering"]:
        from proxy.guardrails.detectors.embeddings import model_version

        result["clustering"]["embedder"] = model_version()
    return result
