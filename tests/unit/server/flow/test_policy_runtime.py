"""Policy sets and the policy runtime: overlays, validation messages, the policy version, shared
detectors, reloads (applied, unchanged, rejected) and per-caller sets through the real Gateway.

Fake detectors (tests/support/detectors.py) behind a real DetectorRegistry; real GuardrailEngine,
real config loading, the real Gateway with litellm against the stub provider and a SQLite ledger.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config import ConfigError, load_config
from proxy.guardrails.detectors.pii import PiiDetectorConfig
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.policy_sets import load_policy_bundle, merge_patch, policy_version
from proxy.guardrails.registry import DetectorRegistry
from proxy.guardrails.schema import load_policy_documents
from proxy.receipts import Ledger, Signer, open_store
from proxy.server.errors import Caller
from proxy.server.flow.pipeline import Gateway
from proxy.server.flow.policy_runtime import (
    PolicyRuntime,
    ReloadOutcome,
    SnapshotBuilder,
    file_signature,
    install_sighup,
    watch_files,
)
from proxy.server.flow.upstream import Upstream
from proxy.server.flow.wire import ChatCompletionRequest
from proxy.server.telemetry.metrics import Metrics
from tests.support.detectors import POLICIES, FakeApology, FakeDetectors, count_words
from tests.support.ledger import sqlite_url

KEYS = {"alice": "sk-test-client-0001-padded-to-32-chars", "bob": "sk-test-other-0002-padded-to-32-chars",
        "carol": "sk-test-third-0003-padded-to-32-chars"}


def write_policies(directory: Path) -> Path:
    """The four fake-detector policies as YAML files (one per policy)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, policy in enumerate(POLICIES):
        (directory / f"{i}-{policy.id}.yaml").write_text(yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False))
    return directory


def write_config(tmp_path: Path, upstream_url: str = "http://127.0.0.1:9", **sections: Any) -> Path:
    """A config.yaml with three client keys over ``tmp_path/policies``; ``sections`` replace top-level keys."""
    write_policies(tmp_path / "policies")
    config = {
        "model_list": [{"model_name": "stub", "litellm_params": {"model": "openai/stub-model", "api_base": upstream_url,
                                                                 "api_key": "sk-stub"}}],
        "policies": "policies",
        "ledger": {"url": sqlite_url(tmp_path / "ledger.db")},
        "auth": {"keys": [{"key": key, "actor": actor} for actor, key in KEYS.items()]},
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def keys_with(**extra: dict[str, Any]) -> dict[str, Any]:
    """auth with the three keys, ``extra[actor]`` merged into that actor's key."""
    return {"keys": [{"key": key, "actor": actor, **extra.get(actor, {})} for actor, key in KEYS.items()]}


SETS = {
    "support": {"description": "no escalation", "policies": {"compliance": {"enabled": False}}},
    "strict": {"policies": {"safety": {"thresholds": {"toxicity": "0.05"}}}},
    "analytics": {"policies": {"privacy": {"restore_in_answer": False}}},
}


def test_merge_patch_follows_rfc_7386():
    # RFC 7386 Appendix A examples
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch(["a", "b"], ["c", "d"]) == ["c", "d"]
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    target = {"a": {"b": 1}}
    merge_patch(target, {"a": {"b": 2}})
    assert target == {"a": {"b": 1}}  # inputs are not modified


def test_sets_disable_override_and_keep_the_files_as_default(tmp_path):
    config = load_config(write_config(tmp_path, policy_sets=SETS, teams={"desk": {"policy_set": "support"}},
                                      auth=keys_with(alice={"team": "desk"}, bob={"policy_set": "strict",
                                                                                    "team": "desk"})))
    bundle = load_policy_bundle(config)
    ids = {name: [p.id for p in policies] for name, policies in bundle.sets.items()}
    assert ids["default"] == ["safety", "privacy", "compliance", "continuity"]
    assert ids["support"] == ["safety", "privacy", "continuity"]
    strict = {p.id: p for p in bundle.sets["strict"]}
    assert str(strict["safety"].thresholds["toxicity"]) == "0.05"
    assert str(strict["safety"].thresholds["harmful_intent"]) == "0.7"  # merged, not replaced
    assert {p.id: p for p in bundle.sets["analytics"]}["privacy"].restore_in_answer is False
    # key beats team beats default
    assert (bundle.set_of("alice"), bundle.set_of("bob"), bundle.set_of("carol")) == ("support", "strict", "default")
    assert bundle.teams == {"desk": "support"}


def test_a_default_set_overlays_the_files(tmp_path):
    config = load_config(write_config(tmp_path, policy_sets={"default": {"policies": {"continuity": {"enabled": False}}}}))
    assert [p.id for p in load_policy_bundle(config).sets["default"]] == ["safety", "privacy", "compliance"]


@pytest.mark.parametrize(("sets", "expected"), [
    ({"x": {"policies": {"privacy": {"restore_in_answer": "maybe"}}}},
     "policy_sets.x.policies.privacy.restore_in_answer: Input should be a valid boolean"),
    ({"x": {"policies": {"nope": {"enabled": False}}}},
     "policy_sets.x.policies.nope: no policy with this id (expected one of ['safety', 'privacy', 'compliance', "
     "'continuity'])"),
    ({"x": {"policies": {"safety": {"kind": "privacy"}}}},
     "policy_sets.x.policies: Value error, safety: a policy set cannot change a policy's 'kind'"),
    ({"x": {"policies": {"continuity": {"max_tokens": 0}}}},
     "policy_sets.x.policies.continuity.max_tokens: Input should be greater than 0"),
])
def test_an_invalid_set_names_the_file_and_the_key(tmp_path, sets, expected):
    path = write_config(tmp_path, policy_sets=sets)
    with pytest.raises(ConfigError) as error:
        load_policy_bundle(load_config(path))
    assert str(error.value).startswith(f"{path}: {expected}")


def test_detector_blocks_are_checked_without_loading_models(tmp_path):
    """The product registry checks a set's detector block with the detector's own config model."""

    registry = DetectorRegistry().register("privacy", lambda policy: None, config=lambda: PiiDetectorConfig)
    path = write_config(tmp_path, policy_sets={"x": {"policies": {"privacy": {"detector": {"score_threshold": 3}}}}})
    privacy = tmp_path / "policies" / "1-privacy.yaml"
    with pytest.raises(ConfigError) as error:  # the file's own block first: the fake policy names no entities
        load_policy_bundle(load_config(path), registry)
    assert str(error.value) == f"{privacy}: detector.entities: Field required"
    privacy.write_text(privacy.read_text().replace("detector: {}", "detector: {entities: [PERSON]}"))
    with pytest.raises(ConfigError) as error:
        load_policy_bundle(load_config(path), registry)
    assert str(error.value) == (f"{path}: policy_sets.x.policies.privacy.detector.score_threshold: "
                                "Input should be less than or equal to 1 (got 3)")
    path.write_text(path.read_text().replace("score_threshold: 3", "score_threshold: 0.3"))
    assert [p.detector for p in load_policy_bundle(load_config(path), registry).sets["x"] if p.id == "privacy"] == [
        {"entities": ["PERSON"], "score_threshold": 0.3}]


@pytest.mark.parametrize(("sections", "expected"), [
    ({"auth": keys_with(alice={"policy_set": "nope"})},
     "auth.keys.0.policy_set: unknown policy set 'nope' (expected one of ['default'])"),
    ({"auth": keys_with(alice={"team": "nope"})}, "auth.keys.0.team: unknown team 'nope' (expected one of [])"),
    ({"teams": {"desk": {"policy_set": "nope"}}},
     "teams.desk.policy_set: unknown policy set 'nope' (expected one of ['default'])"),
    ({"policy_sets": {"bad name!": {}}}, "policy_sets: Value error, name 'bad name!'"),
])
def test_config_references_are_checked_at_load(tmp_path, sections, expected):
    path = write_config(tmp_path, **sections)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value).startswith(f"{path}: {expected}")


def test_two_keys_of_one_actor_must_select_one_set(tmp_path):
    auth = keys_with(alice={"policy_set": "support"})
    auth["keys"].append({"key": "sk-test-alice-2-000000000000000000000", "actor": "alice"})
    path = write_config(tmp_path, policy_sets=SETS, auth=auth)
    with pytest.raises(ConfigError, match=r"auth.keys.3: actor 'alice' selects policy set 'default' but "
                                          r"auth.keys.0 \(same actor\) selects 'support'"):
        load_config(path)


def test_the_policy_version_hashes_content_not_formatting(tmp_path):
    config = load_config(write_config(tmp_path, policy_sets=SETS))
    directory = tmp_path / "policies"
    first = policy_version(load_policy_documents(directory), config)
    assert first.startswith("sha256:") and len(first) == 71
    safety = directory / "0-safety.yaml"
    safety.write_text("# a comment changes nothing\n" + safety.read_text())
    assert policy_version(load_policy_documents(directory), config) == first
    safety.write_text(safety.read_text().replace("Refused by policy.", "No."))
    second = policy_version(load_policy_documents(directory), config)
    assert second != first
    moved = load_config(write_config(tmp_path / "b", policy_sets=SETS, auth=keys_with(bob={"policy_set": "strict"})))
    write_policies(tmp_path / "b" / "policies")
    (tmp_path / "b" / "policies" / "0-safety.yaml").write_text(safety.read_text())
    assert policy_version(load_policy_documents(tmp_path / "b" / "policies"), moved) != second  # bob's set counts


class CountingFakes(FakeDetectors):
    """FakeDetectors whose factories build a fresh fake per call (so sharing is observable)."""

    def __init__(self) -> None:
        super().__init__()
        self.instances: list[Any] = []
        for kind, cls in (("safety", type(self.safety)), ("privacy", type(self.pii)), ("compliance", type(self.domain))):
            self.registry.register(kind, self._fresh(cls))

    def _fresh(self, cls: type) -> Any:
        def build(policy: Any) -> Any:
            self.built.append(policy.id)
            self.instances.append(cls())
            return self.instances[-1]
        return build


def builder_for(fakes: FakeDetectors) -> SnapshotBuilder:
    return SnapshotBuilder(count_words, registry=fakes.registry, apology_detector=FakeApology())


def test_sets_share_detectors_and_identical_sets_share_an_engine(tmp_path):
    sets = {**SETS, "same": {"policies": {}}, "domains": {"policies": {"compliance": {"detector": {"extra": 1}}}}}
    config = load_config(write_config(tmp_path, policy_sets=sets))
    fakes = CountingFakes()
    snapshot = builder_for(fakes).build(load_policy_bundle(config, fakes.registry))
    # one detector per distinct detector block: safety, privacy, compliance, and the patched compliance
    assert sorted(fakes.built) == ["compliance", "compliance", "privacy", "safety"]
    engines = snapshot.sets
    assert engines["same"].engine is engines["default"].engine
    assert engines["strict"].engine is not engines["default"].engine
    assert engines["strict"].engine.detectors["safety"] is engines["default"].engine.detectors["safety"]
    assert engines["domains"].engine.detectors["compliance"] is not engines["default"].engine.detectors["compliance"]
    assert {s.version for s in engines.values()} == {snapshot.version}


def test_a_forked_worker_takes_the_preloaded_snapshot_unless_the_files_changed(tmp_path, monkeypatch):
    # proxy.server.http.app.preload: a worker forked after a reload in its predecessor must serve the files
    from proxy.guardrails.detectors import embeddings
    from proxy.server.http.app import _load_snapshot

    monkeypatch.setattr(embeddings, "warm_up", lambda: None)  # fake detectors: no encoder to load
    path = write_config(tmp_path, policy_sets=SETS)
    fakes = CountingFakes()
    builder = builder_for(fakes)
    preloaded = _load_snapshot(load_config(path), builder)
    assert _load_snapshot(load_config(path), builder, preloaded) is preloaded
    edited = yaml.safe_load(path.read_text())
    edited["policy_sets"]["strict"]["policies"]["safety"]["thresholds"]["toxicity"] = "0.2"
    path.write_text(yaml.safe_dump(edited))
    now = _load_snapshot(load_config(path), builder, preloaded)
    assert now.version != preloaded.version
    assert str(now.sets["strict"].policies["safety"].thresholds["toxicity"]) == "0.2"
    assert sorted(fakes.built) == ["compliance", "privacy", "safety"]  # the preloaded detectors, reused


async def test_reload_applies_rejects_and_keeps_in_flight_requests_on_their_version(tmp_path):
    path = write_config(tmp_path, policy_sets=SETS, auth=keys_with(bob={"policy_set": "strict"}))
    config = load_config(path)
    fakes = CountingFakes()
    builder = builder_for(fakes)
    metrics = Metrics()
    runtime = PolicyRuntime.load(config, builder, metrics)
    first = runtime.current().version

    assert (await runtime.reload("api")).result == "unchanged"
    in_flight = runtime.bind("bob")  # a request that started before the edit
    assert in_flight.name == "strict" and str(in_flight.policies["safety"].thresholds["toxicity"]) == "0.05"

    edited = yaml.safe_load(path.read_text())
    edited["policy_sets"]["strict"]["policies"]["safety"]["thresholds"]["toxicity"] = "0.2"
    path.write_text(yaml.safe_dump(edited))
    outcome = await runtime.reload("api")
    assert (outcome.result, outcome.previous) == ("applied", first) and outcome.version != first
    assert str(in_flight.policies["safety"].thresholds["toxicity"]) == "0.05"  # the request keeps its set
    assert str(runtime.bind("bob").policies["safety"].thresholds["toxicity"]) == "0.2"  # a new request: new version
    assert sorted(fakes.built) == ["compliance", "privacy", "safety"]  # a threshold edit loaded no detector

    applied = runtime.current().version
    edited["policy_sets"]["strict"]["policies"]["safety"]["thresholds"]["toxicity"] = "two"
    path.write_text(yaml.safe_dump(edited))
    with pytest.raises(ConfigError) as at_start:  # what a start with this file reports
        load_policy_bundle(load_config(path), fakes.registry)
    rejected = await runtime.reload("api")
    assert (rejected.result, rejected.version, rejected.error) == ("rejected", applied, str(at_start.value))
    assert "policy_sets.strict.policies.safety.thresholds.toxicity" in rejected.error
    assert runtime.current().version == applied  # the old version keeps serving
    for result, count in (("applied", 1), ("unchanged", 1), ("rejected", 1)):
        assert metrics.registry.get_sample_value("sonate_policy_reloads_total", {"result": result}) == count


async def test_a_broken_policy_file_is_rejected_with_the_start_message(tmp_path):
    config = load_config(write_config(tmp_path))
    fakes = FakeDetectors()
    runtime = PolicyRuntime.load(config, builder_for(fakes), None)
    broken = tmp_path / "policies" / "1-privacy.yaml"
    broken.write_text(broken.read_text().replace("stages:", "stages: nope\nold_stages:"))
    outcome = await runtime.reload("signal")
    assert outcome.result == "rejected" and outcome.error.startswith(f"{broken}: ")
    with pytest.raises(ConfigError) as at_start:
        load_policy_bundle(load_config(config.source))
    assert outcome.error == str(at_start.value)


async def test_a_fixed_engine_cannot_be_reloaded():
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=FakeDetectors().registry)
    runtime = PolicyRuntime.fixed(engine)
    assert runtime.current().default.engine is engine
    assert (await runtime.reload("api")).result == "rejected"


@pytest.fixture
async def gateway(tmp_path, upstream):
    config = load_config(write_config(tmp_path, upstream.url, policy_sets=SETS,
                                      auth=keys_with(bob={"policy_set": "support"})))
    fakes = FakeDetectors()
    runtime = PolicyRuntime.load(config, builder_for(fakes))
    store = open_store(config.ledger_url)
    try:
        yield Gateway(config, runtime, Upstream(config), Ledger(store, Signer.generate()), Metrics())
    finally:
        await store.close()


async def chat(gateway: Gateway, actor: str, content: str):
    raw = {"model": "stub", "messages": [{"role": "user", "content": content}]}
    return await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), Caller(actor, "client"))


async def test_two_callers_get_their_own_sets_and_receipts_name_them(gateway, upstream):
    prompt = "Can you diagnose my rash?"  # the fake domain detector calls this regulated
    escalated = await chat(gateway, "alice", prompt)
    answered = await chat(gateway, "bob", prompt)
    assert (escalated.action, answered.action) == ("escalate", "allow")
    assert len(upstream.received()) == 1  # only bob's request reached the model
    head = await gateway.ledger.store.head()
    receipts = await gateway.ledger.store.range(0, head.height + 1)
    version = gateway.runtime.current().version
    assert [(r["actor"], r["guardrail_action"], r["evidence"]["policy_set"], r["evidence"]["policy_version"])
            for r in receipts] == [("alice", "escalate", "default", version), ("bob", "allow", "support", version)]
    assert receipts[1]["evidence"]["policies_evaluated"] == ["continuity", "privacy", "safety"]
    json.dumps(receipts)  # plain JSON


async def test_concurrent_requests_each_keep_their_own_set(gateway):
    results = await asyncio.gather(*(chat(gateway, actor, "Can you diagnose my rash?")
                                     for actor in ("alice", "bob", "alice", "bob")))
    assert [r.action for r in results] == ["escalate", "allow", "escalate", "allow"]


def test_only_kinds_registered_with_a_config_model_have_their_detector_block_checked():
    (policy,) = [p for p in POLICIES if p.kind == "privacy"]
    bad = policy.model_copy(update={"detector": {"entities": ["PERSON"], "score_threshold": 3}})
    registry = DetectorRegistry().register("privacy", lambda policy: None)
    assert registry.check(bad, "x.yaml") is None  # no config model: left to the factory
    registry.register("privacy", lambda policy: None, config=lambda: PiiDetectorConfig)
    with pytest.raises(ConfigError) as error:
        registry.check(bad, "x.yaml")
    assert str(error.value) == "x.yaml: detector.score_threshold: Input should be less than or equal to 1 (got 3)"
    registry.register("privacy", lambda policy: None)  # registered again without one: unchecked again
    assert registry.check(bad, "x.yaml") is None


async def test_a_reload_checks_detector_blocks_before_building_any_detector(tmp_path):
    """A bad ``detector:`` edit is rejected by the registry's check with the message a start gives,
    and no detector (no model) is built for it."""

    path = write_config(tmp_path)
    privacy = tmp_path / "policies" / "1-privacy.yaml"
    privacy.write_text(privacy.read_text().replace("detector: {}", "detector: {entities: [PERSON]}"))
    fakes = CountingFakes()
    fakes.registry.register("privacy", fakes._fresh(type(fakes.pii)), config=lambda: PiiDetectorConfig)
    runtime = PolicyRuntime.load(load_config(path), builder_for(fakes), None)
    built, version = list(fakes.built), runtime.current().version
    privacy.write_text(privacy.read_text().replace("entities: [PERSON]", "entities: [PERSON], score_threshold: 3"))
    outcome = await runtime.reload("api")
    assert (outcome.result, outcome.version) == ("rejected", version)
    assert outcome.error == f"{privacy}: detector.score_threshold: Input should be less than or equal to 1 (got 3)"
    assert fakes.built == built  # nothing was built for the rejected edit


# ---- what the admin API shows and what a reload reports ---------------------------------------

RFC3339_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"


def test_describe_lists_sets_policies_detectors_teams_and_assignments(tmp_path):
    config = load_config(write_config(tmp_path, policy_sets={"support": SETS["support"]},
                                      teams={"ops": {"policy_set": "support"}},
                                      auth=keys_with(bob={"policy_set": "support"}, carol={"team": "ops"})))
    fakes = FakeDetectors()
    snapshot = builder_for(fakes).build(load_policy_bundle(config, fakes.registry))
    safety = {"id": "safety", "kind": "safety", "stages": ["input", "output"], "detector": "fake-safety"}
    privacy = {"id": "privacy", "kind": "privacy", "stages": ["input", "output"], "detector": "fake-pii"}
    compliance = {"id": "compliance", "kind": "compliance", "stages": ["input"], "detector": "fake-domain"}
    continuity = {"id": "continuity", "kind": "continuity", "stages": ["input"], "detector": None}
    assert snapshot.describe() == {
        "policy_version": snapshot.version, "loaded_at": snapshot.loaded_at,
        "directory": str(tmp_path / "policies"),
        "policy_sets": {"default": {"description": "", "policies": [safety, privacy, compliance, continuity]},
                        "support": {"description": "no escalation", "policies": [safety, privacy, continuity]}},
        "teams": {"ops": "support"},
        "assignments": {"alice": "default", "bob": "support", "carol": "support"}}
    assert list(snapshot.describe()["policy_sets"]) == ["default", "support"]
    assert len(snapshot.engines()) == 2 and snapshot.engines()[0] is snapshot.sets["default"].engine


def test_a_fixed_engine_describes_itself_without_files_and_has_its_files_version(tmp_path):
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=FakeDetectors().registry)
    snapshot = PolicyRuntime.fixed(engine).current()
    assert snapshot.version == policy_version(load_policy_documents(write_policies(tmp_path)), None)
    assert snapshot.default.name == "default" and snapshot.default.version == snapshot.version
    assert snapshot.for_actor("anyone") is snapshot.default
    described = snapshot.describe()
    assert (described["directory"], described["teams"], described["assignments"]) == (None, {}, {})
    assert described["policy_sets"]["default"]["description"] == ""
    assert re.fullmatch(RFC3339_UTC, described["loaded_at"])
    other = GuardrailEngine(POLICIES[:2], count_tokens=count_words, registry=FakeDetectors().registry)
    assert PolicyRuntime.fixed(other).current().version != snapshot.version


def test_a_reload_outcome_body_names_result_versions_and_the_error():
    assert ReloadOutcome("applied", "v2", "v1").body() == {
        "result": "applied", "policy_version": "v2", "previous_version": "v1"}
    assert ReloadOutcome("rejected", "v1", "v1", "bad key").body() == {
        "result": "rejected", "policy_version": "v1", "previous_version": "v1", "error": "bad key"}


async def test_every_reload_outcome_carries_both_versions(tmp_path):
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=FakeDetectors().registry)
    fixed = PolicyRuntime.fixed(engine)
    version = fixed.current().version
    outcome = await fixed.reload("api")
    assert (outcome.result, outcome.version, outcome.previous) == ("rejected", version, version)
    assert outcome.error == "this proxy serves a fixed engine; nothing to reload"

    path = write_config(tmp_path, policy_sets=SETS)
    metrics = Metrics()
    runtime = PolicyRuntime.load(load_config(path), builder_for(FakeDetectors()), metrics)
    first = runtime.current().version
    loaded = metrics.registry.get_sample_value("sonate_policy_loaded_timestamp_seconds")
    assert (await runtime.reload("api")).body() == {
        "result": "unchanged", "policy_version": first, "previous_version": first}
    edited = yaml.safe_load(path.read_text())
    edited["policy_sets"]["strict"]["policies"]["safety"]["thresholds"]["toxicity"] = "0.2"
    path.write_text(yaml.safe_dump(edited))
    time.sleep(0.01)
    applied = await runtime.reload("api")
    assert (applied.result, applied.version, applied.previous) == ("applied", runtime.current().version, first)
    assert metrics.registry.get_sample_value("sonate_policy_loaded_timestamp_seconds") > loaded
    edited["policy_sets"]["strict"]["policies"]["safety"]["thresholds"]["toxicity"] = "two"
    path.write_text(yaml.safe_dump(edited))
    rejected = await runtime.reload("api")
    assert (rejected.result, rejected.version, rejected.previous) == ("rejected", applied.version, applied.version)


async def test_a_detector_that_fails_to_build_rejects_the_reload_with_its_error(tmp_path):
    path = write_config(tmp_path, policy_sets=SETS)
    fakes = CountingFakes()
    runtime = PolicyRuntime.load(load_config(path), builder_for(fakes), None)

    def broken(policy: Any) -> Any:
        raise RuntimeError("model file missing")

    fakes.registry.register("compliance", broken)
    edited = yaml.safe_load(path.read_text())
    edited["policy_sets"]["domains"] = {"policies": {"compliance": {"detector": {"extra": 1}}}}
    path.write_text(yaml.safe_dump(edited))
    outcome = await runtime.reload("watch")
    assert outcome.result == "rejected"
    assert outcome.error == "the new policy version could not be loaded: RuntimeError: model file missing"


def test_a_builder_warms_new_engines_and_reuses_them_across_builds(tmp_path):
    config = load_config(write_config(tmp_path))
    fakes = FakeDetectors()
    apology = FakeApology()
    builder = SnapshotBuilder(count_words, registry=fakes.registry, apology_detector=apology)
    first = builder.build(load_policy_bundle(config, fakes.registry))
    assert any("Hello, my name is Ada" in text for call in fakes.safety.calls for text in call)  # warmed
    assert first.default.engine.apology_detector is apology
    assert re.fullmatch(RFC3339_UTC, first.loaded_at)
    calls = len(fakes.safety.calls)
    again = builder.build(load_policy_bundle(config, fakes.registry))
    assert again.default.engine is first.default.engine and len(fakes.safety.calls) == calls  # reused, not warmed
    cold = FakeDetectors()
    SnapshotBuilder(count_words, registry=cold.registry, warm=False).build(load_policy_bundle(config, cold.registry))
    assert cold.safety.calls == []


def test_watched_files_are_the_config_and_the_policy_files(tmp_path):
    path = write_config(tmp_path)
    (tmp_path / "policies" / "notes.txt").write_text("not a policy")
    runtime = PolicyRuntime.load(load_config(path), builder_for(FakeDetectors()), None)
    directory = tmp_path / "policies"
    files = sorted(directory.glob("*.yaml"))
    assert runtime.watched_files() == [path, *files] and len(files) == len(POLICIES)
    engine = GuardrailEngine(POLICIES, count_tokens=count_words, registry=FakeDetectors().registry)
    assert PolicyRuntime.fixed(engine).watched_files() == []

    before = file_signature(runtime.watched_files(), directory)
    listing, stats = before
    assert listing == tuple(f.name for f in files)
    assert stats[0] == (str(path), path.stat().st_mtime_ns, path.stat().st_size)
    assert file_signature([tmp_path / "gone.yaml"], None) == ((), ((str(tmp_path / "gone.yaml"), None, None),))
    assert file_signature([], tmp_path / "absent") == ((), ())
    (directory / "9-extra.yml").write_text("x: 1")
    assert file_signature(runtime.watched_files(), directory)[0] == (*listing, "9-extra.yml")
    edited = file_signature([files[0]], None)
    files[0].write_text(files[0].read_text() + "\n# edited\n")
    assert file_signature([files[0]], None) != edited  # the size changed


def _disable_safety(tmp_path: Path) -> None:
    """Edit the safety policy file so that the set drops it."""
    safety = tmp_path / "policies" / "0-safety.yaml"
    safety.write_text(safety.read_text().replace("enabled: true", "enabled: false"))


async def _reloaded(runtime: PolicyRuntime, first: str, timeout: float = 5.0) -> None:
    """Wait (at most ``timeout`` s) until the runtime serves another version than ``first``."""
    for _ in range(int(timeout / 0.01)):
        if runtime.current().version != first:
            return
        await asyncio.sleep(0.01)


async def test_an_edited_policy_file_is_reloaded_by_the_watcher(tmp_path):
    path = write_config(tmp_path, policy_sets=SETS)
    runtime = PolicyRuntime.load(load_config(path), builder_for(FakeDetectors()), None)
    first = runtime.current().version
    watcher = asyncio.create_task(watch_files(runtime, 0.01))
    try:
        await asyncio.sleep(0.05)
        assert runtime.current().version == first  # nothing changed: no reload
        _disable_safety(tmp_path)
        await _reloaded(runtime, first)
        assert "safety" not in runtime.current().default.policies
    finally:
        watcher.cancel()


async def test_a_watched_fixed_engine_keeps_serving_and_never_reloads():
    fixed = PolicyRuntime.fixed(GuardrailEngine(POLICIES, count_tokens=count_words,
                                                registry=FakeDetectors().registry))
    version = fixed.current().version
    watcher = asyncio.create_task(watch_files(fixed, 0.01))
    try:
        await asyncio.sleep(0.05)
        assert not watcher.done() and fixed.current().version == version
    finally:
        watcher.cancel()


async def test_a_config_without_a_file_reloads_only_the_policy_directory(tmp_path):
    config = load_config(write_config(tmp_path)).model_copy(update={"source": None})
    runtime = PolicyRuntime.load(config, builder_for(FakeDetectors()), None)
    first = runtime.current().version
    _disable_safety(tmp_path)
    outcome = await runtime.reload("api")
    assert (outcome.result, outcome.previous) == ("applied", first)
    assert runtime.current().bundle.directory == tmp_path / "policies"
    assert "safety" not in runtime.current().default.policies


async def test_the_watcher_reloads_once_per_edit(tmp_path, caplog):
    path = write_config(tmp_path, policy_sets=SETS)
    metrics = Metrics()
    runtime = PolicyRuntime.load(load_config(path), builder_for(FakeDetectors()), metrics)
    first = runtime.current().version
    with caplog.at_level("INFO", logger="sonate.policies"):
        watcher = asyncio.create_task(watch_files(runtime, 0.01))
        try:
            await asyncio.sleep(0.05)
            safety = tmp_path / "policies" / "0-safety.yaml"
            edited = tmp_path / "policies" / "0-safety.edit"  # written whole, then swapped in: one change
            edited.write_text(safety.read_text().replace("enabled: true", "enabled: false"))
            edited.replace(safety)
            await _reloaded(runtime, first)
            await asyncio.sleep(0.1)  # ten more rounds with nothing changed
        finally:
            watcher.cancel()
    reloads = {result: metrics.registry.get_sample_value("sonate_policy_reloads_total", {"result": result})
               for result in ("applied", "unchanged", "rejected")}
    assert reloads == {"applied": 1.0, "unchanged": None, "rejected": None}
    assert any(m.startswith("policy reload (watch): version ") for m in caplog.messages)


async def test_sighup_reloads_the_policies(tmp_path, caplog):
    path = write_config(tmp_path)
    runtime = PolicyRuntime.load(load_config(path), builder_for(FakeDetectors()), None)
    first = runtime.current().version
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    assert install_sighup(runtime, loop) is True
    try:
        with caplog.at_level("INFO", logger="sonate.policies"):
            _disable_safety(tmp_path)
            os.kill(os.getpid(), signal.SIGHUP)
            await _reloaded(runtime, first)
            await asyncio.sleep(0.01)  # the reload task's done callbacks run
        assert "safety" not in runtime.current().default.policies
        assert any(m.startswith("policy reload (signal): version ") for m in caplog.messages)
        assert errors == []
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        loop.set_exception_handler(None)


def test_sighup_is_not_installed_outside_the_main_thread(tmp_path):
    runtime = PolicyRuntime.load(load_config(write_config(tmp_path)), builder_for(FakeDetectors()), None)
    installed: list[bool] = []
    loop = asyncio.new_event_loop()
    try:
        worker = threading.Thread(target=lambda: installed.append(install_sighup(runtime, loop)))
        worker.start()
        worker.join()
    finally:
        loop.close()
    assert installed == [False]


def test_the_first_load_checks_detector_blocks_before_building_any_detector(tmp_path):
    """PolicyRuntime.load validates with the builder's registry: a bad ``detector:`` block stops the
    start with the registry's message, before any detector (model) is built."""

    path = write_config(tmp_path)
    privacy = tmp_path / "policies" / "1-privacy.yaml"
    privacy.write_text(privacy.read_text().replace("detector: {}", "detector: {entities: [PERSON], score_threshold: 3}"))
    fakes = CountingFakes()
    fakes.registry.register("privacy", fakes._fresh(type(fakes.pii)), config=lambda: PiiDetectorConfig)
    with pytest.raises(ConfigError) as error:
        PolicyRuntime.load(load_config(path), builder_for(fakes), None)
    assert str(error.value) == f"{privacy}: detector.score_threshold: Input should be less than or equal to 1 (got 3)"
    assert fakes.built == []
