"""config.yaml: pydantic models, loading, environment overrides and secret references.

Layout (see docs/operations.md "Configuration")::

    server:     host, port, limits, timeouts
    model_list: LiteLLM's format: [{model_name, litellm_params: {model, api_key, ...}, model_info}]
    policies:   directory of guardrail policy YAML files (relative to config.yaml)
    ledger:     url (sqlite:///path or redis://host:port/db), on_unavailable
    signing:    key_file (Ed25519 key, created 0600 on first start)
    auth:       keys: [{key, actor, role, policy_set, team}] with role client | admin | reviewer
    policy_sets: named overlays of the policies (docs/operations.md "Policy sets and hot reload")
    teams:      team -> policy_set; a key's ``team`` selects it (key beats team beats ``default``)
    observability: log_format (text | json), otlp_endpoint (traces; off when null), service_name, sample_ratio

Secrets are written as ``os.environ/NAME`` (LiteLLM's convention) and resolved at load time.
Environment overrides: ``SONATE_CONFIG`` (path of the file), ``SONATE_LEDGER_URL`` (ledger.url).
An invalid file raises :class:`ConfigError` naming the file, the key and what was expected.

Safe defaults (docs/security.md "Safe defaults"): an API key has at least :data:`MIN_KEY_LENGTH`
characters (checked after ``os.environ/NAME`` is resolved; errors name the key's actor, never the
key); ``/metrics`` needs a key unless ``server.public_metrics``; :func:`check_exposure` refuses a
non-loopback address while a key of the shipped example config (:data:`DEMO_KEYS`) is configured.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ENV_PREFIX = "os.environ/"
DEFAULT_CONFIG = "config.yaml"
#: Shortest accepted API key, in characters: ``secrets.token_urlsafe(24)`` gives 32 (192 bits).
MIN_KEY_LENGTH = 32
#: The keys published in the repository's example config.yaml (and the shorter demo keys of
#: earlier releases): anyone who read the README holds them, so they are refused on any
#: non-loopback address (:func:`check_exposure`). tests/unit/test_config.py checks that every
#: literal key of config.yaml is listed here.
DEMO_KEYS = frozenset({
    "sk-sonate-demo-client-key-for-local-use-only", "sk-sonate-demo-admin-key-for-local-use-only",
    "sk-sonate-demo", "sk-sonate-admin",
})


class ConfigError(Exception):
    """The configuration cannot be used; the message names file, key and expectation."""


def format_validation_error(source: str, error: ValidationError, *, prefix: str = "", skip: int = 0) -> str:
    """Render a pydantic ValidationError as one line per problem: ``file: key.path: message``.

    ``prefix`` is put before every key path (e.g. ``policy_sets.support.policies.safety.``: a model
    validated apart from the file that holds it); ``skip`` drops that many leading parts of each
    error's location (a discriminated union's tag).
    """
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        key = (prefix + ".".join(str(part) for part in loc[skip:])).rstrip(".") or "(top level)"
        got = item.get("input")
        secret = loc[:1] == ("auth",)  # never echo a key (or anything near one)
        shown = "" if secret or isinstance(got, (dict, list)) else f" (got {got!r})"
        lines.append(f"{source}: {key}: {item['msg']}{shown}")
    return "\n".join(lines)


def resolve_secret(value: Any, *, where: str) -> Any:
    """Resolve ``os.environ/NAME`` to the variable's value; other values pass through.

    Raises ConfigError naming ``where`` when the variable is not set.
    """
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX):]
        if name not in os.environ:
            raise ConfigError(f"{where}: environment variable {name} is not set (referenced as {value!r})")
        return os.environ[name]
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LimitsConfig(_Strict):
    """Admission control (docs/operations.md "Limits", :mod:`proxy.server.admission.limits`).

    Per key (per ``actor``) on ``POST /v1/chat/completions``: at most ``max_concurrent_per_key``
    requests in flight and a token bucket of ``requests_per_second`` with ``burst`` (0 disables
    either); over a limit → 429 ``rate_limit_exceeded`` with ``Retry-After`` (seconds).
    Guardrail lanes: a request whose client-written text totals at least ``large_input_chars``
    characters, or holds at least ``large_input_pieces`` texts (each JSON string, key and number the
    guardrails read is one: :func:`proxy.server.admission.limits.screen_size`), is screened in its own pool of ``large_input_threads`` threads (0 disables the
    lane), so large inputs never hold the threads short ones need; the lane's threads run at the OS
    scheduling priority ``large_input_nice`` (a thread's nice value on Linux, 0: unchanged), so
    short requests get the CPUs first while a large one is screened. Each lane admits its threads
    plus ``max_queued_screens`` (small lane) / ``max_queued_large_screens`` (large lane) waiting
    screens; beyond that → 503 ``overloaded`` with ``Retry-After``, never an unbounded wait.
    ``max_screen_chars`` is the per-request screening budget: a request with more client-written
    text is refused with 413 ``input_too_large`` before any detector runs (0: no budget); it bounds
    the seconds one request can hold a detector thread (about 50 µs per character of prose on one
    core of the reference machine, most of it spaCy NER). ``max_screen_pieces`` bounds the texts
    screened one by one (every string, object key and number of the messages, tool-call arguments,
    tool definitions and passed-through fields; about 1.2 ms per number and 2.4 ms per short string
    on that core, whatever their length): more → 413 ``input_too_large`` before any detector runs
    (0: no bound). ``screen_timeout_seconds`` is the input
    screen's time budget: past it the request is answered 503 ``guardrail_timeout`` and never
    forwarded (fail closed; 0: no budget). Request shape: at most ``max_messages`` messages (413
    ``too_many_messages``), ``max_message_chars`` characters of text in one message (413
    ``message_too_large``; 0: no bound) and ``max_json_depth`` levels of JSON nesting (400; the OpenAI
    wire format needs ~8, JSON Schema in ``response_format`` or tool ``parameters`` goes deeper).
    """

    max_concurrent_per_key: int = Field(16, ge=0)
    requests_per_second: float = Field(20.0, ge=0)
    burst: int = Field(40, ge=1)
    large_input_chars: int = Field(8000, ge=1)
    large_input_pieces: int = Field(500, ge=0)
    large_input_threads: int = Field(1, ge=0, le=16)
    large_input_nice: int = Field(10, ge=0, le=19)
    max_queued_screens: int = Field(64, ge=0)
    max_queued_large_screens: int = Field(16, ge=0)
    max_screen_chars: int = Field(200_000, ge=0)
    max_screen_pieces: int = Field(2_500, ge=0)
    screen_timeout_seconds: float = Field(30.0, ge=0)
    max_messages: int = Field(2048, ge=1, le=2048)
    max_message_chars: int = Field(200_000, ge=0)
    max_json_depth: int = Field(64, ge=8, le=512)


class ServerConfig(_Strict):
    """HTTP server settings. Sizes in bytes, durations in seconds."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(1_048_576, gt=0)
    upstream_timeout_seconds: float = Field(60.0, gt=0)
    detector_threads: int = Field(2, ge=1, le=64)
    #: Serving processes on the one port, each with its own detectors (1: this process serves;
    #: more: a supervisor and N workers, :mod:`proxy.server.admission.workers`; docs/operations.md "Workers").
    workers: int = Field(1, ge=1, le=64)
    #: ``GET /metrics`` without a key. Off by default: the series name models, policies and
    #: traffic volumes; Prometheus sends a ``metrics`` (or ``admin``) key as a bearer token.
    public_metrics: bool = False
    #: Per-key rate and concurrency limits and the guardrail lanes (:class:`LimitsConfig`).
    limits: LimitsConfig = Field(default_factory=lambda: LimitsConfig())
    #: Top-level chat-completion fields the proxy does not interpret are passed to the provider
    #: (``extra_body``); the fields named here are refused with a 400 instead.
    forbidden_params: list[str] = Field(default_factory=list)
    #: ``POST /v1/embeddings``: also judge the inputs with the input Safety policies (a refusal
    #: is a 400 ``content_policy_violation``, receipted). Off by default: Privacy always masks.
    embeddings_safety: bool = False


class ModelRoute(BaseModel):
    """One LiteLLM ``model_list`` entry; ``litellm_params`` is passed to litellm's Router."""

    model_config = ConfigDict(extra="allow")
    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("litellm_params")
    @classmethod
    def _needs_model(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("model"), str) or not value["model"]:
            raise ValueError("litellm_params.model is required, e.g. 'openai/gpt-4o-mini'")
        return value

    @property
    def provider(self) -> str:
        """Provider label: ``model_info.provider`` or the ``provider/`` prefix of the model."""
        if "provider" in self.model_info:
            return str(self.model_info["provider"])
        if self.is_demo:
            return "demo"
        model = self.litellm_params["model"]
        return model.split("/", 1)[0] if "/" in model else "openai"

    @property
    def is_demo(self) -> bool:
        """True for routes answered locally by litellm's ``mock_response`` (no provider)."""
        return bool(self.model_info.get("demo")) or "mock_response" in self.litellm_params


class WitnessConfig(_Strict):
    """A C2SP tlog-witness the proxy submits each new checkpoint to (docs/security.md "Witnesses").

    ``url``: the witness's submission prefix (``POST <url>/add-checkpoint``); ``key``: its
    cosigner verifier key ``name+<hex key ID>+<base64(0x04 ‖ key)>`` (``sonate witness --print-key``);
    ``timeout_seconds``: per request.
    """

    url: str = Field(pattern=r"^https?://\S+$")
    key: str = Field(pattern=r"^[^\s+]+\+[0-9a-f]{8}\+[A-Za-z0-9+/=]+$")
    timeout_seconds: float = Field(5.0, gt=0, le=120)


class LedgerConfig(_Strict):
    """Where receipts are written, what happens when the store is down, and the ledger audit.

    ``on_unavailable`` (docs/operations.md "Fault policy"): ``fail_closed`` (default) answers 503 and, after a
    ping of the store (``probe_timeout_seconds``) fails, does not call the model at all;
    ``spool`` writes the receipts to a durable local spool in ``spool_dir`` (fsynced, at most
    ``spool_max_bytes`` per process, then 503), answers with ``x-sonate-receipt-status: pending``
    and replays the spool in order when the store returns.
    The audit job re-verifies ``audit_sample_size`` random receipts (plus the newest) every
    ``audit_interval_seconds`` (0 disables it) and exports ``sonate_ledger_verifications_total``.
    """

    url: str = "sqlite:///var/ledger.db"
    on_unavailable: Literal["fail_closed", "spool"] = "fail_closed"
    spool_dir: str = "var/spool"
    spool_max_bytes: int = Field(1 << 30, gt=0)
    probe_timeout_seconds: float = Field(0.5, gt=0, le=30)
    audit_interval_seconds: float = Field(60.0, ge=0)
    audit_sample_size: int = Field(16, ge=1, le=10_000)
    # Transparency log (docs/receipts.md "Trust receipts and verification"): ``origin`` is line 1 of every
    # checkpoint and the signed-note key name; a checkpoint is published when the Merkle tree grew
    # by ``checkpoint_every_entries`` or every ``checkpoint_interval_seconds``, whichever is first.
    origin: str = Field("sonate-trust-proxy/ledger", min_length=1, max_length=200, pattern=r"^[^\s+]+$")
    checkpoint_every_entries: int = Field(256, ge=1)
    checkpoint_interval_seconds: float = Field(10.0, gt=0)
    #: Witnesses that cosign each published checkpoint (C2SP tlog-witness; docs/security.md "Witnesses").
    witnesses: list[WitnessConfig] = Field(default_factory=list)
    #: How receipts are split over several ledgers (:mod:`proxy.receipts.ledgers`; docs/receipts.md
    #: "Several ledgers"): ``none`` (one ledger, receipts carry no ``ledger`` field), ``team`` (the
    #: caller's key's team), ``policy_set`` (the request's policy set) or ``hash`` (``shards``
    #: ledgers ``shard-0`` .. by a stable hash of the request id). Each ledger is its own chain with
    #: its own checkpoints, under its own Redis hash tag / SQLite file.
    partition: Literal["none", "team", "policy_set", "hash"] = "none"
    shards: int = Field(4, ge=1, le=1024)

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite:///", "redis://", "rediss://")):
            raise ValueError("expected sqlite:///path or redis://host:port/db")
        return value


class SigningConfig(_Strict):
    """Ed25519 signing key file (JSON, mode 0600; generated on first start) and the public keyring.

    ``keyring_file`` (default ``<key_file stem>.keyring.json`` beside the key file) lists every
    public key ever used with its validity window; ``GET /v1/keys`` serves it (docs/receipts.md "Keys and
    rotation", :mod:`proxy.receipts.keyring`).
    """

    key_file: str = "var/signing-key.json"
    keyring_file: str | None = None


def _short_key(key: str, actor: str) -> str | None:
    """Why ``key`` is too short (naming ``actor``, never the key), or None when it is long enough."""
    if len(key) >= MIN_KEY_LENGTH:
        return None
    return (f"the key of actor {actor!r} has {len(key)} characters; at least {MIN_KEY_LENGTH} are required "
            "(generate one with: python -c \"import secrets; print('sk-' + secrets.token_urlsafe(32))\")")


def check_key_length(key: str, actor: str, where: str) -> None:
    """Raise ConfigError (``where: <reason>``) when ``key`` is shorter than :data:`MIN_KEY_LENGTH` characters.

    The message names ``where`` and the key's ``actor``, never the key.
    """
    problem = _short_key(key, actor)
    if problem:
        raise ConfigError(f"{where}: {problem}")


#: Names of policy sets and teams: they are written into receipts and shown by the admin API.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
#: The policy set of a key that names none (directly or through its team): the policy files as
#: written, overlaid by ``policy_sets.default`` when the config defines one.
DEFAULT_POLICY_SET = "default"


class ApiKey(_Strict):
    """A bearer key and the actor name written into receipts. ``key`` may be ``os.environ/NAME``.

    Roles: ``client`` (the API), ``reviewer`` (adjudication), ``admin`` (everything), ``metrics``
    (only ``GET /metrics``: the Prometheus scraper's key). A literal key shorter than
    :data:`MIN_KEY_LENGTH` is rejected here; an ``os.environ/NAME`` one once resolved (:func:`load_config`).
    ``policy_set`` (a name of ``policy_sets``) or ``team`` (a name of ``teams``) select the
    policies the key's requests are screened by: the key's own set beats its team's, which beats
    ``default`` (:func:`policy_set_of`).
    """

    key: str = Field(min_length=1)
    actor: str = Field(min_length=1, max_length=128)
    role: Literal["client", "admin", "reviewer", "metrics"] = "client"
    policy_set: str | None = Field(None, pattern=NAME_PATTERN)
    team: str | None = Field(None, pattern=NAME_PATTERN)

    @model_validator(mode="after")
    def _long_enough(self) -> "ApiKey":
        problem = None if self.key.startswith(ENV_PREFIX) else _short_key(self.key, self.actor)
        if problem:
            raise ValueError(problem)
        return self


class AuthConfig(_Strict):
    """Bearer keys accepted by the proxy."""

    keys: list[ApiKey] = Field(min_length=1)


class PolicySetConfig(_Strict):
    """One named policy set: the policy files overlaid per policy id (docs/operations.md
    "Policy sets and hot reload"; :mod:`proxy.guardrails.policy_sets`).

    ``policies`` maps a policy id to a JSON Merge Patch (RFC 7386) of that policy's YAML mapping:
    mappings merge key by key (``detector``, ``thresholds``, ``detector.domains``), any other
    value replaces, ``null`` removes a key. ``enabled: false`` disables the policy for the set;
    ``thresholds`` / ``detector.threshold`` / ``detector.score_threshold`` move thresholds;
    ``restore_in_answer``, ``human_flag``, ``stages`` or Compliance's ``detector.ambiguous``
    (escalate | notice | allow) change what a policy does; ``detector.domains`` adds domains.
    The patched policy is validated like a policy file (errors name this file and the key).
    """

    description: str = ""
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("policies")
    @classmethod
    def _keeps_identity(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for policy_id, patch in value.items():
            for fixed in ("id", "kind"):
                if fixed in patch:
                    raise ValueError(f"{policy_id}: a policy set cannot change a policy's {fixed!r}")
        return value


class TeamConfig(_Strict):
    """A team: the policy set of every key whose ``team`` names it (unless the key names its own)."""

    description: str = ""
    policy_set: str = Field(pattern=NAME_PATTERN)


class ReviewConfig(_Strict):
    """Adjudication queue (methodology "Adjudication").

    Every apology (refusal or model apology) and guardrail trigger is queued; allowed requests
    are sampled with probability ``sample_rate`` (0..1) to find false negatives.
    """

    sample_rate: float = Field(0.02, ge=0.0, le=1.0)
    #: An admin may resolve a Compliance escalation of their own request (separation of duties: off,
    #: another admin resolves it; 403 ``own_escalation``). Review items are never reviewed or resolved
    #: by the actor whose request created them (403 ``own_request``).
    allow_self_resolution: bool = False


class ObservabilityConfig(_Strict):
    """Logs and traces (docs/operations.md "Logs and traces"; :mod:`proxy.server.telemetry.logs`,
    :mod:`proxy.server.telemetry.tracing`).

    ``log_format``: ``text`` (default) or ``json`` (one JSON object per line with the request id,
    receipt id, actor and action). ``otlp_endpoint``: the OTLP/HTTP traces URL of a collector
    (e.g. ``http://otel-collector:4318/v1/traces``); None (default) turns tracing off.
    ``service_name``: the traces' ``service.name``; ``sample_ratio`` (0..1): the share of new traces
    recorded (a request carrying a sampled W3C ``traceparent`` is always recorded).
    """

    log_format: Literal["text", "json"] = "text"
    otlp_endpoint: str | None = Field(None, pattern=r"^https?://\S+$")
    service_name: str = Field("sonate-trust-proxy", min_length=1, max_length=200)
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)


class Config(_Strict):
    """The whole config.yaml. Relative paths are resolved against the file's directory."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    model_list: list[ModelRoute] = Field(min_length=1)
    policies: str = "policies"
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    signing: SigningConfig = Field(default_factory=SigningConfig)
    auth: AuthConfig
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    #: Logs and traces (:class:`ObservabilityConfig`): text logs and no traces by default.
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    #: Named policy sets (:class:`PolicySetConfig`), selected per key or team.
    policy_sets: dict[str, PolicySetConfig] = Field(default_factory=dict)
    #: Teams (:class:`TeamConfig`): ``auth.keys[].team`` names one.
    teams: dict[str, TeamConfig] = Field(default_factory=dict)
    #: Seconds between two checks of the policy files and this file for changes (a changed file
    #: reloads the policies, :mod:`proxy.server.flow.policy_runtime`); 0: no file watch (SIGHUP and
    #: ``POST /v1/admin/policies/reload`` still reload).
    policy_watch_seconds: float = Field(0.0, ge=0, le=86_400)
    base_dir: Path = Field(default=Path("."), exclude=True)
    #: The file this config was loaded from (None: built in code); a policy reload re-reads it.
    source: Path | None = Field(default=None, exclude=True)

    @field_validator("policy_sets", "teams")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not re.fullmatch(NAME_PATTERN, name):
                raise ValueError(f"name {name!r}: expected letters, digits, '_', '.' or '-' (at most 64)")
        return value

    def path(self, value: str) -> Path:
        """Resolve a path from the config relative to the config file's directory."""
        p = Path(value)
        return p if p.is_absolute() else (self.base_dir / p)

    @property
    def signing_paths(self) -> tuple[Path, Path | None]:
        """(signing key file, keyring file or None for the default beside it), resolved as :meth:`path`."""
        keyring = self.signing.keyring_file
        return self.path(self.signing.key_file), self.path(keyring) if keyring else None

    @property
    def ledger_url(self) -> str:
        """ledger.url with a relative SQLite path made absolute against the config directory."""
        url = self.ledger.url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            return "sqlite:///" + str(self.path(url[len("sqlite:///"):]).resolve())
        return url

    def route(self, model_name: str) -> ModelRoute | None:
        """The first route whose model_name matches, or None."""
        return next((r for r in self.model_list if r.model_name == model_name), None)


def safe_load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, parsed by libyaml when PyYAML was built with it (the same
    constructor and resolver, so the same data; ~25x faster on the 138 KB Compliance policy read at
    start-up). A text libyaml refuses is parsed again by the pure-Python loader: its result, or its
    ``yaml.YAMLError`` (whose message quotes the offending line), is the one ``yaml.safe_load`` gives."""
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)  # CSafeLoader: the safe constructor
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def load_config(path: str | os.PathLike | None = None) -> Config:
    """Load, override and validate config.yaml.

    ``path`` defaults to ``$SONATE_CONFIG`` or ``./config.yaml``; ``$SONATE_LEDGER_URL`` replaces
    ``ledger.url``. Secrets (``os.environ/NAME``) in ``auth.keys[].key`` are resolved here;
    those in ``litellm_params`` are resolved by litellm's Router at call time.
    Raises ConfigError (file, key, expectation) on any problem.
    """
    source = Path(path or os.environ.get("SONATE_CONFIG") or DEFAULT_CONFIG)
    try:
        raw = safe_load_yaml(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found (set SONATE_CONFIG or pass --config)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: (top level): expected a mapping of sections")
    if os.environ.get("SONATE_LEDGER_URL"):
        raw.setdefault("ledger", {})
        if not isinstance(raw["ledger"], dict):
            raise ConfigError(f"{source}: ledger: expected a mapping")
        raw["ledger"]["url"] = os.environ["SONATE_LEDGER_URL"]
    try:
        config = Config.model_validate({**raw, "base_dir": source.resolve().parent, "source": source})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(source), exc)) from None
    check_policy_set_references(config, str(source))
    for i, entry in enumerate(config.auth.keys):
        entry.key = resolve_secret(entry.key, where=f"{source}: auth.keys.{i}.key")
        check_key_length(entry.key, entry.actor, f"{source}: auth.keys.{i}.key")
    names = [r.model_name for r in config.model_list]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{source}: model_list: duplicate model_name {duplicates} (one route per name)")
    return config


def check_policy_set_references(config: Config, source: str) -> None:
    """Raise ConfigError (``source: key: problem``) for a key or team naming an unknown policy set
    or team, or two keys of one actor selecting different policy sets (receipts name the actor,
    so one actor has one set)."""
    known = sorted({DEFAULT_POLICY_SET, *config.policy_sets})
    for name, team in config.teams.items():
        if team.policy_set not in known:
            raise ConfigError(f"{source}: teams.{name}.policy_set: unknown policy set {team.policy_set!r} "
                              f"(expected one of {known})")
    chosen: dict[str, tuple[int, str]] = {}
    for i, entry in enumerate(config.auth.keys):
        if entry.policy_set is not None and entry.policy_set not in known:
            raise ConfigError(f"{source}: auth.keys.{i}.policy_set: unknown policy set {entry.policy_set!r} "
                              f"(expected one of {known})")
        if entry.team is not None and entry.team not in config.teams:
            raise ConfigError(f"{source}: auth.keys.{i}.team: unknown team {entry.team!r} "
                              f"(expected one of {sorted(config.teams)})")
        selected = policy_set_of(config, entry)
        first = chosen.setdefault(entry.actor, (i, selected))
        if first[1] != selected:
            raise ConfigError(f"{source}: auth.keys.{i}: actor {entry.actor!r} selects policy set {selected!r} but "
                              f"auth.keys.{first[0]} (same actor) selects {first[1]!r}; expected one set per actor")


def policy_set_of(config: Config, key: ApiKey) -> str:
    """The policy set of ``key``: its own ``policy_set``, else its team's, else :data:`DEFAULT_POLICY_SET`."""
    if key.policy_set is not None:
        return key.policy_set
    if key.team is not None and key.team in config.teams:
        return config.teams[key.team].policy_set
    return DEFAULT_POLICY_SET


def is_loopback(host: str) -> bool:
    """True when ``host`` (``server.host`` or ``--host``) only listens on this machine.

    ``localhost`` and loopback IP literals (127.0.0.0/8, ``::1``) are loopback; ``0.0.0.0``,
    ``::``, ``""`` (every interface) and any other name or address are not.
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(config: Config, host: str) -> None:
    """Refuse to listen on non-loopback ``host`` while a key of :data:`DEMO_KEYS` is configured.

    Raises ConfigError naming the key's position and actor (never the key) and what to do:
    set the key through ``os.environ/NAME`` or a mounted config file, or serve on 127.0.0.1.
    """
    if is_loopback(host):
        return
    for i, entry in enumerate(config.auth.keys):
        if entry.key in DEMO_KEYS:
            raise ConfigError(
                f"auth.keys.{i} (actor {entry.actor!r}, role {entry.role}) is a demo key published with the "
                f"example config.yaml; refusing to listen on {host or '(every interface)'!r}, which is not a "
                "loopback address. Set your own keys (at least 32 characters) through the environment, e.g. "
                "`key: os.environ/SONATE_ADMIN_KEY`, or in a config file mounted at $SONATE_CONFIG; or serve "
                "on 127.0.0.1. See docs/operations.md \"Keys and exposure\".")
