"""The steps of a PFI measurement (``sonate eval fairness``; options in :mod:`proxy.cli.evaluate`).

Builds the templated HolisticBias prompts (:mod:`proxy.evaluation.fairness`), sends each through
a running proxy with :class:`~proxy.evaluation.client.ProxyClient` (one user message;
``concurrency`` at a time) and records refusal (``x-sonate-guardrail-action: refuse`` or
``finish_reason: content_filter``), escalation (``x-sonate-guardrail-action: escalate`` or an
``x-sonate-escalation-id``) and client-side latency; :func:`proxy.evaluation.fairness.pfi_result`
turns them into the result (:data:`proxy.evaluation.fairness.PFI_RESULT_FORMAT`).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from proxy.evaluation.client import ProxyClient, ProxyStatusError
from proxy.evaluation.data import read_holistic_bias
from proxy.evaluation.fairness import (
    Group,
    Observation,
    Prompt,
    build_prompts,
    groups_from_descriptors,
    prompt_variants,
)


def now() -> str:
    """The current time, RFC 3339 UTC with milliseconds (``2026-11-23T10:41:03.123Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


@dataclass(frozen=True)
class PromptSet:
    """The prompts of one run: the sampled ``groups``, the ``axes`` they cover (in order), the
    ``variants`` per group and every (group × variant) ``prompts``."""

    groups: list[Group]
    axes: list[str]
    variants: list[tuple[str, str, str]]
    prompts: list[Prompt]


def build_prompt_set(data_dir: Path, *, axes: Sequence[str] | None, per_group: int, groups_per_axis: int,
                     include_dispreferred: bool, seed: int) -> PromptSet:
    """Read HolisticBias from ``data_dir`` and build the seeded prompt set.

    Raises DataError for missing or malformed files, ValueError for unknown axes.
    """
    data = read_holistic_bias(data_dir)
    groups = groups_from_descriptors(data["descriptors"], axes=axes, include_dispreferred=include_dispreferred,
                                     groups_per_axis=groups_per_axis, seed=seed)
    variants = prompt_variants(data["templates"], data["nouns"], per_group, seed=seed)
    return PromptSet(groups, list(dict.fromkeys(g.axis for g in groups)), variants, build_prompts(groups, variants))


def send_prompts(client: ProxyClient, prompts: list[Prompt], concurrency: int) -> list[Observation]:
    """Send every prompt through the proxy; one Observation per prompt, in order.

    An HTTP error answer becomes an observation with ``error`` set (``HTTP <code>: <message>``);
    an unreachable proxy raises ProxyUnreachable.
    """
    def one(prompt: Prompt) -> Observation:
        common: dict[str, Any] = dict(axis=prompt.axis, bucket=prompt.bucket, group=prompt.group, variant=prompt.variant,
                      prompt=prompt.text, ts=now())
        started = time.perf_counter()
        try:
            answer = client.ask(prompt.text)
        except ProxyStatusError as exc:
            return Observation(refused=False, escalated=False, latency_seconds=time.perf_counter() - started,
                               error=f"HTTP {exc.status}: {exc.detail}", **common)
        return Observation(refused=answer.action == "refuse" or answer.finish_reason == "content_filter",
                           escalated=answer.action == "escalate" or bool(answer.escalation_id),
                           latency_seconds=answer.seconds, action=answer.action,
                           finish_reason=answer.finish_reason, **common)

    observations: list[Observation] = []
    with ThreadPoolExecutor(concurrency) as pool, tqdm(total=len(prompts), desc="fairness prompts", unit="req",
                                                        file=sys.stderr) as bar:
        for observation in pool.map(one, prompts):
            observations.append(observation)
            bar.update(1)
    return observations
