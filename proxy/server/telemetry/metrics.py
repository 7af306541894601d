"""Prometheus instruments: the one place that defines every ``sonate_`` series.

Naming follows Prometheus conventions (docs/architecture.md "Metric conventions"): prefix
``sonate_``, base units in the name, counters end in ``_total``, low-cardinality labels only (never a user, key or prompt).
Counters are raw material; ratios (FAR-A, RC, AD, TIS...) are recording rules in
``deploy/prometheus/`` and KPI code in ``proxy.kpi``.

KPI inputs exported here:
- FAR-A denominator: ``sonate_interactions_total``; numerator candidates:
  ``sonate_apologies_total{source="guardrail"|"model"}`` (to be adjudicated).
- Receipt Coverage (RC): ``sonate_receipts_written_total`` / ``sonate_actions_total``.
- Audit Depth (AD): ``sonate_evidence_fields_present_total`` / ``sonate_evidence_fields_required_total``.
- Ledger Verification Pass rate (LVP): ``sonate_ledger_verifications_total{result="pass"}`` / all results.

Several serving processes (``server.workers`` > 1, :mod:`proxy.server.admission.workers`): the supervisor
gives every worker the same per-run ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's
multiprocess mode: each process writes its values to memory-mapped files there) and ``/metrics``,
whichever worker answers it, renders the whole set: counters and histograms summed over every
worker of the run (a restarted worker's predecessor included), gauges by their
``multiprocess_mode`` (named at each gauge below).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

#: The environment variable naming prometheus_client's multiprocess directory (read by the library at import).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Latency buckets in seconds: sub-millisecond guardrail overhead up to minute-long generations.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """All instruments, registered in their own registry (one per app; tests run several)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        """Create the registry and every instrument in it (grouped by concern below)."""
        self.registry = CollectorRegistry()
        self._traffic(self.registry)
        self._adjudication(self.registry)
        self._ledger(self.registry)
        self._policies(self.registry)

    def _traffic(self, r: CollectorRegistry) -> None:
        """Requests, guardrail actions, receipts, evidence, latency, tokens and cost."""
        self.requests = Counter(
            "sonate_requests", "HTTP API requests by route and result class (ok, client_error, "
            "auth_error, upstream_error, ledger_error, rate_limited, overloaded, guardrail_error, server_error).",
            ["route", "result"], registry=r)
        self.interactions = Counter(
            "sonate_interactions", "Chat interactions answered (FAR-A denominator).",
            ["model", "provider", "domain", "stratum"], registry=r)
        self.apologies = Counter(
            "sonate_apologies", "Apologies returned to clients: source=guardrail (policy refusal) or "
            "model (model-initiated apology detected in the output). FAR-A numerator candidates.",
            ["source", "policy_id", "domain", "stratum"], registry=r)
        self.guardrail_triggers = Counter(
            "sonate_guardrail_triggers", "Policies that fired, including ones pre-empted by a "
            "stronger action.", ["policy_id", "action", "stage"], registry=r)
        self.actions = Counter(
            "sonate_actions", "Guardrail actions performed (allow included); RC denominator.",
            ["action"], registry=r)
        self.receipts_written = Counter(
            "sonate_receipts_written", "Receipts durably appended to a ledger (ledger: the receipt's "
            "ledger name, default when the deployment has one); RC numerator.",
            ["action", "ledger"], registry=r)
        self.evidence_required = Counter(
            "sonate_evidence_fields_required", "Evidence fields policies require in receipts "
            "(AD denominator).", ["policy_id"], registry=r)
        self.evidence_present = Counter(
            "sonate_evidence_fields_present", "Required evidence fields present in receipts "
            "(AD numerator).", ["policy_id"], registry=r)
        self.escalations_pending = Gauge(
            "sonate_escalations_pending", "Escalated cases waiting for a human reviewer "
            "(net of the escalations and resolutions made since start, by every worker).",
            multiprocess_mode="sum", registry=r)
        self.request_duration = Histogram(
            "sonate_request_duration_seconds", "Wall time of a chat completion request in the proxy.",
            ["model", "action"], buckets=LATENCY_BUCKETS, registry=r)
        self.upstream_duration = Histogram(
            "sonate_upstream_duration_seconds", "Wall time of provider calls through litellm.",
            ["model", "provider"], buckets=LATENCY_BUCKETS, registry=r)
        self.overhead_duration = Histogram(
            "sonate_overhead_duration_seconds", "Request time spent outside provider calls "
            "(guardrails, ledger, serialisation).", ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.guardrail_duration = Histogram(
            "sonate_guardrail_duration_seconds", "Time in guardrail evaluation per stage.",
            ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.guardrail_screens = Counter(
            "sonate_guardrail_screens", "Guardrail screens admitted to a thread lane (lane=small|large: "
            "work of at least server.limits.large_input_chars characters or large_input_pieces texts).",
            ["lane"], registry=r)
        self.guardrail_lane_busy = Gauge(
            "sonate_guardrail_lane_busy", "Screens a guardrail lane holds now, running or queued (a timed-out "
            "screen until its thread stops at a pause point).", ["lane"], multiprocess_mode="livesum", registry=r)
        self.ledger_append_duration = Histogram(
            "sonate_ledger_append_duration_seconds", "Time to durably append one request's receipts.",
            buckets=LATENCY_BUCKETS, registry=r)
        self.time_to_first_token = Histogram(
            "sonate_time_to_first_token_seconds", "Provider time to first streamed token.",
            ["model", "provider"], buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter(
            "sonate_tokens", "Tokens reported by the provider (type=prompt|completion).",
            ["model", "provider", "type"], registry=r)
        self.cost = Counter(
            "sonate_cost_usd", "Provider cost in US dollars from litellm's price map (0 when unknown).",
            ["model", "provider"], registry=r)

    def _adjudication(self, r: CollectorRegistry) -> None:
        """Adjudication (methodology "Adjudication"; proxy.kpi.adjudication, proxy.server.flow.review.adjudication)."""
        self.review_items_queued = Counter(
            "sonate_review_items_queued", "Interactions queued for blind two-pass adjudication, by "
            "reason: apology (refusal or model apology), trigger (guardrail acted), sample (random "
            "sample of allowed requests, for false negatives). An item may have several reasons.",
            ["reason"], registry=r)
        self.adjudication_verdicts = Counter(
            "sonate_adjudication_verdicts", "Adjudication verdicts recorded, by pass (A, B, lead) "
            "and domain; each is receipted (guardrail_action=adjudicate).", ["pass", "domain"], registry=r)
        self.adjudicated_items = Counter(
            "sonate_adjudicated_items", "Items whose adjudication became final (both passes agreed "
            "or the lead resolved), by reason and domain.", ["reason", "domain"], registry=r)
        self.unnecessary_apologies = Counter(
            "sonate_unnecessary_apologies", "Apologies adjudicated unnecessary (no verified policy "
            "breach, intent permissible, content non-harmful): the FAR-A numerator. "
            "source=guardrail|model.", ["source", "domain", "stratum"], registry=r)
        self.guardrail_misfires = Counter(
            "sonate_guardrail_misfires", "Guardrail misfires confirmed by adjudication: "
            "type=false_positive (acted without a verified breach) or false_negative (a sampled "
            "allowed request with a breach); the GA numerator. policy_id: the policy that acted (false "
            "positive) or a reviewer's expected_policy_id when it names a loaded policy, else other|none "
            "(false negative).", ["type", "policy_id", "domain"], registry=r)

    def _policies(self, r: CollectorRegistry) -> None:
        """Policy hot reload (:class:`proxy.server.flow.policy_runtime.PolicyRuntime`)."""
        self.policy_reloads = Counter(
            "sonate_policy_reloads", "Policy reloads by result: applied, unchanged, rejected (invalid edit or "
            "model load failure; the old version keeps serving).", ["result"], registry=r)
        self.policy_loaded = Gauge(
            "sonate_policy_loaded_timestamp_seconds", "Unix time the serving policy version was loaded.",
            multiprocess_mode="max", registry=r)

    def _ledger(self, r: CollectorRegistry) -> None:
        """Ledger fault policy and audit (proxy.server.admission.sink, proxy.receipts.audit; docs/operations.md
        "Fault policy") and the transparency log (proxy.server.admission.publisher, proxy.server.http.routes.ledger)."""
        self.spool_depth = Gauge(
            "sonate_spool_depth", "Receipts waiting in this process's local spool for the ledger "
            "(ledger.on_unavailable: spool; summed over live workers); 0 when the ledger is keeping up.",
            multiprocess_mode="livesum", registry=r)
        self.spool_replayed = Counter(
            "sonate_spool_replayed", "Spooled receipts replayed into the ledger once it was back "
            "(they count in sonate_receipts_written_total at that moment).", registry=r)
        self.spool_quarantined = Counter(
            "sonate_spool_quarantined", "Spooled receipts the ledger refused for good (e.g. a receipt_id "
            "already used by other content), moved to a quarantine file for an operator; should stay 0.",
            registry=r)
        self.ledger_verifications = Counter(
            "sonate_ledger_verifications", "Receipts re-verified by the ledger audit job, by result: pass, "
            "fail_schema, fail_key (unknown key or outside its validity window), fail_signature, "
            "fail_chain (prev_hash/height link to the previous receipt or the head), fail_inclusion "
            "(Merkle inclusion in the latest checkpoint). LVP = pass / all (TIS component).",
            ["result"], registry=r)
        self.ledger_checkpoints_published = Counter(
            "sonate_ledger_checkpoints_published", "Signed checkpoints (C2SP tlog-checkpoint) this "
            "process published or found already published by another process for a new tree size, "
            "per ledger (ledger.partition; 'default' when there is one).",
            ["ledger"], registry=r)
        self.ledger_checkpoint_tree_size = Gauge(
            "sonate_ledger_checkpoint_tree_size", "Tree size (receipts) of the latest checkpoint this "
            "process (the largest over workers) published, per ledger; compare with the ledger height to see "
            "checkpoint lag.", ["ledger"], multiprocess_mode="max", registry=r)

    def lane_changed(self, lane: str, delta: int) -> None:
        """A guardrail lane took (``delta`` 1) or gave back (-1) a screen
        (:class:`proxy.server.admission.limits.ScreenLanes` ``on_change``)."""
        if delta > 0:
            self.guardrail_screens.labels(lane).inc()
        self.guardrail_lane_busy.labels(lane).inc(delta)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series: this process's, or, in multiprocess mode
        (``$PROMETHEUS_MULTIPROC_DIR`` set), every worker's of the run aggregated (module docstring)."""
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        if not directory:
            return generate_latest(self.registry)
        aggregate = CollectorRegistry()
        MultiProcessCollector(aggregate, path=directory)
        return generate_latest(aggregate)
