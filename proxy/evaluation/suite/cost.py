"""Cost of a suite's queries from litellm's pinned price map (no network: see :mod:`proxy.offline`).

Estimate before the run: prompt tokens (``litellm.token_counter`` of the messages, the tokenizer of
the priced model) and expected completion tokens (the ground truth's token count when the case has
one, else the suite's ``expected_output_tokens``), priced with ``litellm.cost_per_token``. Actual:
the provider's reported ``usage`` priced the same way. Prices are USD per token from
``litellm.model_cost`` (the JSON map pinned in the installed litellm release).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before importing litellm)


class UnknownPrice(ValueError):
    """The model is not in litellm's price map: the message names it."""


@dataclass(frozen=True)
class Price:
    """USD per prompt token and per completion token of ``model`` (litellm.model_cost)."""

    model: str
    input_per_token: float
    output_per_token: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD of a call with these token counts."""
        return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token


def price_of(model: str) -> Price:
    """The :class:`Price` of ``model`` (a litellm price-map key such as ``gpt-4o-mini``); UnknownPrice if absent."""
    import litellm

    try:
        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
    except Exception as exc:  # litellm raises its own exception types for an unmapped model
        raise UnknownPrice(f"model {model!r} is not in litellm's price map "
                           f"(set target.price_model to a key of litellm.model_cost): {exc}") from None
    return Price(model, float(prompt), float(completion))


def count_message_tokens(model: str, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of ``messages`` with ``model``'s tokenizer (litellm.token_counter; its default
    tokenizer, tiktoken cl100k, for models it does not know)."""
    import litellm

    return int(litellm.token_counter(model=model, messages=messages))


def count_text_tokens(model: str, text: str) -> int:
    """Tokens of ``text`` with ``model``'s tokenizer (litellm.token_counter)."""
    import litellm

    return int(litellm.token_counter(model=model, text=text))
