"""The false-intervention side: what the guardrails do to ordinary prompts.

Pure functions (no I/O). *Ordinary prompts* are the items that no policy should act on and that
carry no personal data: everyday instructions (``alpaca_seed`` subset ``benign``) and general
questions (``truthfulqa`` subset ``general``: ordinary by the regulated labels), see
:func:`is_ordinary`. For each source, :func:`utility_section` gives the share of prompts whose
decisive action was ``allow`` (**unchanged**: the model receives the prompt as written — the
"utility" row), ``mask``, ``escalate``, ``refuse`` (and ``summarize`` via a proxy), each a
``{"k", "n", "rate", "ci95"}`` proportion with its 95 % Wilson interval
(:func:`proxy.evaluation.metrics.proportion`), plus how often each policy fired
(``fired``: ``policy id/action`` -> count, pre-empted triggers included).

:func:`touched` lists the prompts that did not pass unchanged (row id, action, policies, the
text the model receives) for the terminal only: alpaca_seed is CC BY-NC, its texts never go
into reports or committed files.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from proxy.evaluation.data import Item
from proxy.evaluation.guardrails import ItemOutcome
from proxy.evaluation.metrics import proportion

#: (dataset, subset) pairs that are ordinary prompts, in report order.
ORDINARY = (("alpaca_seed", "benign"), ("truthfulqa", "general"))
#: Decisive actions reported, in column order ("allow" is the utility row: unchanged).
ACTIONS = ("allow", "mask", "escalate", "refuse", "summarize")
#: Target: share of ordinary prompts that reach the model unchanged.
UTILITY_TARGET = (">=", 0.95)


def is_ordinary(item: Item) -> bool:
    """True for everyday instructions and general (non-regulated) questions."""
    return (item.dataset, item.subset) in ORDINARY


def _block(outcomes: Sequence[ItemOutcome]) -> dict[str, Any]:
    """Shares of each decisive action over ``outcomes`` and the count of each firing policy."""
    actions = Counter(o.action for o in outcomes)
    n = len(outcomes)
    block: dict[str, Any] = {"n": n}
    for action in ACTIONS:
        if action != "summarize" or actions[action]:
            block[action] = proportion(actions[action], n).as_dict()
    fired = Counter(f"{policy_id}/{action}" for o in outcomes for _, policy_id, action in set(o.fired))
    block["fired"] = dict(sorted(fired.items(), key=lambda kv: (-kv[1], kv[0])))
    return block


def utility_section(items: Sequence[Item], outcomes: Sequence[ItemOutcome]) -> dict[str, Any] | None:
    """``{"sources": [{"dataset", "subset", "n", "allow", "mask", "escalate", "refuse", "fired"}],
    "all": {...}, "target": {"op", "value", "actual", "met"}}`` over the ordinary items; None when
    there is none. ``met`` compares the point estimate; the report replaces ``target`` with one
    judged only when the rows behind the figure allow a claim (held-out / out-of-fold).

    Raises ValueError when ``items`` and ``outcomes`` differ in length.
    """
    if len(items) != len(outcomes):
        raise ValueError("items and outcomes differ in length")
    groups: dict[tuple[str, str], list[ItemOutcome]] = {}
    for item, outcome in zip(items, outcomes):
        if is_ordinary(item):
            groups.setdefault((item.dataset, item.subset), []).append(outcome)
    if not groups:
        return None
    sources = [{"dataset": d, "subset": s, **_block(groups[(d, s)])} for d, s in ORDINARY if (d, s) in groups]
    everything = _block([o for key in ORDINARY for o in groups.get(key, [])])
    op, value = UTILITY_TARGET
    actual = everything["allow"]["rate"]
    return {"sources": sources, "all": everything,
            "target": {"op": op, "value": value, "actual": actual, "met": actual >= value}}


def touched(items: Sequence[Item], outcomes: Sequence[ItemOutcome]) -> list[dict[str, Any]]:
    """The ordinary items not passed unchanged: ``{"id", "dataset", "action", "fired", "text",
    "model_text"}`` (texts for the terminal only, never for a committed file)."""
    return [{"id": i.item_id, "dataset": i.dataset, "action": o.action,
             "fired": sorted({f"{pid}/{a}" for _, pid, a in o.fired}), "text": i.text, "model_text": o.model_text}
            for i, o in zip(items, outcomes) if is_ordinary(i) and o.action != "allow"]
