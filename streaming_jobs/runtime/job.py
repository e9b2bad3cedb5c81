"""The bundled job with its elastic runtime: the programmatic entry point.

Owns the wiring (SparkSession, query, metrics publisher, Prometheus, control loop thread) and
the process-level lifecycle: start, run until stopped or failed, shut down cleanly (quiesce,
stop the query, flush producers, close the consumer). Neighbours: `cli` calls it; everything
under `runtime` is assembled here.
"""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import CollectorRegistry
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas.records import Ack, ControlTuple, TaskMetrics
from streaming_jobs.config import JobConfig
from streaming_jobs.runtime.control import ControlLoop
from streaming_jobs.runtime.kafka import RecordPublisher, TypedConsumer
from streaming_jobs.runtime.lifecycle import ElasticQuery, Knobs
from streaming_jobs.runtime.metrics import (
    RunContext,
    dead_letters,
    heartbeat,
    to_task_metrics,
    warn_if_late_data,
)
from streaming_jobs.runtime.prometheus import JobPrometheus
from streaming_jobs.runtime.reconfigure import QUIESCE_TIMEOUT_S, Applied, Reconfigurer
from streaming_jobs.runtime.session import build_session

log = logging.getLogger(__name__)


class ElasticJob:
    """`start()`, then `run(stop_event)` or your own wait, then `stop()`."""

    def __init__(self, config: JobConfig, spark: SparkSession | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self._owns_spark = spark is None
        started = time.monotonic()
        self.spark = spark if spark is not None else build_session(config)
        if self._owns_spark:
            log.info("SparkSession local[%d] up in %.1f s", config.task_slots,
                     time.monotonic() - started)
        self.prometheus = JobPrometheus(registry if registry is not None else CollectorRegistry())
        self._publisher = RecordPublisher(config.bootstrap_servers,
                                          f"streamctl-job-{config.instance_id}")
        self._lock = threading.Lock()  # one reconfiguration or shutdown at a time
        self._last_metrics: TaskMetrics | None = None  # what an idle heartbeat repeats
        self.query = ElasticQuery(self.spark, config, self._publish_progress,
                                  self._publish_heartbeat)
        self._reconfigurer = Reconfigurer(self.query)
        # A group per instance: every instance sees every tuple and filters on query_id.
        self._consumer = TypedConsumer(
            config.bootstrap_servers, config.control_topic,
            f"streamctl-job-{config.query_id}-{config.instance_id}", ControlTuple)
        self._stopping = threading.Event()
        loop = ControlLoop(self._consumer, self, self._send_ack, self._count_control,
                           query_id=config.query_id, instance_id=config.instance_id,
                           task_slots=config.task_slots)
        self._control_thread = threading.Thread(
            target=loop.run, args=(self._stopping,), name="streamctl-control", daemon=True)

    # -- Reconfigurable (called from the control thread) --
    @property
    def knobs(self) -> Knobs:
        return self.query.knobs

    def advance_epoch(self, epoch: int) -> None:
        with self._lock:
            self.query.advance_epoch(epoch)

    def reconfigure(self, knobs: Knobs) -> Applied:
        with self._lock:
            applied = self._reconfigurer.apply(knobs)
        log.info("reconfigured %s at epoch %d: %s; pause %d ms", self.config.query_id,
                 knobs.epoch, applied.detail, applied.pause_ms)
        return applied

    # -- lifecycle --
    def start(self) -> None:
        self.query.start(self.query.knobs)
        self._control_thread.start()
        self.prometheus.serve(self.config.metrics_port)
        log.info("job %s (instance %s) started: input %s → output %s, input_parallelism %d",
                 self.config.query_id, self.config.instance_id, self.config.input_topic,
                 self.config.output_topic, self.query.knobs.input_parallelism)

    def wait_control_ready(self, timeout_s: float) -> bool:
        """Whether the control consumer holds its partitions (tuples sent now are seen)."""
        return self._consumer.assigned.wait(timeout_s)

    def run(self, stop: threading.Event, max_runtime_s: float = 0.0) -> int:
        """Block until `stop` is set, the runtime is up, or the query fails (returns 1)."""
        deadline = time.monotonic() + max_runtime_s if max_runtime_s else None
        while not stop.wait(1.0):
            if deadline is not None and time.monotonic() >= deadline:
                log.info("max runtime %.0f s reached", max_runtime_s)
                return 0
            with self._lock:  # a query stopped by a reconfiguration is not a failure
                down = not self.query.is_active()
                failure = self.query.failure()
            if down:
                log.error("query %s is not running: %s", self.config.query_id,
                          failure or "stopped after a failed reconfiguration")
                return 1
        return 0

    def stop(self) -> None:
        """Quiesce and stop the query, then flush and close the Kafka clients."""
        self._stopping.set()
        self._control_thread.join(timeout=QUIESCE_TIMEOUT_S + 60)
        try:
            with self._lock:
                self.query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
            self.query.close()
            if self._owns_spark:
                self.spark.stop()
        except (Py4JError, ConnectionError) as exc:
            # A signal sent to the whole process group (systemd, `timeout`) also ends Spark's
            # JVM; the checkpoint still ends at the last committed batch, so nothing is lost.
            log.warning("Spark's JVM exited before the query could be stopped in order (%s); "
                        "the next start resumes from the last committed batch",
                        type(exc).__name__)
        self._consumer.close()
        undelivered = self._publisher.close()
        if undelivered:
            log.warning("%d metrics/ack records undelivered at shutdown", undelivered)
        log.info("job %s stopped", self.config.query_id)

    def _publish_progress(self, progress: StreamingQueryProgress, ctx: RunContext,
                          output_rows: int) -> None:
        metrics = to_task_metrics(progress, ctx, output_rows)
        warn_if_late_data(metrics)
        dead = dead_letters(progress)
        if dead:
            log.warning("batch %d: %d undecodable records sent to %s", metrics.batch_id, dead,
                        self.config.dlq_topic)
        self._last_metrics = metrics
        self._publisher.publish(self.config.metrics_topic, metrics.query_id, metrics)
        self.prometheus.record_batch(metrics, dead)

    def _publish_heartbeat(self, ctx: RunContext, at_ms: int) -> None:
        metrics = heartbeat(ctx, at_ms, self._last_metrics)
        self._publisher.publish(self.config.metrics_topic, metrics.query_id, metrics)

    def _send_ack(self, ack: Ack) -> None:
        self._publisher.publish(self.config.ack_topic, ack.query_id, ack)

    def _count_control(self, outcome: str) -> None:
        self.prometheus.record_control(self.config.query_id, outcome)
