"""The job's Prometheus metrics, defined once on an injected registry, labelled by query.

Owns metric names and the mapping from a `TaskMetrics` record to them; serving is
prometheus_client's exposition app on the configured port (0 = off), over HTTP or HTTPS and
optionally behind basic auth (`streamctl.security.metrics_http`). Neighbours: `job` records into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily

from schemas.records import TaskMetrics
from streamctl.security import metrics_http
from streamctl.security.metrics_http import EndpointSecurity, MetricsServer
from streaming_jobs.runtime.observe.metrics import backlog_records

_QUERY = ("query",)


class ScrapedCounter:
    """A counter another part keeps itself, read at scrape time."""

    def __init__(self, name: str, documentation: str, query_id: str,
                 read: Callable[[], int]) -> None:
        self._name, self._documentation = name, documentation
        self._query_id, self._read = query_id, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation, labels=["query"])
        family.add_metric([self._query_id], self._read())
        yield family


class JobPrometheus:
    """Counters, gauges and a histogram of one process's queries."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.input_rows = Counter("streamctl_job_input_rows_total",
                                  "Input records read by committed batches", _QUERY,
                                  registry=registry)
        self.output_rows = Counter("streamctl_job_output_rows_total",
                                   "Output records written by committed batches", _QUERY,
                                   registry=registry)
        self.batch_duration = Histogram(
            "streamctl_job_batch_duration_seconds", "Trigger execution time per batch", _QUERY,
            buckets=(0.25, 0.5, 1, 2, 4, 8, 16, 32, 64), registry=registry)
        self.backlog = Gauge("streamctl_job_backlog_records",
                             "Records seen by the source but not read by the last batch "
                             "(sum of latest - end offsets)", _QUERY, registry=registry)
        self.input_parallelism = Gauge("streamctl_job_input_parallelism",
                                       "Kafka source minPartitions in force", _QUERY,
                                       registry=registry)
        self.task_slots = Gauge("streamctl_job_task_slots",
                                "Tasks the job runs at once: local[N]'s N, or the cores of the "
                                "executors registered on a cluster", _QUERY, registry=registry)
        self.config_epoch = Gauge("streamctl_job_config_epoch", "Config epoch in force", _QUERY,
                                  registry=registry)
        self.control_tuples = Counter("streamctl_job_control_tuples_total",
                                      "Control tuples handled, by outcome", (*_QUERY, "outcome"),
                                      registry=registry)
        self.control_ready = Gauge(
            "streamctl_job_control_ready",
            "1 once the control consumer holds the control topic's partitions (every tuple "
            "sent from then on is seen, across broker restarts; one sent before is not "
            "answered and the controller decides again after its ack timeout), 0 until then",
            _QUERY, registry=registry)
        self.dead_letters = Counter("streamctl_job_dead_letter_records_total",
                                    "Input records sent to the dead-letter topic", _QUERY,
                                    registry=registry)
        self.output_dead_letters = Counter(
            "streamctl_job_output_dead_letter_records_total",
            "Output rows sent to the dead-letter topic instead of the output topic (over the "
            "record size limit, or without a key for a compacted topic)", _QUERY,
            registry=registry)
        self.rows_shed = Counter("streamctl_job_rows_shed_total",
                                 "Low-priority input rows dropped by load shedding", _QUERY,
                                 registry=registry)
        self.control_rejections = Counter(
            "streamctl_job_control_rejections_total",
            "Control tuples not applied, by reason (unsigned, bad_signature, undecodable, "
            "unknown_parameter, unsupported, bad_value, stale_epoch, precondition)",
            (*_QUERY, "reason"),
            registry=registry)
        self.shed_fraction = Gauge("streamctl_job_shed_fraction",
                                   "Fraction of low-priority records shed, in force", _QUERY,
                                   registry=registry)
        self.unread_retired = Gauge(
            "streamctl_job_unread_retired_input_records",
            "Records appended to an input topic after the job switched away from it (the job "
            "does not read them; switching back to the topic does)", (*_QUERY, "topic"),
            registry=registry)
        self.input_lost = Counter(
            "streamctl_job_input_records_lost_total",
            "Input records deleted (retention, delete-records) before the query read them, "
            "counted when found (before a run)", (*_QUERY, "topic"), registry=registry)
        self.halted = Gauge(
            "streamctl_job_halted", "1 while the query runs nothing and waits for its operator "
            "(its input was deleted before it was read, with --on-data-loss stop)", _QUERY,
            registry=registry)
        self.late_rows = Counter("streamctl_job_rows_dropped_by_watermark_total",
                                 "Input rows dropped as later than the watermark", _QUERY,
                                 registry=registry)

    def record_batch(self, m: TaskMetrics, dead_letters: int,
                     output_dead_letters: int = 0) -> None:
        q = m.query_id
        self.input_rows.labels(q).inc(m.input_rows)
        self.output_rows.labels(q).inc(m.output_rows)
        self.batch_duration.labels(q).observe(m.busy_ms / 1000.0)
        self.backlog.labels(q).set(backlog_records(m))
        self.record_configuration(m)
        self.dead_letters.labels(q).inc(dead_letters)
        self.output_dead_letters.labels(q).inc(output_dead_letters)
        self.late_rows.labels(q).inc(m.rows_dropped_by_watermark)
        self.rows_shed.labels(q).inc(m.rows_shed)

    def record_configuration(self, m: TaskMetrics) -> None:
        """The configuration in force as `m` says it: a batch's, and a heartbeat's or a beat's
        too, so a change applied while no batch runs (an idle query) shows at once."""
        q = m.query_id
        self.input_parallelism.labels(q).set(m.input_parallelism)
        self.task_slots.labels(q).set(m.task_slots)
        self.config_epoch.labels(q).set(m.config_epoch)

    def record_control(self, query_id: str, outcome: str, reason: str | None = None) -> None:
        self.control_tuples.labels(query_id, outcome).inc()
        if reason is not None:
            self.control_rejections.labels(query_id, reason).inc()

    def control_counter(self, query_id: str) -> Callable[[str, str | None], None]:
        """`record_control` for one query: what the control loop counts its tuples with."""
        return lambda outcome, reason: self.record_control(query_id, outcome, reason)

    def watch_sink(self, query_id: str, skipped_replays: Callable[[], int]) -> None:
        """Export the sink's own count of replays it skipped
        (`streamctl_job_sink_replays_skipped_total`), read at scrape time."""
        self.registry.register(ScrapedCounter(
            "streamctl_job_sink_replays_skipped",
            "Replayed batches not written again: their output was already committed",
            query_id, skipped_replays))

    def watch_control_consumer(self, query_id: str, fetch_restarts: Callable[[], int]) -> None:
        """Export how often the control consumer was replaced
        (`streamctl_job_control_fetch_restarts_total`), read at scrape time."""
        self.registry.register(ScrapedCounter(
            "streamctl_job_control_fetch_restarts",
            "Control consumers replaced by a new one where they had read to, because tuples "
            "waited on a partition they did not fetch, or their client could not say, at two "
            "checks in a row (a stuck client after a broker restart; a broker down a while "
            "counts too)", query_id, fetch_restarts))

    def serve(self, host: str, port: int, security: EndpointSecurity = metrics_http.PLAIN, *,
              any_port_if_taken: bool = False) -> MetricsServer | None:
        """Expose the registry on `host:port` with `streamctl.security`'s TLS and basic auth; port 0
        means no endpoint (None). `metrics_http.PortInUse` when the port is taken, unless
        `any_port_if_taken` (then a free port: `server_port`)."""
        if not port:
            return None
        return metrics_http.serve(make_wsgi_app(self.registry), port, security, host,
                                  any_port_if_taken=any_port_if_taken)
