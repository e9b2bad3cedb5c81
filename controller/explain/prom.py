"""Prometheus metrics of the controller (the only module here that imports prometheus_client).

Owns the metric names and labels, all defined once on an injected `CollectorRegistry` so tests
use a fresh registry and nothing touches the global one. Labels stay bounded: `query` by
`ModelSettings.max_queries`, `action` and `outcome` by the policy's and the ack's fixed sets
(recommendations are counted by action only: how often, not for whom),
`topic` by the two topics the controller consumes. The one free-text label, a decision's
`reason`, lives on one series per query (the last decision; the one before is removed), so
Grafana can show the sentence as an annotation; it churns one series per decision, a few an
hour. Implements `ports.LoopObserver`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from contextlib import suppress
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from controller.core.model import QueryModel
from controller.core.objectives import Standing
from controller.core.outage import Outage
from controller.explain.page import Timeline, routes
from schemas import DecodeError
from streamctl.security import metrics_http
from streamctl.security.metrics_http import EndpointSecurity

PAUSE_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
"""From a swap at a batch boundary (well under a second) to a cold promotion (a minute)."""


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._last_decision: dict[str, tuple[str, str, str]] = {}
        self._stated: dict[str, set[str]] = {}
        self._modelled: dict[str, tuple[Any, ...]] = {}
        """Each query's modelled series, bound to its label once: `labels` takes a lock and a
        lookup per call, ten times per query per cycle."""

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, ["query"], registry=registry)

        self.arrival = gauge("streamctl_arrival_rate_records_per_second",
                             "Arrival rate λ: growth of the source partitions' end offsets "
                             "(probed at the broker, else as the batches saw them).")
        self.capacity = gauge("streamctl_processing_rate_records_per_second",
                              "Capacity: records per second at 100% busy with current units.")
        self.throughput = gauge("streamctl_throughput_records_per_second",
                                "Records per second actually processed over the window.")
        self.backlog = gauge("streamctl_backlog_records", "Estimated backlog B in records.")
        self.utilisation = gauge("streamctl_utilisation_ratio", "Arrival rate / capacity.")
        self.busy = gauge("streamctl_busy_ratio", "Fraction of wall time spent in batches.")
        self.current = gauge("streamctl_current_parallelism",
                             "Value in force of the knob the job scales by (input parallelism "
                             "or state partitions).")
        self.desired = gauge("streamctl_desired_parallelism",
                             "Value of that knob the controller wants (or has asked for).")
        self.decisions = Counter("streamctl_decisions", "Verdicts by kind (changes of kind and "
                                 "every scaling).", ["query", "action"], registry=registry)
        self.acks = Counter("streamctl_acks", "Acks of our control tuples by outcome.",
                            ["query", "outcome"], registry=registry)
        self.last_decision = Gauge(
            "streamctl_last_decision_timestamp_seconds",
            "When the query's last decision was taken (Unix time), labelled with its action "
            "and its reason sentence; one series per query.",
            ["query", "action", "reason"], registry=registry)
        self.pauses = Histogram(
            "streamctl_reconfiguration_pause_seconds",
            "Pause of each applied control tuple as its ack reports it: the gap in "
            "committed output from the later of the last commit and the change's start to "
            "the first commit after.", ["query"], buckets=PAUSE_BUCKETS_S, registry=registry)
        self.last_pause = gauge("streamctl_last_reconfiguration_pause_seconds",
                                "Pause of the query's last applied control tuple.")
        self.ack_timeouts = Counter("streamctl_ack_timeouts", "Control tuples never acked.",
                                    ["query"], registry=registry)
        self.decode_errors = Counter("streamctl_decode_errors",
                                     "Payloads that did not decode, skipped.", ["topic"],
                                     registry=registry)
        self.metrics_records = Counter("streamctl_metrics_records",
                                       "Metrics records received.", registry=registry)
        self.delay = gauge("streamctl_delay_seconds",
                           "How long a record arriving now waits before its batch commits: the "
                           "backlog ahead of it at the query's capacity, plus a trigger "
                           "interval (NaN: no capacity measured yet).")
        self.objective = Gauge("streamctl_objective_seconds",
                               "An objective the query's job states (max_delay_s: most delay; "
                               "drain_within_s: most time a backlog may take to drain); one "
                               "series per stated objective.", ["query", "objective"],
                               registry=registry)
        self.objective_met = Gauge("streamctl_objective_met",
                                   "1 while the query meets the stated objective, 0 while it "
                                   "does not, NaN while it cannot be told (no capacity "
                                   "measured).", ["query", "objective"], registry=registry)
        self.overhead = gauge("streamctl_batch_overhead_seconds",
                              "Fixed cost of every micro-batch, fitted from busy time over "
                              "batch size (0 when it cannot be told apart yet).")
        self.per_unit = gauge("streamctl_true_processing_rate_per_unit_records_per_second",
                              "μ: records per second of useful busy time per unit.")
        self.lost_queries = Gauge("streamctl_lost_queries",
                                  "Queries silent for longer than their liveness timeout.",
                                  registry=registry)
        self.down_queries = Gauge(
            "streamctl_down_queries", "Queries whose job said it runs no query: stopped on "
            "purpose, or halted waiting for its operator (not counted as lost).", ["state"],
            registry=registry)
        self.standby_instances = gauge(
            "streamctl_standby_instances",
            "Standby instances of the query heard from within the lost-detection floor: what "
            "a failover can promote (0: the next loss cannot fail over).")
        self.probe_failures = Counter(
            "streamctl_offset_probe_failures", "End-offset probes of the source partitions "
            "that the broker did not answer (the model then learns from the batches alone).",
            registry=registry)
        self.leader = Gauge("streamctl_controller_leader",
                            "1 while this controller instance leads (any shard of the "
                            "queries), 0 while it follows.", ["instance"], registry=registry)
        self.shards_led = Gauge("streamctl_controller_shards_led",
                                "How many shards of the queries this instance leads (the "
                                "lease topic's partitions; all of them with one instance).",
                                ["instance"],
                                registry=registry)
        self.shards = Gauge("streamctl_controller_shards",
                            "How many shards the queries are divided into (the lease topic's "
                            "partitions): alert when the instances lead fewer.", ["instance"],
                            registry=registry)
        self.leader_since = Gauge("streamctl_controller_leader_since_timestamp_seconds",
                                  "When this instance last took the lead of a shard (Unix "
                                  "time; 0 while it follows).", ["instance"], registry=registry)
        self.takeovers = Counter("streamctl_controller_takeovers",
                                 "Times this instance took the lead of one or more shards (its "
                                 "first election included): Grafana's takeover annotations.",
                                 ["instance"], registry=registry)
        self._shards_led: dict[str, int] = {}
        self.input_delay = Gauge(
            "streamctl_controller_input_delay_seconds",
            "How far behind its metrics topic this instance reads: how long ago the newest "
            "record it read was published, while newer ones wait (0: caught up).",
            registry=registry)
        self.judging = Gauge(
            "streamctl_controller_judging",
            "1 while this instance is near enough its metrics to judge the queries, 0 while "
            "it is more than max_input_delay_s behind and judges none (alert on it).",
            registry=registry)
        self.judging.set(1)
        self.recommendations = Counter("streamctl_recommendations",
                                       "Advice the controller cannot carry out itself (throttle, "
                                       "raise_batch_cap, start_standby), each time it is first "
                                       "given.",
                                       ["action"], registry=registry)

    def metrics_received(self, count: int) -> None:
        self.metrics_records.inc(count)

    def behind(self, seconds: float, judging: bool) -> None:
        self.input_delay.set(seconds)
        self.judging.set(1 if judging else 0)

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        q = model.query_id
        series = self._modelled.get(q)
        if series is None:
            series = self._modelled[q] = tuple(gauge.labels(q) for gauge in (
                self.arrival, self.capacity, self.throughput, self.backlog, self.utilisation,
                self.busy, self.current, self.overhead, self.per_unit, self.delay))
        (arrival, capacity, throughput, backlog, utilisation, busy, current, overhead, per_unit,
         delay) = series
        arrival.set(model.arrival_rate)
        capacity.set(model.capacity)
        throughput.set(model.throughput)
        backlog.set(model.backlog_records)
        # No capacity estimate means no ratio: NaN shows as a gap, +Inf would wreck the axis.
        utilisation.set(model.utilisation if math.isfinite(model.utilisation) else math.nan)
        busy.set(model.busy_ratio)
        current.set(model.parallelism)
        if desired is not None:
            self.desired.labels(q).set(desired)
        overhead.set(model.batch_overhead_s)
        per_unit.set(model.rate_per_unit)
        delay.set(_or_nan(model.delay_s))
        self._objectives(q, model.standings())

    def _objectives(self, query_id: str, found: tuple[Standing, ...]) -> None:
        """The stated objectives' series; those of an objective no longer stated go."""
        stated = {s.objective for s in found}
        for gone in self._stated.get(query_id, set()) - stated:
            self.objective.remove(query_id, gone)
            self.objective_met.remove(query_id, gone)
        self._stated[query_id] = stated
        for standing in found:
            self.objective.labels(query_id, standing.objective).set(standing.bound_s)
            self.objective_met.labels(query_id, standing.objective).set(
                math.nan if standing.met is None else float(standing.met))

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        self.decisions.labels(query_id, action).inc()
        previous = self._last_decision.get(query_id)
        if previous is not None:
            self.last_decision.remove(*previous)
        self._last_decision[query_id] = (query_id, action, reason)
        self.last_decision.labels(query_id, action, reason).set(at_ms / 1000)

    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None:
        self.acks.labels(query_id, outcome).inc()
        if outcome == "APPLIED":
            self.pauses.labels(query_id).observe(pause_ms / 1000)
            self.last_pause.labels(query_id).set(pause_ms / 1000)

    def ack_timed_out(self, query_id: str) -> None:
        self.ack_timeouts.labels(query_id).inc()

    def recommended(self, action: str) -> None:
        self.recommendations.labels(action).inc()

    def lost(self, query_ids: list[str]) -> None:
        self.lost_queries.set(len(query_ids))

    def down(self, action: str, query_ids: list[str]) -> None:
        self.down_queries.labels(action).set(len(query_ids))

    def outage(self, query_id: str, outage: Outage) -> None:
        """Nothing is processed: no capacity, no utilisation, no busy time; the backlog and
        arrival the broker holds, NaN (a gap) where unknown, never the last batch's figures."""
        q = query_id
        self.backlog.labels(q).set(_or_nan(outage.backlog_records))
        self.arrival.labels(q).set(_or_nan(outage.arrival_rate))
        self.throughput.labels(q).set(0)
        self.busy.labels(q).set(0)
        for gauge in (self.capacity, self.utilisation, self.overhead, self.per_unit):
            gauge.labels(q).set(math.nan)

    def standbys(self, query_id: str, count: int) -> None:
        self.standby_instances.labels(query_id).set(count)

    def probe_failed(self) -> None:
        self.probe_failures.inc()

    def leadership(self, instance_id: str, led: int, shards: int, since_ms: int) -> None:
        """Called on each change only (and once at start), so each call with more shards led
        than before is one more takeover."""
        before = self._shards_led.get(instance_id, 0)
        self._shards_led[instance_id] = led
        self.leader.labels(instance_id).set(1 if led else 0)
        self.shards_led.labels(instance_id).set(led)
        self.shards.labels(instance_id).set(shards)
        takeovers = self.takeovers.labels(instance_id)  # the series exists from the start, at 0
        if led > before:
            takeovers.inc()
        if led > before or not led:
            self.leader_since.labels(instance_id).set(since_ms / 1000 if led else 0)

    def forget(self, query_ids: Collection[str]) -> None:
        """A query's gauges go (its counters and pauses stay: what happened while this
        instance led it)."""
        gauges = (self.arrival, self.capacity, self.throughput, self.backlog, self.utilisation,
                  self.busy, self.current, self.desired, self.overhead, self.per_unit,
                  self.delay, self.last_pause, self.standby_instances)
        for query_id in query_ids:
            for gauge in gauges:
                with suppress(KeyError):  # a series never set: older prometheus-clients raise
                    gauge.remove(query_id)
            self._modelled.pop(query_id, None)
            previous = self._last_decision.pop(query_id, None)
            if previous is not None:
                self.last_decision.remove(*previous)
            for objective in self._stated.pop(query_id, set()):
                self.objective.remove(query_id, objective)
                self.objective_met.remove(query_id, objective)

    def decode_error(self, error: DecodeError) -> None:
        self.decode_errors.labels(error.topic or "unknown").inc()


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def new_registry() -> CollectorRegistry:
    """A registry of our own: the global default one also carries process collectors that
    tests would have to work around."""
    return CollectorRegistry()


class Endpoint(Protocol):
    server_port: int

    def shutdown(self) -> None: ...


def serve(port: int, registry: CollectorRegistry,
          security: EndpointSecurity = metrics_http.PLAIN, *, host: str = "127.0.0.1",
          any_port_if_taken: bool = False, timeline: Timeline | None = None) -> Endpoint:
    """Serve /metrics on `host:port` from a daemon thread, with `streamctl.security`'s TLS and basic
    auth, and the live page of `timeline` at /ui; `shutdown()` the result to stop it.
    `metrics_http.PortInUse` when the port is taken, unless `any_port_if_taken` (then a free
    one: `server_port`)."""
    app = make_wsgi_app(registry)
    return metrics_http.serve(app if timeline is None else routes(timeline, app), port,
                              security, host, any_port_if_taken=any_port_if_taken)
