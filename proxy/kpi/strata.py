"""Stratum assignment at request time (methodology "Strata").

A request's stratum is ``{domain, complexity, provider}``:
- ``domain``: the Compliance classifier's domain of the last user message (general, code,
  legal, health, finance, safety — whatever the policy YAML defines);
- ``complexity``: Simple / Standard / Advanced / Critical, from the client's
  ``x-sonate-complexity`` header or ``metadata.complexity`` when given, else the documented rule
  :func:`complexity_rule`;
- ``provider``: from the model route.
"""

from __future__ import annotations

COMPLEXITIES = ("simple", "standard", "advanced", "critical")
#: Prompt-token bounds of the complexity rule (inclusive upper bounds).
SIMPLE_MAX_TOKENS = 200
STANDARD_MAX_TOKENS = 2000


def complexity_rule(*, prompt_tokens: int, user_turns: int, uses_tools: bool, regulated: bool) -> str:
    """Complexity stratum of a request when the client does not declare one.

    Rule (published with the methodology version): a regulated domain is ``critical``; tools
    or more than 2,000 prompt tokens are ``advanced``; a single user turn of at most 200
    prompt tokens is ``simple``; everything else is ``standard``.
    """
    if regulated:
        return "critical"
    if uses_tools or prompt_tokens > STANDARD_MAX_TOKENS:
        return "advanced"
    if user_turns <= 1 and prompt_tokens <= SIMPLE_MAX_TOKENS:
        return "simple"
    return "standard"


def declared_complexity(header: str | None, metadata: dict[str, str] | None) -> str | None:
    """The client's declared complexity (header wins over metadata), lower-cased.

    Raises ValueError for a value outside Simple / Standard / Advanced / Critical.
    """
    value = header or (metadata or {}).get("complexity")
    if value is None:
        return None
    value = value.strip().lower()
    if value not in COMPLEXITIES:
        raise ValueError(f"complexity must be one of {', '.join(COMPLEXITIES)}")  # never echo the value
    return value
