"""Query progress → `schemas.TaskMetrics`: the pure conversion the metrics publisher uses.

Owns the meaning of every metrics field (see `to_task_metrics`). No Spark session, Kafka or
clock here: input is a `StreamingQueryProgress` (live, or rebuilt with `fromJson` in tests)
plus the runtime's `RunContext`. Neighbours: `listener` feeds it, `runtime.publish` ships the
result.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas import knobs
from schemas.records import Role, SourcePartition, TaskMetrics

OBSERVATION = "streamctl_input"
"""The Spark observed metric of the runtime's decode step (`query.input`): dead letters and
rows shed per batch."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """What the runtime knew about one run of the query (one Spark runId). Every field is the
    `TaskMetrics` field of the same name, copied into each record of the run."""

    query_id: str
    instance_id: str
    config_epoch: int
    input_parallelism: int
    state_partitions: int
    task_slots: int
    trigger_interval_ms: int
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    max_offsets_per_trigger: int = 0
    """The source's per-batch record cap (0: unbounded); the controller sizes with it."""
    scaling_parameter: str = knobs.INPUT_PARALLELISM
    """The knob the plan's capacity grows with (`runtime.query.plan.Plan.scaling_parameter`)."""
    max_state_partitions: int = 0
    """The highest state_partitions a control tuple may set."""
    executor_cores: int = 0
    """Cores per executor on a cluster manager; 0 in local mode (no executors to request)."""
    max_executors: int = 0
    """Most executors a control tuple may request; 0 in local mode."""
    beat_interval_ms: int = 0
    """How often the instance sends a liveness beat (`beat`); 0: it sends none."""
    metrics_address: str = ""
    """Where the instance serves its Prometheus metrics; empty: nowhere."""
    halted: str = ""
    """Why the instance runs no query and waits for its operator; empty while it runs."""
    lost_ranges: tuple[SourcePartition, ...] = ()
    """Input found deleted before it was read, since the instance started."""
    max_delay_ms: int = 0
    """The job's stated delay objective; 0: none."""
    drain_within_ms: int = 0
    """The job's stated drain objective; 0: none."""
    shed_fraction: float = 0.0
    """The share of low-priority records shed, in force."""
    max_shed_fraction: float = 0.0
    """The highest shed_fraction a tuple may set; 0: the job marks nothing low priority."""
    max_batch_cap: int = 0
    """The highest max_offsets_per_trigger a tuple may set."""
    cluster_priority: int = 0
    """How the job ranks for a shared cluster's free cores; 0 in local mode."""


def timestamp_ms(iso: str) -> int:
    """Spark's progress timestamps are ISO-8601 UTC with a 'Z' suffix."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def parse_offsets(raw: Any) -> dict[tuple[str, int], int]:
    """Kafka source offset JSON {"topic": {"0": 12}} → {(topic, 0): 12}; null/None → {}."""
    if raw is None or raw in ("null", "None", ""):
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def source_partitions(progress: StreamingQueryProgress) -> tuple[SourcePartition, ...]:
    """Per partition: start (−1 when the first batch has none), end, latest (end when null)."""
    result = []
    for source in progress.sources:
        start, end = parse_offsets(source.startOffset), parse_offsets(source.endOffset)
        latest = parse_offsets(source.latestOffset)
        for (topic, part), end_offset in sorted(end.items()):
            result.append(SourcePartition(
                topic=topic, partition=part, start_offset=start.get((topic, part), -1),
                end_offset=end_offset, latest_offset=latest.get((topic, part), end_offset)))
    return tuple(result)


def dead_letters(progress: StreamingQueryProgress) -> int:
    """Undecodable input rows of the batch, from the plan's observed metric."""
    return _observed(progress, "dead_letters")


def rows_shed(progress: StreamingQueryProgress) -> int:
    """Input rows the batch dropped by load shedding, from the plan's observed metric."""
    return _observed(progress, "rows_shed")


def rows_low_priority(progress: StreamingQueryProgress) -> int:
    """Input rows of the batch the job marks low priority, shed or not."""
    return _observed(progress, "rows_low_priority")


def _observed(progress: StreamingQueryProgress, name: str) -> int:
    row = progress.observedMetrics.get(OBSERVATION)
    try:
        value = row[name] if row is not None else None
    except (KeyError, ValueError):  # a progress recorded before the metric existed
        value = None
    return int(value or 0)


def _context(ctx: RunContext) -> dict[str, Any]:
    """The context's fields as they are: `asdict` would turn the `SourcePartition`s of
    `lost_ranges` into dicts, which the record does not carry."""
    return {f.name: getattr(ctx, f.name) for f in fields(ctx)}


def to_task_metrics(
    progress: StreamingQueryProgress, ctx: RunContext, output_rows: int
) -> TaskMetrics:
    """One TaskMetrics per progress event.

    batch_start_ms is the trigger start (progress timestamp), busy_ms and the batch span are
    durationMs.triggerExecution; state figures are summed over the stateful operators.
    """
    start_ms = timestamp_ms(progress.timestamp)
    busy_ms = int(progress.durationMs.get("triggerExecution", 0))
    ops = progress.stateOperators
    return TaskMetrics(
        **_context(ctx), role=Role.ACTIVE, batch_id=progress.batchId,
        batch_start_ms=start_ms, batch_end_ms=start_ms + busy_ms,
        input_rows=int(progress.numInputRows or 0), output_rows=output_rows, busy_ms=busy_ms,
        partitions=source_partitions(progress), state_rows=sum(op.numRowsTotal for op in ops),
        state_bytes=sum(op.memoryUsedBytes for op in ops),
        rows_dropped_by_watermark=sum(op.numRowsDroppedByWatermark for op in ops),
        rows_shed=rows_shed(progress), rows_low_priority=rows_low_priority(progress))


def heartbeat(ctx: RunContext, at_ms: int, last: TaskMetrics | None,
              role: Role = Role.ACTIVE) -> TaskMetrics:
    """The record an idle query, or a standby, publishes: batch_id −1, no rows, no busy time.

    Idle means the source found nothing new, so each partition's latest offset is where the
    last batch ended; the controller then sees a zero arrival rate and no backlog instead of
    silence (which it would take for a lost instance). A standby's heartbeat (role STANDBY,
    no partitions) says it is alive and ready to be promoted.
    """
    partitions = () if last is None else tuple(
        SourcePartition(p.topic, p.partition, p.end_offset, p.end_offset, p.end_offset)
        for p in last.partitions)
    return TaskMetrics(
        **_context(ctx), role=role, batch_id=-1, batch_start_ms=at_ms, batch_end_ms=at_ms,
        input_rows=0, output_rows=0, busy_ms=0, partitions=partitions,
        state_rows=0 if last is None else last.state_rows,
        state_bytes=0 if last is None else last.state_bytes)


def beat(ctx: RunContext, at_ms: int, running_batch_id: int = -1, running_since_ms: int = 0,
         running_partitions: tuple[SourcePartition, ...] = ()) -> TaskMetrics:
    """An active instance's liveness beat: it is up, and runs batch `running_batch_id`
    (planned at `running_since_ms`, reading `running_partitions` to their end offsets), or
    none (-1). Its `partitions` stay empty: they say what a committed batch read, and a
    reader that sums them (lag, records consumed) must not count a batch still running.

    Sent every `beat_interval_ms` whatever the batches do, so a batch that runs for a minute
    is not silence, and silence means the instance is gone or frozen. No rates: a beat is not
    a batch, and the controller does not count it as one (`beat` set, batch_id -1).
    """
    return TaskMetrics(
        **_context(ctx), role=Role.ACTIVE, batch_id=-1, batch_start_ms=at_ms, batch_end_ms=at_ms,
        input_rows=0, output_rows=0, busy_ms=0, partitions=(), beat=True,
        running_batch_id=running_batch_id, running_since_ms=running_since_ms,
        running_partitions=running_partitions)


def backlog_records(metrics: TaskMetrics) -> int:
    """Records the source had seen but the batch did not read: Σ latest − end."""
    return sum(max(0, p.latest_offset - p.end_offset) for p in metrics.partitions)


def warn_if_late_data(metrics: TaskMetrics) -> None:
    if metrics.rows_dropped_by_watermark > 0:
        log.warning("query %s batch %d: %d late rows dropped by the watermark",
                    metrics.query_id, metrics.batch_id, metrics.rows_dropped_by_watermark)


def warn_if_shed(metrics: TaskMetrics) -> None:
    if metrics.rows_shed > 0:
        log.warning("query %s batch %d: %d low-priority rows shed (of %d read)",
                    metrics.query_id, metrics.batch_id, metrics.rows_shed, metrics.input_rows)
