"""LLM judges: versioned prompt templates in the repository, called through litellm at temperature 0.

A template lives in ``proxy/evaluation/judges/<name>-v<version>.yaml``::

    name: groundedness          # the template id is "<name>-v<version>": groundedness-v1
    version: 1
    scale: [0, 1]               # (low, high): the range of the judge's "score"
    fields: [answer, context]   # the placeholders the caller must supply
    description: ...            # what a high score means (documentation)
    system: |                   # must contain the line "template: groundedness-v1"
      template: groundedness-v1
      ...
    user: |                     # str.format placeholders, one per field, each inside <field>...</field>
      <answer>
      {answer}
      </answer>

Output contract of every template: the judge answers ONE JSON object
``{"score": <number in scale>, "reasoning": "<text>"}``; extra keys are allowed and kept in
:attr:`Verdict.extra`. The ``template: <id>`` line lets a stub judge (tests/support/stub_judge.py)
tell the templates apart, and the ``<field>`` tags let it read the inputs back.

Any litellm model can judge (``openai/gpt-4o-mini``, ``anthropic/claude-...``, ``ollama/...``,
or ``openai/<name>`` with ``api_base`` for any OpenAI-compatible server). The judge model and the
template id are recorded in every :class:`Verdict`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy import offline  # noqa: F401  (litellm's pinned price map, no fetch at import)

#: Folder of the shipped templates.
TEMPLATE_DIR = Path(__file__).resolve().parent / "judges"
#: Keys every template file must have.
REQUIRED_KEYS = ("name", "version", "scale", "fields", "system", "user")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*-v[0-9]+$")


class JudgeError(RuntimeError):
    """A template cannot be loaded or used, or a judge's answer breaks the output contract."""


@dataclass(frozen=True)
class JudgeTemplate:
    """One versioned judge prompt.

    Attributes:
        name, version: ``id`` is ``f"{name}-v{version}"``.
        scale: (low, high) of the score the judge returns (floats, low < high).
        system, user: prompt texts; ``user`` holds ``{field}`` placeholders (str.format).
        fields: the placeholders the caller must supply, in declared order.
        description: what a high score means.
        path: the file it was read from.
    """

    name: str
    version: int
    scale: tuple[float, float]
    system: str
    user: str
    fields: tuple[str, ...]
    description: str = ""
    path: Path | None = None

    @property
    def id(self) -> str:
        return f"{self.name}-v{self.version}"

    def render(self, **values: Any) -> list[dict[str, str]]:
        """The chat messages for ``values`` (one per declared field; str() of each).

        Raises JudgeError naming the missing or undeclared fields.
        """
        missing = [f for f in self.fields if f not in values]
        extra = [f for f in values if f not in self.fields]
        if missing or extra:
            raise JudgeError(f"judge template {self.id}: missing fields {missing}, undeclared fields {extra} "
                             f"(declared: {list(self.fields)})")
        text = self.user.format_map({k: str(v) for k, v in values.items()})
        return [{"role": "system", "content": self.system}, {"role": "user", "content": text}]

    def normalize(self, score: float) -> float:
        """``score`` mapped linearly from :attr:`scale` to 0..1."""
        low, high = self.scale
        return (score - low) / (high - low)


def template_path(template_id: str, directory: Path | None = None) -> Path:
    """The file of ``template_id`` (``<directory or TEMPLATE_DIR>/<id>.yaml``)."""
    return (directory or TEMPLATE_DIR) / f"{template_id}.yaml"


def load_template(template_id: str, directory: Path | None = None) -> JudgeTemplate:
    """Read and check ``<directory>/<template_id>.yaml`` (default :data:`TEMPLATE_DIR`).

    Raises JudgeError naming the file: unknown id (no such file), a missing key, a name/version that
    does not match the id, a bad scale, a system text without ``template: <id>``, a declared field
    with no ``{placeholder}`` in the user text.
    """
    import yaml

    path = template_path(template_id, directory)
    if not _ID.match(template_id) or not path.is_file():
        known = ", ".join(available_templates(directory)) or "none"
        raise JudgeError(f"unknown judge template {template_id!r}: no file {path} (known: {known})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise JudgeError(f"{path}: cannot read judge template: {exc}") from None
    if not isinstance(doc, dict):
        raise JudgeError(f"{path}: a judge template is a mapping with keys {', '.join(REQUIRED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise JudgeError(f"{path}: judge template lacks {', '.join(missing)}")
    scale = doc["scale"]
    if (not isinstance(scale, list) or len(scale) != 2 or not all(isinstance(v, (int, float)) for v in scale)
            or not scale[0] < scale[1]):
        raise JudgeError(f"{path}: scale must be [low, high] numbers with low < high, got {scale!r}")
    template = JudgeTemplate(name=str(doc["name"]), version=int(doc["version"]),
                             scale=(float(scale[0]), float(scale[1])), system=str(doc["system"]),
                             user=str(doc["user"]), fields=tuple(str(f) for f in doc["fields"]),
                             description=str(doc.get("description", "")), path=path)
    if template.id != template_id:
        raise JudgeError(f"{path}: name/version make {template.id!r}, not {template_id!r}")
    if f"template: {template_id}" not in template.system.splitlines():
        raise JudgeError(f"{path}: the system text must contain the line 'template: {template_id}'")
    absent = [f for f in template.fields if "{" + f + "}" not in template.user]
    if absent:
        raise JudgeError(f"{path}: declared fields without a {{placeholder}} in user: {absent}")
    return template


def available_templates(directory: Path | None = None) -> list[str]:
    """The template ids present in ``directory`` (default :data:`TEMPLATE_DIR`), sorted."""
    folder = directory or TEMPLATE_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


@dataclass(frozen=True)
class Verdict:
    """A judge's verdict.

    Attributes:
        score: in the template's scale (the mean over ``samples`` when several were drawn).
        normalized: ``score`` mapped to 0..1.
        reasoning: the judge's reasoning (of the first sample).
        template_id, model: which template and which litellm model judged.
        samples: every sample's score (len = Judge.samples); std: their sample standard deviation
            (0.0 for one sample).
        extra: keys of the judge's JSON object other than score and reasoning (first sample).
    """

    score: float
    normalized: float
    reasoning: str
    template_id: str
    model: str
    samples: tuple[float, ...] = ()
    std: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for reports)."""
        return {"score": self.score, "normalized": self.normalized, "reasoning": self.reasoning,
                "template_id": self.template_id, "model": self.model, "samples": list(self.samples),
                "std": self.std, "extra": self.extra}


def parse_answer(text: str, template: JudgeTemplate) -> tuple[float, str, dict[str, Any]]:
    """(score, reasoning, extra) from a judge's answer text.

    Accepts the JSON object alone, in a ```json fence, or embedded in prose (the first ``{...}``
    span that parses). Raises JudgeError when there is no JSON object, no numeric ``score``, or the
    score is outside the template's scale.
    """
    candidates = [text.strip()]
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    if fenced:
        candidates.append(fenced.group(1))
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            break
    else:
        raise JudgeError(f"judge answer for {template.id} is not a JSON object: {text[:200]!r}")
    score = obj.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise JudgeError(f"judge answer for {template.id} has no numeric score: {text[:200]!r}")
    low, high = template.scale
    if not low <= score <= high:
        raise JudgeError(f"judge answer for {template.id}: score {score} outside the scale [{low}, {high}]")
    extra = {k: v for k, v in obj.items() if k not in ("score", "reasoning")}
    return float(score), str(obj.get("reasoning", "")), extra


class Judge:
    """A litellm model used as judge: ``await Judge("openai/gpt-4o-mini").score("groundedness-v1", ...)``.

    Args:
        model: any litellm model string.
        api_base, api_key: passed to litellm (an OpenAI-compatible server, a key); None = litellm's
            defaults (environment variables).
        samples: how many times each verdict is drawn (temperature 0 still varies on some
            providers); the verdict's score is their mean and ``std`` their sample std.
        template_dir: where templates are read from (default :data:`TEMPLATE_DIR`).
        timeout: seconds per judge call.
    """

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 samples: int = 1, template_dir: Path | None = None, timeout: float = 120.0) -> None:
        if samples < 1:
            raise ValueError(f"samples must be at least 1, got {samples}")
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.samples = samples
        self.template_dir = template_dir
        self.timeout = timeout
        self._templates: dict[str, JudgeTemplate] = {}

    def template(self, template_id: str) -> JudgeTemplate:
        """The (cached) template ``template_id``; raises JudgeError."""
        if template_id not in self._templates:
            self._templates[template_id] = load_template(template_id, self.template_dir)
        return self._templates[template_id]

    async def _complete(self, messages: list[dict[str, str]]) -> str:
        """One litellm call at temperature 0; the answer text. Raises JudgeError on provider errors."""
        import litellm

        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0,
                                  "timeout": self.timeout, "num_retries": 0}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # litellm maps every provider failure to its own exception classes
            raise JudgeError(f"judge model {self.model} failed: {type(exc).__name__}: {exc}") from None
        return response.choices[0].message.content or ""

    async def score(self, template_id: str, **fields: Any) -> Verdict:
        """The verdict of template ``template_id`` on ``fields`` (one per declared field).

        Raises JudgeError (unknown template, missing fields, provider failure, answer off contract).
        """
        template = self.template(template_id)
        messages = template.render(**fields)
        parsed = [parse_answer(await self._complete(messages), template) for _ in range(self.samples)]
        scores = tuple(p[0] for p in parsed)
        mean = statistics.fmean(scores)
        std = statistics.stdev(scores) if len(scores) > 1 else 0.0
        return Verdict(score=mean, normalized=template.normalize(mean), reasoning=parsed[0][1],
                       template_id=template.id, model=self.model, samples=scores, std=std, extra=parsed[0][2])
