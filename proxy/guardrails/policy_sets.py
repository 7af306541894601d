"""Policy sets: the policy files overlaid per named set, which key gets which set, and the version.

A policy set (config.yaml ``policy_sets:``, :class:`proxy.config.PolicySetConfig`) patches the
YAML mapping of each policy it names with a JSON Merge Patch (RFC 7386, :func:`merge_patch`):
mappings merge key by key, any other value replaces, ``null`` removes a key. The patched mapping
is validated exactly like a policy file (:func:`proxy.guardrails.schema.validate_policy`), and
its ``detector:`` block with the detector's own config model (:meth:`DetectorRegistry.check`), so
a bad set is reported as ``config.yaml: policy_sets.<set>.policies.<id>.<key>: <expected>`` and
no model is loaded for it. Every set overlays the policy files as written (not another set);
the set ``default`` is the files themselves, or the files overlaid by ``policy_sets.default``.

Which set a request uses: the caller's key's ``policy_set``, else its team's (``teams:``), else
``default`` (:func:`proxy.config.policy_set_of`; keys are matched by actor, one set per actor).

The policy version (:func:`policy_version`) is ``sha256:`` + hex SHA-256 of the RFC 8785 canonical
JSON of the policy files' contents (parsed YAML, in file-name order; comments and formatting do
not count) together with the policy sets, the teams and the actor → set assignments: every
receipt carries it, so a receipt names the exact policy content it was decided under.

Pure except :func:`load_policy_bundle`, which reads the policy directory
(:func:`proxy.guardrails.schema.load_policy_documents`).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.config import DEFAULT_POLICY_SET, Config, ConfigError, policy_set_of
from proxy.guardrails.registry import DetectorRegistry
from proxy.guardrails.schema import Policy, PolicyDocument, load_policy_documents, validate_policy
from proxy.primitives.canonical import canonical, sha256_ref

__all__ = ["PolicyBundle", "load_policy_bundle", "merge_patch", "policy_version", "resolve_policy_sets"]


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied as a JSON Merge Patch (RFC 7386 §2), as a new value.

    A mapping patch merges key by key (recursively); ``None`` as a value removes the key; any
    non-mapping patch replaces the target whole. Neither argument is modified.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass(frozen=True)
class PolicyBundle:
    """The validated policy content of one version, before any model is loaded.

    ``directory``: the policy directory; ``documents``: its files (disabled policies too);
    ``sets``: set name → its enabled policies in file order (``default`` always present);
    ``assignments``: actor → set name for every configured key; ``teams``: team → set name;
    ``version``: :func:`policy_version`; ``descriptions``: set name → its description.
    """

    directory: Path
    documents: list[PolicyDocument]
    sets: dict[str, list[Policy]]
    assignments: dict[str, str] = field(default_factory=dict)
    teams: dict[str, str] = field(default_factory=dict)
    version: str = ""
    descriptions: dict[str, str] = field(default_factory=dict)

    def set_of(self, actor: str) -> str:
        """The set name of ``actor`` (``default`` for an actor no key assigns)."""
        return self.assignments.get(actor, DEFAULT_POLICY_SET)


def _json_value(value: Any) -> Any:
    """``value`` as plain JSON (YAML dates and other scalars as strings), for canonicalization."""
    return json.loads(json.dumps(value, default=str))


def policy_version(documents: list[PolicyDocument], config: Config | None) -> str:
    """``sha256:<hex>`` over the canonical (RFC 8785) JSON of ``{"policies": [file contents...],
    "policy_sets", "teams", "assignments"}`` (see the module docstring)."""
    content: dict[str, Any] = {"policies": [_json_value(d.raw) for d in documents],
                               "policy_sets": {}, "teams": {}, "assignments": {}}
    if config is not None:
        content["policy_sets"] = {n: s.model_dump(mode="json") for n, s in sorted(config.policy_sets.items())}
        content["teams"] = {n: t.model_dump(mode="json") for n, t in sorted(config.teams.items())}
        content["assignments"] = {k.actor: policy_set_of(config, k) for k in config.auth.keys
                                  if policy_set_of(config, k) != DEFAULT_POLICY_SET}
    return sha256_ref(canonical(_json_value(content)))


def _overlay(documents: list[PolicyDocument], name: str, patches: dict[str, dict[str, Any]], source: str,
             registry: DetectorRegistry | None) -> list[Policy]:
    """The enabled policies of set ``name``: each document patched by ``patches[id]`` and validated."""
    ids = [d.policy.id for d in documents]
    for policy_id in patches:
        if policy_id not in ids:
            raise ConfigError(f"{source}: policy_sets.{name}.policies.{policy_id}: no policy with this id "
                              f"(expected one of {ids})")
    policies = []
    for document in documents:
        patch = patches.get(document.policy.id)
        if not patch:
            policy = document.policy
        else:
            prefix = f"policy_sets.{name}.policies.{document.policy.id}."
            policy = validate_policy(merge_patch(document.raw, patch), source, prefix)
            if registry is not None:
                registry.check(policy, source, prefix + "detector.")
        if policy.enabled:
            policies.append(policy)
    return policies


def resolve_policy_sets(documents: list[PolicyDocument], config: Config | None, directory: Path,
                        registry: DetectorRegistry | None = None) -> PolicyBundle:
    """Validate every policy set of ``config`` over ``documents``; the :class:`PolicyBundle`.

    ``registry`` (optional) also checks every ``detector:`` block, the files' and the sets',
    with the detectors' config models. Raises ConfigError naming the file and the key
    (``<policy file>: detector.<key>: ...`` or ``<config file>: policy_sets.<set>.policies.<id>.<key>: ...``).
    """
    if registry is not None:
        for document in documents:
            registry.check(document.policy, str(document.path))
    source = str(config.source) if config is not None and config.source else "config"
    set_configs = dict(config.policy_sets) if config is not None else {}
    sets = {DEFAULT_POLICY_SET: _overlay(documents, DEFAULT_POLICY_SET,
                                         set_configs[DEFAULT_POLICY_SET].policies if DEFAULT_POLICY_SET in set_configs
                                         else {}, source, registry)}
    for name, set_config in set_configs.items():
        if name != DEFAULT_POLICY_SET:
            sets[name] = _overlay(documents, name, set_config.policies, source, registry)
    descriptions = {name: s.description for name, s in set_configs.items()}
    if config is None:
        return PolicyBundle(directory, documents, sets, version=policy_version(documents, None),
                            descriptions=descriptions)
    return PolicyBundle(directory, documents, sets,
                        assignments={k.actor: policy_set_of(config, k) for k in config.auth.keys},
                        teams={n: t.policy_set for n, t in config.teams.items()},
                        version=policy_version(documents, config), descriptions=descriptions)


def load_policy_bundle(config: Config | None, registry: DetectorRegistry | None = None,
                       directory: Path | None = None) -> PolicyBundle:
    """Read ``directory`` (default: ``config.policies``) and resolve ``config``'s policy sets over it.

    Raises ConfigError (file, key, expectation) for any invalid file or set; loads no model.
    """
    if directory is None:
        if config is None:
            raise ValueError("load_policy_bundle needs a config or a directory")
        directory = config.path(config.policies)
    return resolve_policy_sets(load_policy_documents(directory), config, directory, registry)
