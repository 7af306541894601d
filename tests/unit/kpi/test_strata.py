"""Strata (proxy/kpi/strata.py, methodology "Strata"): the complexity rule's thresholds, inclusive as
published, turns, tools and regulated domains, and the declared-complexity header.
"""

from __future__ import annotations

import pytest

from proxy.kpi.strata import SIMPLE_MAX_TOKENS, STANDARD_MAX_TOKENS, complexity_rule, declared_complexity


def _rule(prompt_tokens: int = 10, user_turns: int = 1, uses_tools: bool = False, regulated: bool = False) -> str:
    return complexity_rule(prompt_tokens=prompt_tokens, user_turns=user_turns, uses_tools=uses_tools,
                           regulated=regulated)


def test_complexity_rule_thresholds_are_inclusive_as_published() -> None:
    """Single turn ≤ 200 tokens is simple, > 2,000 tokens or tools advanced, regulated critical."""
    assert SIMPLE_MAX_TOKENS == 200 and STANDARD_MAX_TOKENS == 2000
    assert _rule(prompt_tokens=SIMPLE_MAX_TOKENS) == "simple"
    assert _rule(prompt_tokens=0) == "simple"
    assert _rule(prompt_tokens=SIMPLE_MAX_TOKENS + 1) == "standard"
    assert _rule(prompt_tokens=STANDARD_MAX_TOKENS) == "standard"
    assert _rule(prompt_tokens=STANDARD_MAX_TOKENS + 1) == "advanced"


def test_complexity_rule_turns_tools_and_regulated_domains() -> None:
    """A second user turn makes a short request standard; tools alone advanced; regulated wins."""
    assert _rule(user_turns=2) == "standard"
    assert _rule(user_turns=5, prompt_tokens=1) == "standard"
    assert _rule(user_turns=0) == "simple"
    assert _rule(uses_tools=True) == "advanced"
    assert _rule(uses_tools=True, user_turns=3, prompt_tokens=500) == "advanced"
    assert _rule(regulated=True) == "critical"
    assert _rule(regulated=True, uses_tools=True, prompt_tokens=5000) == "critical"


def test_declared_complexity_header_wins_and_is_normalised() -> None:
    """Header over metadata, trimmed and lower-cased; nothing declared is None; unknown raises."""
    assert declared_complexity(" Critical ", None) == "critical"
    assert declared_complexity("ADVANCED", {"complexity": "simple"}) == "advanced"
    assert declared_complexity(None, {"complexity": "Simple"}) == "simple"
    assert declared_complexity("", {"complexity": "standard"}) == "standard"
    assert declared_complexity(None, None) is None
    assert declared_complexity(None, {}) is None
    with pytest.raises(ValueError, match="complexity must be one of"):
        declared_complexity("extreme", None)
    with pytest.raises(ValueError):
        declared_complexity(None, {"complexity": "hard"})
