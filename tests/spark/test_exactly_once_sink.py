"""The sensor job crashes after a batch's transaction committed but before Spark's commit log
entry; restarted from its checkpoint (a new job and sink, as after a process restart) it replays
that batch, and a read_committed consumer still sees every window exactly once."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from schemas.codec import codec_for
from schemas.records import SensorReading, SensorWindowAverage
from streaming_jobs.config import JobConfig
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.runtime.job import ElasticJob
from streaming_jobs.runtime.sink.foreach_batch import TransactionalKafkaSink
from tests.spark.bound import bound_config
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.in_process import in_process
from tests.support.kafka import NewTopics, job_topics, produce_records, read_committed
from tests.support.waiting import until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]

T0_MS = 1_700_000_000_000
WINDOW_S = 10
SENSORS = tuple(f"sensor-{i}" for i in range(4))
TOTAL = 1600
SENTINEL = "sentinel"


def reading(seq: int) -> SensorReading:
    # 25 ms of event time per record: 1600 records span 40 s, four windows per sensor.
    return SensorReading(sensor_id=SENSORS[seq % len(SENSORS)], event_time_ms=T0_MS + seq * 25,
                         value=float(seq % 13), seq=seq)


def expected_windows() -> dict[tuple[str, int], tuple[int, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    sums: Counter[tuple[str, int]] = Counter()
    for r in map(reading, range(TOTAL)):
        key = (r.sensor_id, r.event_time_ms // (WINDOW_S * 1000) * WINDOW_S * 1000)
        counts[key] += 1
        sums[key] += r.seq
    return {k: (counts[k], sums[k]) for k in counts}


class CrashAfterCommit:
    """Wraps the job's sink: once a batch with output has committed its transaction, fail the
    batch. Spark then never writes its commit log entry, exactly as if the driver had died
    between the transaction commit and the checkpoint commit."""

    def __init__(self, sink: TransactionalKafkaSink) -> None:
        self.sink = sink
        self.crashed_batch: int | None = None

    def __call__(self, batch_df: object, batch_id: int) -> None:
        self.sink(batch_df, batch_id)  # type: ignore[arg-type]
        last = self.sink.last_committed
        if (self.crashed_batch is None and last is not None and last.batch_id == batch_id
                and last.rows > 0):
            self.crashed_batch = batch_id
            raise RuntimeError(f"simulated crash: batch {batch_id} committed its transaction")

    def __getattr__(self, name: str) -> object:  # retarget, take_output, ...
        return getattr(self.sink, name)


@pytest.fixture
def job_config(bootstrap_servers: str, new_topics: NewTopics, tmp_path: Path) -> JobConfig:
    return bound_config(
        sensor_job, bootstrap_servers=bootstrap_servers, query_id=f"q-{uuid.uuid4().hex[:8]}",
        instance_id="test-instance", **job_topics(new_topics, output_partitions=2),
        checkpoint_dir=str(tmp_path / "checkpoint"),
        input_parallelism=2, max_offsets_per_trigger=400, trigger_interval_s=0.5,
        enrichment_cost_ms=0.0, window_s=WINDOW_S, watermark_s=5, state_partitions=2,
        task_slots=SPARK_TASK_SLOTS, metrics_port=0, control_key=b"exactly-once-test")


def committed_windows(cfg: JobConfig) -> list[SensorWindowAverage]:
    codec = codec_for(SensorWindowAverage)
    windows = (codec.decode(m.value()) for m in read_committed(cfg.bootstrap_servers,
                                                               cfg.topics.output_topic))
    return [w for w in windows if w.sensor_id != SENTINEL]


def test_a_batch_replayed_after_its_transaction_committed_is_not_written_twice(
        spark: SparkSession, job_config: JobConfig) -> None:
    cfg = job_config
    produce_records(cfg.bootstrap_servers, cfg.topics.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(TOTAL)))
    crashes: list[CrashAfterCommit] = []

    def crash_after_the_first_commit(job: ElasticJob) -> None:
        assert isinstance(job.query.sink, TransactionalKafkaSink)
        crashes.append(CrashAfterCommit(job.query.sink))
        job.query.sink = crashes[0]  # type: ignore[assignment]

    with in_process(spark, sensor_job, cfg, control_ready=False,
                    before_start=crash_after_the_first_commit) as crashing:
        until(lambda: not crashing.query.is_active(), 180, "the simulated crash")
        assert "simulated crash" in (crashing.query.failure() or "")
    assert crashes[0].crashed_batch is not None
    before_restart = committed_windows(cfg)
    assert before_restart, "the crashed batch's transaction should be visible"

    with in_process(spark, sensor_job, cfg, control_ready=False) as restarted:
        sentinel = SensorReading(SENTINEL, T0_MS + 3_600_000, 0.0, -1)  # closes every window
        produce_records(cfg.bootstrap_servers, cfg.topics.input_topic, [(SENTINEL, sentinel)])
        expected = expected_windows()
        until(lambda: len(committed_windows(cfg)) >= len(expected), 240,
                   "every window in the output")
        sink = restarted.query.sink
        assert isinstance(sink, TransactionalKafkaSink)
        assert sink.skipped_replays() == 1  # the replay of the crashed batch, found by marker

    windows = committed_windows(cfg)
    keys = Counter((w.sensor_id, w.window_start_ms) for w in windows)
    assert max(keys.values()) == 1, f"windows emitted twice: {keys.most_common(3)}"
    assert {(w.sensor_id, w.window_start_ms): (w.count, w.seq_sum) for w in windows} == expected
