"""Prometheus metrics of the controller (with `model_series`, the only modules here that import
prometheus_client).

Owns the metric names and labels (the per-query model series: `model_series`), all defined
once on an injected `CollectorRegistry` so tests use a fresh registry and nothing touches the
global one. Labels stay bounded: `query` by
`ModelSettings.max_queries`, `action` and `outcome` by the policy's and the ack's fixed sets
(recommendations are counted by action only: how often, not for whom),
`topic` by the two topics the controller consumes. The one free-text label, a decision's
`reason`, lives on one series per query (the last decision; the one before is removed), so
Grafana can show the sentence as an annotation; it churns one series per decision, a few an
hour. Implements `ports.LoopObserver`.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import suppress
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from controller.core.model import QueryModel
from controller.core.outage import Outage
from controller.explain.model_series import ModelSeries
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
        self.model_series = ModelSeries()
        registry.register(self.model_series)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, ["query"], registry=registry)

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
        self.fetch_restarts = Counter(
            "streamctl_controller_fetch_restarts", "Consumers replaced by a new one at the "
            "positions they had reached, because records waited on a partition that they did "
            "not fetch, or their client could not say, at two checks in a row (a stuck client "
            "after a broker restart; a broker down a while counts too).", ["topic"],
            registry=registry)
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
        self.model_series.modelled(model, desired)

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
        self.model_series.outage(query_id, outage)

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
        self.model_series.forget(query_ids)
        for query_id in query_ids:
            for gauge in (self.last_pause, self.standby_instances):
                with suppress(KeyError):  # a series never set: older prometheus-clients raise
                    gauge.remove(query_id)
            previous = self._last_decision.pop(query_id, None)
            if previous is not None:
                self.last_decision.remove(*previous)

    def decode_error(self, error: DecodeError) -> None:
        self.decode_errors.labels(error.topic or "unknown").inc()

    def fetch_restarted(self, topic: str) -> None:
        self.fetch_restarts.labels(topic).inc()


def new_registry() -> CollectorRegistry:
    """A registry of our own: the global default one also carries process collectors that
    tests would have to work around."""
    return CollectorRegistry()


class MetricsServer(Protocol):
    server_port: int

    def shutdown(self) -> None: ...


def serve(port: int, registry: CollectorRegistry,
          security: EndpointSecurity = metrics_http.PLAIN, *, host: str = "127.0.0.1",
          any_port_if_taken: bool = False, timeline: Timeline | None = None) -> MetricsServer:
    """Serve /metrics on `host:port` from a daemon thread, with `streamctl.security`'s TLS and basic
    auth, and the live page of `timeline` at /ui; `shutdown()` the result to stop it.
    `metrics_http.PortInUse` when the port is taken, unless `any_port_if_taken` (then a free
    one: `server_port`)."""
    app = make_wsgi_app(registry)
    return metrics_http.serve(app if timeline is None else routes(timeline, app), port,
                              security, host, any_port_if_taken=any_port_if_taken)
