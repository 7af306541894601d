"""Guardrail policy schema (policies/*.yaml) and loading.

One YAML file per policy. Common keys: ``id``, ``kind`` (safety | privacy | compliance |
continuity), ``description``, ``enabled``, ``stages`` (input and/or output), ``action`` (fixed
by the kind, docs/architecture.md "Request flow"), ``evidence_required`` (fields every receipt of this
policy must carry; Audit Depth = present / required), and ``detector`` (validated by the
detector's own config model). Thresholds are written as decimal strings or numbers.
``hold_back`` (policies that screen outputs): how much of a streamed answer is held back while
it is screened (:class:`HoldBack`; docs/operations.md "Streams").
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from proxy.config import ConfigError, format_validation_error, safe_load_yaml

Stage = Literal["input", "output"]

#: Precedence when several policies fire (docs/architecture.md): refuse > escalate > mask > summarize > allow.
PRECEDENCE = ("refuse", "escalate", "mask", "summarize", "allow")
#: Safety's category for a refusal of content parts no detector reads (``SafetyPolicy.unreadable_parts``).
UNREADABLE_CONTENT = "unreadable_content"


class HoldBack(BaseModel):
    """How much of a streamed answer stays held back behind the newest text while it is screened.

    Written in the policy YAML as ``hold_back: 0``, ``hold_back: 120`` (characters) or
    ``hold_back: "24 tokens"`` / ``"120 chars"``. Tokens are counted as words, numbers and
    single punctuation marks (:func:`proxy.guardrails.stream.token_spans`), an approximation of a
    BPE tokenizer's count. 0 = every chunk is released at once and a guardrail that fires stops
    the stream at the next screened window (proxy.guardrails.stream).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    size: int = Field(0, ge=0, le=100_000)
    unit: Literal["chars", "tokens"] = "chars"


#: Safety's default ``hold_back`` (policies/safety.yaml explains the choice).
SAFETY_HOLD_BACK = HoldBack(size=24, unit="tokens")


def parse_hold_back(value: Any) -> Any:
    """``120`` → chars; ``"24 tokens"`` / ``"120 chars"`` → HoldBack; a mapping is validated as is.

    Raises ValueError for any other string (pydantic reports it against ``hold_back``).
    """
    if isinstance(value, bool):
        raise ValueError("hold_back is a number of characters or a string like '24 tokens'")
    if isinstance(value, int):
        return {"size": value, "unit": "chars"}
    if isinstance(value, str):
        parts = value.split()
        units = {"char": "chars", "chars": "chars", "token": "tokens", "tokens": "tokens"}
        if len(parts) == 2 and parts[0].isdigit() and parts[1] in units:
            return {"size": int(parts[0]), "unit": units[parts[1]]}
        raise ValueError(f"hold_back {value!r}: write N, 'N chars' or 'N tokens'")
    return value


class _Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, pattern=r"^[a-z0-9_.\-]+$")
    description: str = ""
    enabled: bool = True
    stages: list[Stage] = Field(min_length=1)
    evidence_required: list[str] = Field(default_factory=lambda: ["policy_id", "guardrail_action"])
    detector: dict[str, Any] = Field(default_factory=dict)
    #: Streams: what this policy holds back while it screens the answer (only for policies with
    #: the output stage; the stream uses the largest hold of its output policies).
    hold_back: HoldBack = Field(default_factory=HoldBack)

    @field_validator("hold_back", mode="before")
    @classmethod
    def _hold_back(cls, value: Any) -> Any:
        return parse_hold_back(value)


class SafetyPolicy(_Policy):
    """Toxicity / violence / harmful intent over a threshold → apologize and refuse."""

    kind: Literal["safety"]
    action: Literal["refuse"] = "refuse"
    thresholds: dict[str, Decimal] = Field(min_length=1)
    apology: str = "I'm sorry, but I can't help with that request."
    #: On input, how many of the latest client-written assistant turns Safety judges (every other
    #: role is always judged): None (the default) = all of them, 0 = none (a prefilled
    #: assistant turn is client input like any other).
    input_assistant_turns: int | None = Field(None, ge=0)
    #: Thresholds for the texts of the request's tool definitions (``tools``, ``tool_choice``,
    #: ``response_format``), per category; a category not named here uses ``thresholds``. A false
    #: refusal of a tool definition refuses every request an application sends with that tool,
    #: and definitions are terse imperatives ("Look up a customer by id") that read like
    #: instructions, so they may get stricter (higher) thresholds than messages.
    definition_thresholds: dict[str, Decimal] = Field(default_factory=dict)
    #: Streams: Safety holds the newest 24 tokens back by default (:data:`SAFETY_HOLD_BACK`), so a
    #: window that fires stops the stream before its last 24 tokens leave: an answer that fires
    #: within its first 24 tokens is never delivered at all (the client gets the apology), a longer
    #: one never whole. 0 restores the provider's time to first token.
    hold_back: HoldBack = Field(default_factory=lambda: SAFETY_HOLD_BACK)
    #: Content parts no detector reads (images, audio, file data: ``messages.UNREADABLE_PART_TYPES``)
    #: on input: ``"forward"`` (the default) passes them to the provider unscreened; ``"refuse"``
    #: refuses a request whose judged messages carry any (category :data:`UNREADABLE_CONTENT`), for
    #: routes where text inside an image or a recording must not reach the model unscreened.
    unreadable_parts: Literal["forward", "refuse"] = "forward"

    def for_definitions(self) -> "SafetyPolicy":
        """This policy with :attr:`definition_thresholds` over :attr:`thresholds` (a copy)."""
        if not self.definition_thresholds:
            return self
        return self.model_copy(update={"thresholds": {**self.thresholds, **self.definition_thresholds}})


class PrivacyPolicy(_Policy):
    """PII detected → typed placeholders before the model sees it; human approval flag."""

    kind: Literal["privacy"]
    action: Literal["mask"] = "mask"
    human_flag: bool = True
    restore_in_answer: bool = True


class CompliancePolicy(_Policy):
    """Regulated-domain query → escalate to a human; the model is not called."""

    kind: Literal["compliance"]
    action: Literal["escalate"] = "escalate"
    notice: str = (
        "This request touches a regulated domain ({domain}) and has been routed to a human "
        "reviewer. Escalation id: {escalation_id}."
    )


class ContinuityPolicy(_Policy):
    """Conversation over ``max_tokens`` (litellm's token counter) → older turns summarized."""

    kind: Literal["continuity"]
    action: Literal["summarize"] = "summarize"
    max_tokens: int = Field(gt=0)
    keep_last_messages: int = Field(4, ge=1)
    summary_model: str | None = None
    summary_prompt: str = (
        "Summarize the following conversation so it can replace the original turns. Keep facts, "
        "names (placeholders as written), decisions and open questions. Be concise."
    )


Policy = Annotated[
    SafetyPolicy | PrivacyPolicy | CompliancePolicy | ContinuityPolicy, Field(discriminator="kind")
]
_POLICY = TypeAdapter(Policy)


@dataclass(frozen=True)
class PolicyDocument:
    """One policy file: its ``path``, the YAML mapping as written (``raw``, what a policy set
    patches, :mod:`proxy.guardrails.policy_sets`) and the validated ``policy``."""

    path: Path
    raw: dict[str, Any]
    policy: Policy


def validate_policy(raw: Any, source: str, prefix: str = "") -> Policy:
    """Validate one policy mapping; ConfigError ``source: <prefix><key>: <problem>`` per problem.

    ``prefix`` places the keys, e.g. ``policy_sets.support.policies.privacy.pii.`` for a policy
    a policy set patched (the discriminator's own level, the ``kind``, is left out of the key).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or '(top level)'}: expected a policy mapping with id and kind")
    try:
        return _POLICY.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc, prefix=prefix, skip=1 if prefix else 0)) from None


def read_policy_file(path: Path) -> PolicyDocument:
    """Parse and validate one policy file; ConfigError names the file and the key."""
    try:
        raw = safe_load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    return PolicyDocument(path, raw, validate_policy(raw, str(path)))


def load_policy_file(path: Path) -> Policy:
    """Parse and validate one policy file; ConfigError names the file and the key."""
    return read_policy_file(path).policy


def load_policy_documents(directory: Path) -> list[PolicyDocument]:
    """Every policy file of ``directory/*.yaml`` / ``*.yml`` (sorted by file name), disabled ones too.

    Raises ConfigError for a missing directory, an invalid file or a duplicate id.
    """
    if not directory.is_dir():
        raise ConfigError(f"{directory}: policies directory not found")
    documents: list[PolicyDocument] = []
    seen: dict[str, Path] = {}
    for path in sorted(directory.glob("*.y*ml")):
        document = read_policy_file(path)
        policy = document.policy
        if policy.id in seen:
            raise ConfigError(f"{path}: id: duplicate policy id {policy.id!r} (also in {seen[policy.id]})")
        seen[policy.id] = path
        documents.append(document)
    return documents


def load_policies(directory: Path) -> list[Policy]:
    """All enabled policies from ``directory/*.yaml`` (sorted by file name).

    Raises ConfigError for a missing directory, an invalid file or a duplicate id.
    """
    return [d.policy for d in load_policy_documents(directory) if d.policy.enabled]
