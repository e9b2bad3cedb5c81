"""The job on a real broker: a live input_parallelism 2→4 change loses and duplicates nothing,
and bad control tuples are rejected while the job keeps running."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from schemas.codec import codec_for
from schemas.records import (
    Ack,
    ControlTuple,
    Outcome,
    SensorReading,
    SensorWindowAverage,
    TaskMetrics,
)
from streaming_jobs.config import JobConfig
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.kafka_io import TopicReader, produce, produce_records

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]

T0_MS = 1_700_000_000_000
WINDOW_S = 10
SENSORS = tuple(f"sensor-{i}" for i in range(5))
SENTINEL = "sentinel"
TOTAL = 3000
FIRST_HALF = 1500


def reading(seq: int) -> SensorReading:
    # 20 ms of event time per record: 3000 records span 60 s, six 10 s windows per sensor.
    return SensorReading(sensor_id=SENSORS[seq % len(SENSORS)], event_time_ms=T0_MS + seq * 20,
                         value=float(seq % 97), seq=seq)


def expected_windows() -> dict[tuple[str, int], tuple[int, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    sums: Counter[tuple[str, int]] = Counter()
    for seq in range(TOTAL):
        r = reading(seq)
        key = (r.sensor_id, r.event_time_ms // (WINDOW_S * 1000) * WINDOW_S * 1000)
        counts[key] += 1
        sums[key] += seq
    return {k: (counts[k], sums[k]) for k in counts}


def control(query_id: str, parameter: str, value: str, epoch: int) -> ControlTuple:
    return ControlTuple(control_id=str(uuid.uuid4()), query_id=query_id, operator_id="source",
                        parameter=parameter, value=value, epoch=epoch, issuer="test",
                        reason="integration test", issued_at_ms=int(time.time() * 1000))


@pytest.fixture
def job_config(bootstrap_servers: str, new_topic: Callable[..., str],
               tmp_path: Path) -> JobConfig:
    return JobConfig(
        bootstrap_servers=bootstrap_servers, query_id=f"q-{uuid.uuid4().hex[:8]}",
        instance_id="test-instance", input_topic=new_topic(partitions=2),
        output_topic=new_topic(partitions=1), dlq_topic=new_topic(partitions=1),
        metrics_topic=new_topic(partitions=1), control_topic=new_topic(partitions=1),
        ack_topic=new_topic(partitions=1), checkpoint_dir=str(tmp_path / "checkpoint"),
        input_parallelism=2, max_offsets_per_trigger=400, trigger_interval_s=0.5,
        enrichment_cost_ms=1.0, window_s=WINDOW_S, watermark_s=5, state_partitions=2,
        task_slots=SPARK_TASK_SLOTS, metrics_port=0)


@pytest.fixture
def running_job(spark: object, job_config: JobConfig) -> Iterator[object]:
    from streaming_jobs.runtime.job import ElasticJob

    job = ElasticJob(job_config, spark=spark)  # type: ignore[arg-type]
    job.start()
    assert job.wait_control_ready(30), "control consumer never got its partition"
    yield job
    job.stop()


def produce_slowly(config: JobConfig, seqs: range, stop: threading.Event) -> None:
    """The second half arrives while the reconfiguration happens (100 records / 50 ms)."""
    for chunk_start in range(seqs.start, seqs.stop, 100):
        if stop.is_set():
            return
        chunk = range(chunk_start, min(chunk_start + 100, seqs.stop))
        produce_records(config.bootstrap_servers, config.input_topic,
                        ((reading(s).sensor_id, reading(s)) for s in chunk))
        stop.wait(0.05)


def test_live_rescale_loses_and_duplicates_nothing(running_job: object,
                                                   job_config: JobConfig) -> None:
    cfg = job_config
    metrics = TopicReader(cfg.bootstrap_servers, cfg.metrics_topic)
    acks = TopicReader(cfg.bootstrap_servers, cfg.ack_topic)
    output = TopicReader(cfg.bootstrap_servers, cfg.output_topic)
    dlq = TopicReader(cfg.bootstrap_servers, cfg.dlq_topic)
    produce(cfg.bootstrap_servers, cfg.input_topic, [(b"x", b"garbage"), (b"y", b"\xc3\x01bad")])
    produce_records(cfg.bootstrap_servers, cfg.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF)))
    metrics.until(lambda ms: any(_metrics(m).input_rows > 0 for m in ms), 120)

    stop_producing = threading.Event()
    producer = threading.Thread(target=produce_slowly,
                                args=(cfg, range(FIRST_HALF, TOTAL), stop_producing))
    producer.start()
    try:
        rescale = control(cfg.query_id, "input_parallelism", "4", epoch=1)
        produce_records(cfg.bootstrap_servers, cfg.control_topic, [(cfg.query_id, rescale)])
        applied = _ack_for(acks, rescale.control_id)
    finally:
        producer.join(timeout=60)
        stop_producing.set()
    assert applied.outcome is Outcome.APPLIED, applied.detail
    assert applied.pause_ms > 0
    assert "2→4" in applied.detail

    _assert_rejections(cfg, acks)

    all_in = TOTAL + 2  # the two garbage records occupy offsets too
    seen = metrics.until(lambda ms: _consumed(ms) >= all_in, 180)
    after = [_metrics(m) for m in seen if _metrics(m).config_epoch == 1]
    assert after and all(m.input_parallelism == 4 for m in after)
    assert all(m.input_parallelism == 2 for m in map(_metrics, seen) if m.config_epoch == 0)

    _assert_exactly_once(cfg, output)
    letters = dlq.until(lambda ms: len(ms) >= 2, 30)
    assert {dict(m.headers())["source_topic"] for m in letters} == {cfg.input_topic.encode()}
    for reader in (metrics, acks, output, dlq):
        reader.close()


def test_batch_refused_by_the_gate_is_replayed(running_job: object,
                                               job_config: JobConfig) -> None:
    """The other quiesce ending: a new batch hits the closed gate and the query terminates
    itself; that is a normal stop, and the refused batch is processed after the restart."""
    from streaming_jobs.runtime.job import ElasticJob
    from streaming_jobs.runtime.lifecycle import Knobs

    job, cfg = running_job, job_config
    assert isinstance(job, ElasticJob)
    metrics = TopicReader(cfg.bootstrap_servers, cfg.metrics_topic)
    output = TopicReader(cfg.bootstrap_servers, cfg.output_topic)
    produce_records(cfg.bootstrap_servers, cfg.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF)))
    metrics.until(lambda ms: any(_metrics(m).input_rows > 0 for m in ms), 120)

    job.query.gate.close()
    produce_records(cfg.bootstrap_servers, cfg.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF, TOTAL)))
    deadline = time.monotonic() + 120
    while job.query.is_active():
        assert time.monotonic() < deadline, "no batch reached the closed gate"
        time.sleep(0.1)
    assert job.query.failure() is None  # terminated by the gate: not a failure

    applied = job.reconfigure(Knobs(epoch=1, input_parallelism=3))
    assert applied.pause_ms > 0
    metrics.until(lambda ms: _consumed(ms) >= TOTAL, 180)
    _assert_exactly_once(cfg, output)
    metrics.close()
    output.close()


def _assert_exactly_once(cfg: JobConfig, output: TopicReader) -> None:
    """Flush the last windows with a far-future sentinel, then compare every window."""
    sentinel = SensorReading(SENTINEL, T0_MS + 3_600_000, 0.0, -1)
    produce_records(cfg.bootstrap_servers, cfg.input_topic, [(SENTINEL, sentinel)])
    expected = expected_windows()
    output.until(lambda ms: len(_windows(ms)) >= len(expected), 180)
    windows = _windows(output.messages)
    keys = [(w.sensor_id, w.window_start_ms) for w in windows]
    assert len(keys) == len(set(keys)), "a window was emitted twice"
    assert {(w.sensor_id, w.window_start_ms): (w.count, w.seq_sum) for w in windows} == expected


def _assert_rejections(cfg: JobConfig, acks: TopicReader) -> None:
    bad = {
        control(cfg.query_id, "state_partitions", "8", epoch=2): "unknown parameter",
        control(cfg.query_id, "input_parallelism", "99", epoch=3): "'99'",
        control(cfg.query_id, "input_parallelism", "3", epoch=1): "stale epoch 1 ≤ 1",
    }
    produce_records(cfg.bootstrap_servers, cfg.control_topic,
                    [(cfg.query_id, t) for t in bad])
    for tuple_, expected_detail in bad.items():
        ack = _ack_for(acks, tuple_.control_id)
        assert ack.outcome is Outcome.REJECTED
        assert expected_detail in ack.detail


def _ack_for(reader: TopicReader, control_id: str) -> Ack:
    codec = codec_for(Ack)
    messages = reader.until(
        lambda ms: any(codec.decode(m.value()).control_id == control_id for m in ms), 180)
    return next(a for a in map(codec.decode, (m.value() for m in messages))
                if a.control_id == control_id)


def _metrics(message: object) -> TaskMetrics:
    return codec_for(TaskMetrics).decode(message.value())  # type: ignore[attr-defined]


def _consumed(messages: list) -> int:
    ends: dict[int, int] = {}
    for m in map(_metrics, messages):
        for p in m.partitions:
            ends[p.partition] = max(ends.get(p.partition, 0), p.end_offset)
    return sum(ends.values())


def _windows(messages: list) -> list[SensorWindowAverage]:
    codec = codec_for(SensorWindowAverage)
    return [w for w in (codec.decode(m.value()) for m in messages) if w.sensor_id != SENTINEL]
