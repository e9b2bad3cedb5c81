"""Progress → TaskMetrics, from progress events recorded from a real run (no query needed).

The recording (`data/job_progress_events.json`): batch 0 reads 300 of 501 offsets with one
undecodable record; batch 2 is the no-data batch that closes windows; batch 3 holds one record
later than the watermark.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas.codec import codec_for
from schemas.records import Role, SourcePartition, TaskMetrics
from streaming_jobs.runtime.observe.metrics import (
    RunContext,
    backlog_records,
    dead_letters,
    rows_shed,
    timestamp_ms,
    to_task_metrics,
    warn_if_late_data,
)

EVENTS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "job_progress_events.json").read_text())
TOPIC = "cap-in-5dc323"
CTX = RunContext(query_id="sensor-averages", instance_id="host-1", config_epoch=3,
                 input_parallelism=4, state_partitions=2, task_slots=16,
                 trigger_interval_ms=500, source_topics=(TOPIC,), sink_topics=("out",),
                 max_offsets_per_trigger=400, scaling_parameter="state_partitions",
                 max_state_partitions=32, max_delay_ms=30_000, drain_within_ms=120_000)


def progress(batch_id: int, **changes: Any) -> StreamingQueryProgress:
    event = json.loads(json.dumps(next(e for e in EVENTS if e["batchId"] == batch_id)))
    event.update(changes)
    return StreamingQueryProgress.fromJson(event)


def test_first_batch() -> None:
    m = to_task_metrics(progress(0), CTX, output_rows=0)
    assert (m.query_id, m.instance_id, m.role, m.config_epoch) == (
        "sensor-averages", "host-1", Role.ACTIVE, 3)
    assert m.batch_start_ms == timestamp_ms("2026-11-22T00:37:44.861Z") == 1795307864861
    assert (m.busy_ms, m.batch_end_ms - m.batch_start_ms) == (28258, 28258)
    assert (m.input_rows, m.trigger_interval_ms, m.input_parallelism) == (300, 500, 4)
    assert m.partitions == (SourcePartition(TOPIC, 0, -1, 299, 500),
                            SourcePartition(TOPIC, 1, -1, 1, 1))
    assert backlog_records(m) == 201
    assert (m.state_rows, m.state_bytes, m.state_partitions, m.task_slots) == (6, 2416, 2, 16)
    assert (m.scaling_parameter, m.max_state_partitions, m.executor_cores,
            m.max_executors) == ("state_partitions", 32, 0, 0)
    assert (m.source_topics, m.sink_topics) == ((TOPIC,), ("out",))
    assert m.max_offsets_per_trigger == 400
    assert (m.max_delay_ms, m.drain_within_ms) == (30_000, 120_000)
    assert dead_letters(progress(0)) == 1
    assert codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(m)) == m


def test_no_data_batch_and_null_latest_offset() -> None:
    raw = progress(2)
    assert dead_letters(raw) == 0  # the observed sum over no rows is null
    assert rows_shed(raw) == 0  # recorded before the plan observed rows_shed
    source = dict(EVENTS[2]["sources"][0], latestOffset=None)
    m = to_task_metrics(progress(2, sources=[source]), CTX, output_rows=12)
    assert (m.input_rows, m.output_rows) == (0, 12)
    assert [(p.start_offset, p.end_offset, p.latest_offset) for p in m.partitions] == [
        (500, 500, 500), (1, 1, 1)]


def test_late_rows_are_reported_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    m = to_task_metrics(progress(3), CTX, output_rows=0)
    assert m.rows_dropped_by_watermark == 1
    with caplog.at_level(logging.WARNING):
        warn_if_late_data(m)
    assert "1 late rows dropped by the watermark" in caplog.text


def test_an_idle_event_becomes_a_heartbeat_with_no_arrival_and_no_backlog() -> None:
    from pyspark.sql.streaming.listener import QueryIdleEvent

    from streaming_jobs.runtime.observe.metrics import heartbeat
    from streaming_jobs.runtime.query.listener import ProgressListener

    heard: list[tuple[str, str]] = []
    listener = ProgressListener(lambda _p: None, lambda run, ts: heard.append((run, ts)))
    listener.onQueryIdle(QueryIdleEvent.fromJson({
        "id": "00000000-0000-0000-0000-000000000001",
        "runId": "00000000-0000-0000-0000-000000000002",
        "timestamp": "2026-11-21T10:00:05.000Z"}))
    assert heard == [("00000000-0000-0000-0000-000000000002", "2026-11-21T10:00:05.000Z")]

    last = to_task_metrics(progress(0), CTX, 7)
    beat = heartbeat(CTX, timestamp_ms(heard[0][1]), last)
    assert (beat.batch_id, beat.input_rows, beat.busy_ms) == (-1, 0, 0)
    assert beat.batch_start_ms == beat.batch_end_ms == timestamp_ms("2026-11-21T10:00:05.000Z")
    assert [(p.start_offset, p.end_offset, p.latest_offset) for p in beat.partitions] == [
        (p.end_offset, p.end_offset, p.end_offset) for p in last.partitions]
    assert backlog_records(beat) == 0
    assert heartbeat(CTX, 1, None).partitions == ()
    assert beat.max_offsets_per_trigger == 400
    assert (beat.scaling_parameter, beat.max_state_partitions) == ("state_partitions", 32)
    assert codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(beat)) == beat


def test_rows_shed_and_low_priority_come_from_the_observed_metric() -> None:
    event = json.loads(json.dumps(next(e for e in EVENTS if e["batchId"] == 0)))
    observed = event["observedMetrics"]["streamctl_input"]
    observed["rows_shed"], observed["rows_low_priority"] = 42, 90
    raw = StreamingQueryProgress.fromJson(event)
    assert rows_shed(raw) == 42
    m = to_task_metrics(raw, CTX, output_rows=0)
    assert (m.rows_shed, m.rows_low_priority) == (42, 90)


def test_the_listener_bridge_rebuilds_a_progress_event_from_the_jvm_json_alone() -> None:
    """Spark's listener bus hands over a Java event; the bridge asks it for its JSON only
    (`progress().json()`), and what the runtime reads from the rebuilt progress is what the
    recording holds: the batch, its offsets, and the observed dead letters."""
    from streaming_jobs.runtime.query.listener import JsonEvents, ProgressListener

    class JavaProgress:  # the two calls the bridge may make, and nothing else
        def json(self) -> str:
            return json.dumps(EVENTS[0])

    class JavaEvent:
        def progress(self) -> JavaProgress:
            return JavaProgress()

    heard: list[StreamingQueryProgress] = []
    JsonEvents(ProgressListener(heard.append, lambda _r, _t: None)).onQueryProgress(JavaEvent())
    [rebuilt] = heard
    assert to_task_metrics(rebuilt, CTX, 7) == to_task_metrics(progress(0), CTX, 7)
    assert (rebuilt.batchId, dead_letters(rebuilt)) == (0, 1)


def test_a_halted_instances_heartbeat_carries_its_lost_ranges_onto_the_wire() -> None:
    from dataclasses import replace

    from streaming_jobs.runtime.observe.metrics import beat, heartbeat

    lost = (SourcePartition(TOPIC, 0, 10, 50, 90),)
    halted = replace(CTX, halted="input deleted", lost_ranges=lost)
    for record in (heartbeat(halted, 1, None), beat(halted, 1)):
        assert record.lost_ranges == lost
        assert codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(record)) == record
