"""The policies a running proxy serves: one immutable, versioned snapshot, swapped whole on reload.

A :class:`PolicySnapshot` holds the policy version (:func:`proxy.guardrails.policy_sets.policy_version`),
when it was loaded, and one :class:`ActivePolicySet` (name + :class:`GuardrailEngine`) per policy
set. :class:`PolicyRuntime` holds the current snapshot:

- **Per request**: :meth:`PolicyRuntime.bind` picks the caller's set from the current snapshot at
  the start of a request and keeps it in a context variable for the rest of that request (the
  aiohttp handler's task), so a request that started before a swap finishes on its version, and
  every step of it (input screen, stream windows, receipts) uses the same engine.
- **Reload** (:meth:`PolicyRuntime.reload`; SIGHUP, ``POST /v1/admin/policies/reload`` or the file
  watch of :func:`watch_files`): config.yaml and the policy directory are read and validated, and
  the new engines built with their models loaded, in a worker thread (the event loop keeps
  serving); only then is the snapshot swapped. An invalid edit raises the same ConfigError as at
  start (file, key, expectation): it is logged, counted in ``sonate_policy_reloads_total{result="rejected"}``
  and returned, and the old version keeps serving. Detectors are built once per distinct
  ``detector:`` block (:class:`proxy.guardrails.registry.DetectorPool`) and engines once per distinct
  effective policy list, across sets and across reloads: a reload that changes one threshold
  loads no model. Only the policy part of the config is applied by a reload (``policy_sets``,
  ``teams``, the keys' ``policy_set`` / ``team``, ``policies``); keys, routes and the rest
  need a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from proxy.config import DEFAULT_POLICY_SET, Config, ConfigError, load_config
from proxy.guardrails.detectors.embeddings import limit_blas_threads
from proxy.guardrails.engine import GuardrailEngine
from proxy.guardrails.policy_sets import PolicyBundle, load_policy_bundle, policy_version
from proxy.guardrails.registry import DetectorPool, DetectorRegistry, default_registry
from proxy.guardrails.schema import PolicyDocument
from proxy.receipts.receipt import utc_timestamp
from proxy.server.telemetry.metrics import Metrics

__all__ = ["ActivePolicySet", "PolicyRuntime", "PolicySnapshot", "ReloadOutcome", "SnapshotBuilder",
           "watch_files"]

log = logging.getLogger("sonate.policies")

#: The greeting every new engine screens once before it serves (models warm, lazy imports done).
WARM_UP_MESSAGES = [{"role": "user", "content": "Hello, my name is Ada. What is 2 + 2?"}]


@dataclass(frozen=True)
class ActivePolicySet:
    """One policy set of a snapshot: its ``name``, the snapshot's ``version`` and its ``engine``."""

    name: str
    version: str
    engine: GuardrailEngine
    policies: dict[str, Any] = field(default_factory=dict)
    """policy id → policy, of ``engine``."""

    def evidence(self) -> dict[str, str]:
        """The receipt evidence naming this set: ``{"policy_set", "policy_version"}``."""
        return {"policy_set": self.name, "policy_version": self.version}


@dataclass(frozen=True)
class PolicySnapshot:
    """Everything one policy version serves: ``version``, ``loaded_at`` (RFC 3339 UTC), the
    validated ``bundle`` (None for a fixed engine) and ``sets`` (name → :class:`ActivePolicySet`)."""

    version: str
    loaded_at: str
    sets: dict[str, ActivePolicySet]
    bundle: PolicyBundle | None = None

    @property
    def default(self) -> ActivePolicySet:
        """The ``default`` set."""
        return self.sets[DEFAULT_POLICY_SET]

    def for_actor(self, actor: str) -> ActivePolicySet:
        """The set of ``actor`` (its key's, its team's, else ``default``)."""
        name = self.bundle.set_of(actor) if self.bundle is not None else DEFAULT_POLICY_SET
        return self.sets.get(name, self.default)

    def engines(self) -> list[GuardrailEngine]:
        """The distinct engines of the snapshot (sets with the same policies share one)."""
        return list({id(s.engine): s.engine for s in self.sets.values()}.values())

    def describe(self) -> dict[str, Any]:
        """The ``GET /v1/admin/policies`` view: version, load time, sets (policies, detectors), teams
        and the actor → set assignments (actor names only, never a key)."""
        bundle = self.bundle
        sets = {}
        for name, active in sorted(self.sets.items()):
            engine = active.engine
            sets[name] = {
                "description": bundle.descriptions.get(name, "") if bundle else "",
                "policies": [{"id": p.id, "kind": p.kind, "stages": list(p.stages),
                              "detector": getattr(engine.detectors.get(p.id), "name", None)}
                             for p in engine.policies],
            }
        return {"policy_version": self.version, "loaded_at": self.loaded_at,
                "directory": str(bundle.directory) if bundle else None, "policy_sets": sets,
                "teams": dict(sorted(bundle.teams.items())) if bundle else {},
                "assignments": dict(sorted(bundle.assignments.items())) if bundle else {}}


def _engine_key(policies: list[Any]) -> str:
    """What an engine depends on: its effective policies as canonical JSON."""
    return json.dumps([p.model_dump(mode="json") for p in policies], sort_keys=True, default=str)


class SnapshotBuilder:
    """Builds snapshots from bundles, reusing detectors (:class:`DetectorPool`) and engines.

    ``count_tokens`` and ``apology_detector`` are handed to every engine; ``warm`` screens
    :data:`WARM_UP_MESSAGES` with each new engine (models loaded, caches primed). CPU- and
    I/O-bound: call :meth:`build` in a worker thread. Raises what the detector factories raise.
    """

    def __init__(self, count_tokens: Callable[..., int], *, registry: DetectorRegistry | None = None,
                 apology_detector: Any = None, warm: bool = True) -> None:
        self.registry = registry or default_registry()
        self.pool = DetectorPool(self.registry)
        self.count_tokens = count_tokens
        self.apology_detector = apology_detector
        self.warm = warm
        self._engines: dict[str, GuardrailEngine] = {}
        self._lock = threading.Lock()

    def build(self, bundle: PolicyBundle) -> PolicySnapshot:
        """A snapshot of ``bundle``: one engine per distinct effective policy list. Caps the BLAS
        libraries the models loaded at one thread per call
        (:func:`~proxy.guardrails.detectors.embeddings.limit_blas_threads`)."""
        with self._lock:
            engines: dict[str, GuardrailEngine] = {}
            sets = {}
            for name, policies in bundle.sets.items():
                key = _engine_key(policies)
                engine = engines.get(key) or self._engines.get(key)
                if engine is None:
                    engine = GuardrailEngine(policies, count_tokens=self.count_tokens, registry=self.registry,
                                             detectors=self.pool.detectors_for(policies),
                                             apology_detector=self.apology_detector)
                    if self.warm:
                        engine.screen_input(WARM_UP_MESSAGES)
                engines[key] = engine
                sets[name] = ActivePolicySet(name, bundle.version, engine, {p.id: p for p in policies})
            self._engines = engines  # engines of older snapshots live on while their requests finish
            self.pool.retain([p for policies in bundle.sets.values() for p in policies])
            limit_blas_threads()  # the models' BLAS libraries are loaded by now
            return PolicySnapshot(bundle.version, utc_timestamp(), sets, bundle)


@dataclass(frozen=True)
class ReloadOutcome:
    """What a reload did: ``result`` (``applied``, ``unchanged`` or ``rejected``), the version now
    serving, the one before, and the ``error`` message (file, key, expectation) when rejected."""

    result: str
    version: str
    previous: str
    error: str | None = None

    def body(self) -> dict[str, Any]:
        """The JSON of ``POST /v1/admin/policies/reload``."""
        out = {"result": self.result, "policy_version": self.version, "previous_version": self.previous}
        return {**out, "error": self.error} if self.error else out


class PolicyRuntime:
    """The serving snapshot and its replacement (see the module docstring).

    ``config``: the config the proxy started with (a reload re-reads ``config.source`` when set,
    else only the policy directory); ``builder``: the :class:`SnapshotBuilder`; ``snapshot``: the
    first snapshot (already built); ``metrics``: where the reload metrics go
    (``policy_reloads``, ``policy_loaded`` of :class:`proxy.server.telemetry.metrics.Metrics`; None: no metrics).
    """

    def __init__(self, config: Config | None, builder: SnapshotBuilder | None, snapshot: PolicySnapshot,
                 metrics: Metrics | None = None) -> None:
        self.config = config
        self.builder = builder
        self._current = snapshot
        self._lock = asyncio.Lock()
        self.metrics = metrics
        if self.metrics is not None:
            self.metrics.policy_loaded.set(time.time())

    @classmethod
    def load(cls, config: Config, builder: SnapshotBuilder, metrics: Metrics | None = None) -> "PolicyRuntime":
        """Validate and build the first snapshot (blocking: models load). Raises ConfigError
        (file, key, expectation) for invalid policies or sets, the factories' errors otherwise."""
        snapshot = builder.build(load_policy_bundle(config, builder.registry))
        return cls(config, builder, snapshot, metrics)

    @classmethod
    def fixed(cls, engine: GuardrailEngine) -> "PolicyRuntime":
        """A runtime serving ``engine`` as its only (``default``) set; :meth:`reload` is refused."""
        documents = [PolicyDocument(Path(p.id), p.model_dump(mode="json"), p) for p in engine.policies]
        version = policy_version(documents, None)
        active = ActivePolicySet(DEFAULT_POLICY_SET, version, engine, {p.id: p for p in engine.policies})
        return cls(None, None, PolicySnapshot(version, utc_timestamp(), {DEFAULT_POLICY_SET: active}))

    def current(self) -> PolicySnapshot:
        """The snapshot new requests start on."""
        return self._current

    def bind(self, actor: str) -> ActivePolicySet:
        """``actor``'s set in the current snapshot: a request picks it once, on acceptance, and
        carries it to its end (a reload meanwhile does not change it)."""
        return self._current.for_actor(actor)

    def _prepare(self) -> PolicySnapshot:
        """Read, validate and build the next snapshot (in a worker thread). Raises ConfigError."""
        assert self.builder is not None
        config = self.config
        if config is not None and config.source is not None:
            config = load_config(config.source)
        return self.builder.build(load_policy_bundle(config, self.builder.registry))

    async def reload(self, trigger: str) -> ReloadOutcome:
        """Load the policies again and swap them in when valid (one reload at a time).

        ``trigger`` (``signal``, ``api``, ``watch``) is logged. Never raises for a bad edit: the
        outcome says ``rejected`` with the error message, and the old version keeps serving.
        """
        async with self._lock:
            before = self._current
            if self.builder is None:
                return self._count(ReloadOutcome("rejected", before.version, before.version,
                                                 "this proxy serves a fixed engine; nothing to reload"))
            try:
                snapshot = await asyncio.to_thread(self._prepare)
            except ConfigError as exc:
                message = str(exc)
            except Exception as exc:  # a model that fails to load must not stop serving
                log.exception("policy reload (%s): building the new version failed", trigger)
                message = f"the new policy version could not be loaded: {type(exc).__name__}: {exc}"
            else:
                if snapshot.version == before.version:
                    log.info("policy reload (%s): version %s unchanged", trigger, before.version)
                    return self._count(ReloadOutcome("unchanged", before.version, before.version))
                self._current = snapshot
                if self.metrics is not None:
                    self.metrics.policy_loaded.set(time.time())
                log.info("policy reload (%s): version %s replaces %s (sets: %s)", trigger, snapshot.version,
                         before.version, ", ".join(sorted(snapshot.sets)))
                return self._count(ReloadOutcome("applied", snapshot.version, before.version))
            log.error("policy reload (%s) rejected; version %s keeps serving:\n%s", trigger, before.version, message)
            return self._count(ReloadOutcome("rejected", before.version, before.version, message))

    def _count(self, outcome: ReloadOutcome) -> ReloadOutcome:
        if self.metrics is not None:
            self.metrics.policy_reloads.labels(outcome.result).inc()
        return outcome

    def watched_files(self) -> list[Path]:
        """The files a change of which reloads: config.yaml (when known) and the policy files."""
        snapshot = self._current
        files = [self.config.source] if self.config is not None and self.config.source else []
        if snapshot.bundle is not None:
            directory = snapshot.bundle.directory
            files += sorted(directory.glob("*.y*ml")) if directory.is_dir() else []
        return files


def file_signature(paths: list[Path], directory: Path | None) -> tuple[Any, ...]:
    """(name, mtime ns, size) of each path and the directory's listing: changes when a file is
    edited, added or removed."""
    listing = tuple(sorted(p.name for p in directory.glob("*.y*ml"))) if directory and directory.is_dir() else ()
    stats: list[tuple[str, int | None, int | None]] = []
    for path in paths:
        try:
            st = os.stat(path)
            stats.append((str(path), st.st_mtime_ns, st.st_size))
        except OSError:
            stats.append((str(path), None, None))
    return (listing, tuple(stats))


async def watch_files(runtime: PolicyRuntime, interval: float) -> None:
    """Poll the watched files every ``interval`` seconds; reload when their signature changes.

    A rejected edit is not retried until a file changes again. Runs until cancelled.
    """
    def signature() -> tuple[Any, ...]:
        bundle = runtime.current().bundle
        return file_signature(runtime.watched_files(), bundle.directory if bundle else None)

    seen = signature()
    while True:
        await asyncio.sleep(interval)
        now = signature()
        if now != seen:
            seen = now  # an edit landing while the reload reads changes the signature again: reloaded next round
            await runtime.reload("watch")


def install_sighup(runtime: PolicyRuntime, loop: asyncio.AbstractEventLoop) -> bool:
    """Reload on SIGHUP (the main thread's loop only); False when signals cannot be handled here."""
    tasks: set[asyncio.Task[Any]] = set()

    def on_signal() -> None:
        task = loop.create_task(runtime.reload("signal"))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_signal)
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):  # not the main thread, or no SIGHUP
        return False
    return True
