"""Second-stage LLM guard for the Safety policy: consulted only for texts the first stage is unsure of.

The harm classifier (:mod:`.harm`) gives each text a probability ``p``. When the operator enables
``detector.guard`` in the safety policy, texts with ``band[0] <= p < band[1]`` are sent through
litellm to a guard model, whose verdict replaces ``p`` (``unsafe`` → 1.0, ``safe`` → 0.0); texts
outside the band never leave the process. Configured in ``policies/safety.yaml``::

    detector:
      guard:
        enabled: false                # off by default
        model: openai/llama-guard-3-8b  # any litellm model string
        api_base: null                # e.g. an OpenAI-compatible server (vLLM, Ollama) hosting the guard
        api_key: null                 # or os.environ/NAME
        format: llama-guard           # llama-guard | prompt
        prompt: null                  # format "prompt": template with {text}; default GUARD_PROMPT
        band: ["0.20", "0.95"]        # [lo, hi) of the first-stage probability
        timeout: 5.0                  # seconds per guard call
        fail_mode: first-stage        # first-stage | refuse | allow  (on timeout, error, unparseable answer)

Formats:

- ``llama-guard``: the text is sent as the only user message; the guard model's own chat template
  holds the policy (Llama Guard 3, Meta 2024, model card "Llama Guard 3": the answer is ``safe``,
  or ``unsafe`` and on the next line the violated categories, e.g. ``unsafe\\nS1,S10``).
- ``prompt``: any chat model; ``prompt`` (default :data:`GUARD_PROMPT`) is formatted with
  ``{text}`` and sent as the user message; the answer must follow the Llama Guard shape above.

The call is synchronous (``litellm.completion``): the engine runs detectors in its thread pool.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The guard prompt for an ordinary chat model (format ``prompt``); answers in Llama Guard's shape.
GUARD_PROMPT = (
    "You are a content-safety classifier. Decide whether the user message below asks for help to "
    "cause real harm (violence, weapons, crime, self-harm, abuse, hate or harassment against real "
    "groups or people, exposing a private person's data). Messages that only share scary words "
    "(\"kill a Python process\", \"shoot a photo\"), ask for definitions, history, fiction, games, "
    "safety advice, or facts about public figures are safe.\n\n"
    "User message:\n<<<\n{text}\n>>>\n\n"
    "Answer with exactly one word, safe or unsafe; if unsafe, put the violated category on a second line."
)

_log = logging.getLogger(__name__)


class GuardConfigError(ValueError):
    """The ``detector.guard`` block is invalid (raised at policy load, never per request)."""


class GuardConfig(BaseModel):
    """The ``detector.guard:`` block of a safety policy (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    model: str | None = Field(None, min_length=1)
    api_base: str | None = None
    api_key: str | None = None
    format: Literal["llama-guard", "prompt"] = "llama-guard"
    prompt: str | None = None
    band: tuple[Decimal, Decimal] = (Decimal("0.20"), Decimal("0.95"))
    timeout: float = Field(5.0, gt=0, le=120)
    fail_mode: Literal["first-stage", "refuse", "allow"] = "first-stage"
    max_tokens: int = Field(16, ge=1, le=256)

    @model_validator(mode="after")
    def _check(self) -> "GuardConfig":
        lo, hi = self.band
        if not (0 <= lo < hi <= 1):
            raise ValueError(f"guard.band must be [lo, hi) with 0 <= lo < hi <= 1, got [{lo}, {hi})")
        if self.enabled and not self.model:
            raise ValueError("guard.model is required when guard.enabled is true")
        if self.prompt is not None and "{text}" not in self.prompt:
            raise ValueError("guard.prompt must contain the placeholder {text}")
        return self


@dataclass(frozen=True)
class Verdict:
    """One guard answer: ``unsafe`` True/False, the violated ``categories`` (e.g. ``("S1",)``), or
    ``error`` (a short reason) when the guard could not be used (then ``unsafe`` is None)."""

    unsafe: bool | None
    categories: tuple[str, ...] = ()
    error: str | None = None


def parse_verdict(answer: str) -> Verdict:
    """Parse a Llama-Guard-shaped answer.

    Args:
        answer: the model's text, e.g. ``"safe"``, ``"unsafe\\nS1,S10"`` (case and surrounding
            whitespace ignored; a trailing period tolerated).

    Returns:
        A :class:`Verdict`; ``error="unparseable answer"`` when the first line is neither word.
    """
    lines = [line.strip() for line in (answer or "").strip().splitlines() if line.strip()]
    first = lines[0].lower().rstrip(".") if lines else ""
    if first == "safe":
        return Verdict(False)
    if first.startswith("unsafe"):
        rest = first[len("unsafe"):].strip(" :,")
        tail = ",".join(filter(None, [rest.upper(), *lines[1:2]]))
        return Verdict(True, tuple(c.strip() for c in tail.split(",") if c.strip()))
    return Verdict(None, error="unparseable answer")


class LlmGuard:
    """Calls the configured guard model through litellm for one text at a time.

    Attributes:
        config: the validated :class:`GuardConfig`.
        name, version: for receipt components (``"llm-guard"``, ``"<format>:<model>"``).

    Thread-safe (no shared mutable state besides litellm's own client pool).
    """

    def __init__(self, config: GuardConfig, api_key: str | None = None) -> None:
        """Args: config with ``enabled`` and ``model`` set; api_key already resolved (not ``os.environ/``)."""
        if not config.enabled or not config.model:
            raise GuardConfigError("LlmGuard needs an enabled guard config with a model")
        self.config = config
        self._api_key = api_key
        self.name = "llm-guard"
        self.version = f"{config.format}:{config.model}"
        self.band = (float(config.band[0]), float(config.band[1]))

    def in_band(self, probability: float) -> bool:
        """True when the first-stage probability lies in ``[lo, hi)``."""
        return self.band[0] <= probability < self.band[1]

    def messages(self, text: str) -> list[dict[str, str]]:
        """The chat messages sent for ``text`` (see the module docstring's formats)."""
        if self.config.format == "llama-guard":
            return [{"role": "user", "content": text}]
        return [{"role": "user", "content": (self.config.prompt or GUARD_PROMPT).replace("{text}", text)}]

    def classify(self, text: str) -> Verdict:
        """Ask the guard model about one text. Never raises: failures become ``Verdict(None, error=...)``."""
        import litellm

        params: dict[str, Any] = {"model": self.config.model, "messages": self.messages(text),
                                  "timeout": self.config.timeout, "max_tokens": self.config.max_tokens,
                                  "temperature": 0, "num_retries": 0}
        if self.config.api_base:
            params["api_base"] = self.config.api_base
        if self._api_key:
            params["api_key"] = self._api_key
        try:
            response = litellm.completion(**params)
            answer = response.choices[0].message.content or ""
        except Exception as exc:  # any provider failure is a fail-mode case, never a 500
            _log.warning("llm guard %s failed: %s", self.version, type(exc).__name__)
            return Verdict(None, error=type(exc).__name__)
        verdict = parse_verdict(answer)
        if verdict.error:
            _log.warning("llm guard %s: unparseable answer (%d chars)", self.version, len(answer))
        return verdict

    def rescore(self, probability: float, verdict: Verdict) -> float:
        """The harmful-intent score after the guard: 1.0 unsafe, 0.0 safe; on a failed call the
        ``fail_mode``: ``first-stage`` keeps ``probability``, ``refuse`` 1.0, ``allow`` 0.0."""
        if verdict.unsafe is not None:
            return 1.0 if verdict.unsafe else 0.0
        return {"first-stage": probability, "refuse": 1.0, "allow": 0.0}[self.config.fail_mode]


def load_guard(config: GuardConfig) -> LlmGuard | None:
    """The guard for an enabled config (its ``api_key`` resolved from ``os.environ/NAME``), else None.

    Raises:
        proxy.config.ConfigError: ``api_key`` names an unset environment variable.
    """
    if not config.enabled:
        return None
    from proxy.config import resolve_secret

    return LlmGuard(config, resolve_secret(config.api_key, where="safety policy detector.guard.api_key"))
