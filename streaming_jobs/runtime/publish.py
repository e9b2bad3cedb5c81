"""What a job publishes: per-batch metrics, heartbeats and beats, its desired state, acks.

Owns the conversion of what the query reports (a progress event, an idle tick) into
`TaskMetrics` records on the metrics topic and into the job's Prometheus figures, with the
warnings a batch deserves (late rows, shed rows, dead letters), and the records the control
side publishes (acks, the desired state, when its topic exists). Neighbours: `job` (wiring),
`metrics` (the pure conversion), `kafka.RecordPublisher` (the producer).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas.records import Ack, DesiredStateRecord, Role, SourcePartition, TaskMetrics
from streaming_jobs.config import JobTopics
from streaming_jobs.runtime.checkpoint.running import RunningBatch
from streaming_jobs.runtime.kafka import RecordPublisher
from streaming_jobs.runtime.observe.metrics import (
    RunContext,
    beat,
    dead_letters,
    heartbeat,
    to_task_metrics,
    warn_if_late_data,
    warn_if_shed,
)
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
from streaming_jobs.runtime.sink.foreach_batch import Written

log = logging.getLogger(__name__)


class Publisher:
    """The job's records, to Kafka and Prometheus."""

    def __init__(self, topics: JobTopics, query_id: str, producer: RecordPublisher,
                 prometheus: JobPrometheus, *, desired_state_path: str) -> None:
        self._topics, self._query_id = topics, query_id
        self._producer, self._prometheus = producer, prometheus
        self._desired_state_path = desired_state_path  # named when the state topic is missing
        self._last_metrics: TaskMetrics | None = None  # what an idle heartbeat repeats
        self._state_topic_exists = False

    def progress(self, progress: StreamingQueryProgress, ctx: RunContext,
                 written: Written) -> None:
        """A committed batch: its metrics record, its Prometheus figures, its warnings."""
        metrics = to_task_metrics(progress, ctx, written.rows)
        warn_if_late_data(metrics)
        warn_if_shed(metrics)
        dead = dead_letters(progress)
        if dead:
            log.warning("batch %d: %d undecodable records sent to %s", metrics.batch_id, dead,
                        self._topics.dlq_topic)
        self._last_metrics = metrics
        self.metrics(metrics)
        self._prometheus.record_batch(metrics, dead, written.dead_letters)

    def heartbeat(self, ctx: RunContext, at_ms: int) -> None:
        """An idle active query says it is alive, repeating where its last batch ended."""
        self.metrics(heartbeat(ctx, at_ms, self._last_metrics))

    def halted(self, ctx: RunContext, at_ms: int,
               resume_at: tuple[SourcePartition, ...]) -> None:
        """A halted active says it is up and why it reads nothing (`ctx.halted`), with where a
        run would start each partition (the backlog it owes is counted from there)."""
        self.metrics(replace(heartbeat(ctx, at_ms, None), partitions=resume_at))

    def stopped(self, ctx: RunContext, at_ms: int, role: Role) -> None:
        """The instance's last record: it stops on purpose, its query quiesced; where its last
        batch ended, so a reader knows what it owes from here."""
        self.metrics(replace(heartbeat(ctx, at_ms, self._last_metrics, role), stopped=True))

    def beat(self, ctx: RunContext, at_ms: int, running: RunningBatch | None) -> None:
        """An active instance's liveness beat, with the batch it runs (None: between
        batches): each source partition from where the batch before it ended to where it
        was planned to end."""
        if running is None:
            self.metrics(beat(ctx, at_ms))
            return
        self.metrics(beat(ctx, at_ms, running.batch_id, running.planned_at_ms,
                          planned_partitions(running)))

    def metrics(self, record: TaskMetrics) -> None:
        self._producer.publish(self._topics.metrics_topic, record.query_id, record)
        self._prometheus.record_configuration(record)

    def check_state_topic(self, exists: bool) -> None:
        self._state_topic_exists = exists
        if not exists:
            log.warning("state topic %s does not exist: the desired state is persisted to %s "
                        "but not published (`streamctl stack up` creates the topic)",
                        self._topics.state_topic, self._desired_state_path)

    def desired_state(self, record: DesiredStateRecord) -> None:
        if self._state_topic_exists:
            self._producer.publish(self._topics.state_topic, self._query_id, record)

    def ack(self, ack: Ack) -> None:
        self._producer.publish(self._topics.ack_topic, ack.query_id, ack)

    def close(self) -> None:
        undelivered = self._producer.close()
        if undelivered:
            log.warning("%d metrics/ack records undelivered at shutdown", undelivered)


def planned_partitions(running: RunningBatch) -> tuple[SourcePartition, ...]:
    """Each source partition of a running batch: from where the batch before it ended (its
    own end when that is unknown) to where it was planned to end (the latest it knew of)."""
    return tuple(
        SourcePartition(topic, partition, running.starts.get(topic, {}).get(partition, end),
                        end, end)
        for topic, ends in sorted(running.ends.items()) for partition, end in sorted(ends.items()))
