"""The job on a real broker: a live input_parallelism 2→4 change loses and duplicates nothing;
forged, unsigned, stale, malformed and out-of-range tuples are rejected (acked, or counted for
garbage) while the job keeps running unchanged; a batch refused by the closed gate is replayed;
windowed state survives state partitions up and down; an input switch waits for the old topic
to drain; a restart that really fails is rolled back. (Throttle, shed, UDF swap, retargets and
a new process resuming them: `test_every_action`.)"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from schemas.codec import codec_for
from schemas.records import (
    Ack,
    KnobSetting,
    Outcome,
    SensorReading,
    SensorWindowAverage,
)
from streaming_jobs.config import JobConfig, changed
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from tests.spark.bound import bound_config
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.control_io import KEY, consumed, counter, metrics_of
from tests.spark.in_process import in_process
from tests.support.control import ack_for, publish, send_and_await, signed
from tests.support.kafka import (
    NewTopics,
    SteadyLoad,
    TopicReader,
    job_topics,
    produce,
    produce_records,
)
from tests.support.waiting import until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_jobs.runtime.job import ElasticJob

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


@pytest.fixture
def job_config(bootstrap_servers: str, new_topics: NewTopics, tmp_path: Path) -> JobConfig:
    return bound_config(
        sensor_job, bootstrap_servers=bootstrap_servers, query_id=f"q-{uuid.uuid4().hex[:8]}",
        instance_id="test-instance", **job_topics(new_topics, state=True),
        checkpoint_dir=str(tmp_path / "checkpoint"),
        input_parallelism=2, max_offsets_per_trigger=400, trigger_interval_s=0.5,
        enrichment_cost_ms=1.0, window_s=WINDOW_S, watermark_s=5, state_partitions=2,
        task_slots=SPARK_TASK_SLOTS, metrics_port=0, control_key=KEY,
        low_priority_prefixes="sensor-0,sensor-1")


@pytest.fixture
def running_job(spark: SparkSession, job_config: JobConfig) -> Iterator[ElasticJob]:

    with in_process(spark, sensor_job, job_config) as job:
        yield job


def produce_slowly(config: JobConfig, seqs: range, stop: threading.Event) -> None:
    """The second half arrives while the reconfiguration happens (100 records / 50 ms)."""
    for chunk_start in range(seqs.start, seqs.stop, 100):
        if stop.is_set():
            return
        chunk = range(chunk_start, min(chunk_start + 100, seqs.stop))
        produce_records(config.bootstrap_servers, config.topics.input_topic,
                        ((reading(s).sensor_id, reading(s)) for s in chunk))
        stop.wait(0.05)


@contextmanager
def second_half_arriving(config: JobConfig, metrics: TopicReader) -> Iterator[None]:
    """The first half is in and a batch read it; the second half arrives while the block
    runs (and is all sent when it ends)."""
    produce_records(config.bootstrap_servers, config.topics.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF)))
    metrics.until(lambda ms: any(metrics_of(m).input_rows > 0 for m in ms), 120)
    stop = threading.Event()
    producer = threading.Thread(target=produce_slowly,
                                args=(config, range(FIRST_HALF, TOTAL), stop))
    producer.start()
    try:
        yield
    finally:
        producer.join(timeout=60)
        stop.set()


def test_live_rescale_with_a_new_batch_cap_loses_and_duplicates_nothing(
        running_job: object, job_config: JobConfig,
        topic_reader: Callable[[str], TopicReader]) -> None:
    cfg = job_config
    metrics, acks, output, dlq = map(topic_reader, (cfg.topics.metrics_topic, cfg.topics.ack_topic,
                                                    cfg.topics.output_topic, cfg.topics.dlq_topic))
    produce(cfg.bootstrap_servers, cfg.topics.input_topic, [(b"x", b"garbage"), (b"y",
                                                                                 b"\xc3\x01bad")])
    with second_half_arriving(cfg, metrics):
        # As the controller resizes: the batch cap set in the same tuple (`job send --together`).
        applied = _send(cfg, "input_parallelism", "4", epoch=1,
                        together=(KnobSetting("max_offsets_per_trigger", "800"),))
    assert applied.outcome is Outcome.APPLIED, applied.detail
    assert applied.pause_ms > 0
    assert "2→4" in applied.detail

    _assert_rejections(running_job, cfg, acks)

    all_in = TOTAL + 2  # the two garbage records occupy offsets too
    seen = metrics.until(lambda ms: consumed(ms) >= all_in, 180)
    after = [metrics_of(m) for m in seen if metrics_of(m).config_epoch == 1]
    assert after and all((m.input_parallelism, m.max_offsets_per_trigger) == (4, 800)
                         for m in after)
    assert all((m.input_parallelism, m.max_offsets_per_trigger) == (2, 400)
               for m in map(metrics_of, seen) if m.config_epoch == 0)

    _assert_exactly_once(cfg, output)
    letters = dlq.until(lambda ms: len(ms) >= 2, 30)
    assert {dict(m.headers())["source_topic"] for m in letters} == {cfg.topics.input_topic.encode()}


def test_batch_refused_by_the_gate_is_replayed(
        running_job: object, job_config: JobConfig,
        topic_reader: Callable[[str], TopicReader]) -> None:
    """The other quiesce ending: a new batch hits the closed gate and the query terminates
    itself; that is a normal stop, and the refused batch is processed after the restart."""
    from streaming_jobs.runtime.job import ElasticJob

    job, cfg = running_job, job_config
    assert isinstance(job, ElasticJob)
    metrics, output = topic_reader(cfg.topics.metrics_topic), topic_reader(cfg.topics.output_topic)
    produce_records(cfg.bootstrap_servers, cfg.topics.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF)))
    metrics.until(lambda ms: any(metrics_of(m).input_rows > 0 for m in ms), 120)

    job.query.gate.close()
    produce_records(cfg.bootstrap_servers, cfg.topics.input_topic,
                    ((reading(s).sensor_id, reading(s)) for s in range(FIRST_HALF, TOTAL)))
    until(lambda: not job.query.is_active(), 120, "a batch at the closed gate")
    assert job.query.failure() is None  # terminated by the gate: not a failure

    applied = job.owner.reconfigure(replace(job.owner.desired, epoch=1, input_parallelism=3),
                                    "c-test")
    assert applied.pause_ms > 0
    metrics.until(lambda ms: consumed(ms) >= TOTAL, 180)
    _assert_exactly_once(cfg, output)


def _assert_exactly_once(cfg: JobConfig, output: TopicReader) -> None:
    """Flush the last windows with a far-future sentinel, then compare every window."""
    _assert_exactly_once_up_to(cfg, output, TOTAL, cfg.topics.input_topic)


def _assert_rejections(job: object, cfg: JobConfig, acks: TopicReader) -> None:
    """Each bad tuple is acked REJECTED naming why and counted by reason; garbage is counted;
    the job keeps running with its desired state unchanged."""
    from streaming_jobs.runtime.job import ElasticJob

    assert isinstance(job, ElasticJob)
    before = job.owner.desired
    q = cfg.identity.query_id
    bad = {
        signed(q, "input_parallelism", "3", 2, b"someone-else's-key!"):
            "bad_signature: bad authentication tag",
        signed(q, "input_parallelism", "3", 2, None): "unsigned: unsigned",
        signed(q, "input_parallelism", "3", 1, KEY): "stale_epoch: stale epoch 1 ≤ 1",
        signed(q, "input_parallelism", "99", 3, KEY):
            "bad_value: bad value '99' for input_parallelism: expected an integer in [1, 4]",
        signed(q, "shed_fraction", "0.9", 3, KEY): "bad_value: bad value '0.9'",
        signed(q, "executors", "3", 3, KEY): "this job runs local[4]",
        signed(q, "state_partitions", "8", 3, KEY): "unsupported: cannot change "
            "state_partitions: its checkpoint uses HDFSBackedStateStoreProvider",
        signed(q, "input_topic", cfg.topics.output_topic, 3, KEY):
            f"precondition: cannot switch the input to {cfg.topics.output_topic}: "
            f"{cfg.topics.output_topic} is the job's own output topic",
    }
    produce(cfg.bootstrap_servers, cfg.topics.control_topic, [(q.encode(), b"\xc3\x01garbage")])
    for tuple_ in bad:
        publish(cfg.bootstrap_servers, cfg.topics.control_topic, tuple_)
    for tuple_, expected_detail in bad.items():
        ack = ack_for(acks, tuple_.control_id)
        assert ack.outcome is Outcome.REJECTED
        assert expected_detail in ack.detail, ack.detail
    assert job.query.is_active() and job.owner.desired == before
    rejected = {reason: counter(job, "streamctl_job_control_rejections_total", reason=reason)
                for reason in ("bad_signature", "unsigned", "stale_epoch", "bad_value",
                               "unsupported", "precondition", "undecodable")}
    assert rejected == {"bad_signature": 1, "unsigned": 1, "stale_epoch": 1, "bad_value": 2,
                        "unsupported": 2, "precondition": 1, "undecodable": 1}


def _windows(messages: list) -> list[SensorWindowAverage]:
    codec = codec_for(SensorWindowAverage)
    return [w for w in (codec.decode(m.value()) for m in messages) if w.sensor_id != SENTINEL]


def _expected_windows(produced: int) -> dict[tuple[str, int], tuple[int, int]]:
    counts: Counter[tuple[str, int]] = Counter()
    sums: Counter[tuple[str, int]] = Counter()
    for seq in range(produced):
        r = reading(seq)
        key = (r.sensor_id, r.event_time_ms // (WINDOW_S * 1000) * WINDOW_S * 1000)
        counts[key] += 1
        sums[key] += seq
    return {k: (counts[k], sums[k]) for k in counts}


def test_state_partitions_up_and_down_keep_every_window(
        spark: SparkSession, job_config: JobConfig,
        topic_reader: Callable[[str], TopicReader]) -> None:
    """2→4→1 state partitions while records arrive: Spark's offline repartition between the
    quiesce and the restart; every window is still emitted once with every record."""
    from tests.spark.fraud_io import stateful_session

    cfg = job_config
    metrics, output = topic_reader(cfg.topics.metrics_topic), topic_reader(cfg.topics.output_topic)
    with (stateful_session(spark, partitions=cfg.initial.state_partitions),
          in_process(spark, sensor_job, cfg)):
        with second_half_arriving(cfg, metrics):
            for epoch, (old, new) in enumerate(((2, 4), (4, 1)), start=1):
                ack = _send(cfg, "state_partitions", str(new), epoch)
                assert ack.outcome is Outcome.APPLIED, ack.detail
                assert f"state repartitioned {old}→{new}" in ack.detail, ack.detail
        metrics.until(lambda ms: consumed(ms) >= TOTAL, 180)
        _assert_exactly_once(cfg, output)  # its sentinel makes a batch at epoch 2
        seen = metrics.until(lambda ms: consumed(ms) >= TOTAL + 1, 120)
        partitions = {m.config_epoch: m.state_partitions for m in map(metrics_of, seen)}
        assert partitions == {0: 2, 1: 4, 2: 1}


def test_input_switch_drains_the_old_topic_and_reads_every_record_once(
        spark: SparkSession, job_config: JobConfig, new_topic: Callable[..., str],
        topic_reader: Callable[[str], TopicReader]) -> None:
    """A → B (4 partitions) under load: refused while producers still write A; applied once
    they moved; records written to A afterwards are reported, and switching back reads them.
    Every window is emitted once with every record."""
    cfg = changed(job_config, input_drain_quiet_s=1.0, input_drain_timeout_s=8.0)
    a, b = cfg.topics.input_topic, new_topic(partitions=4)
    metrics, output = topic_reader(cfg.topics.metrics_topic), topic_reader(cfg.topics.output_topic)
    with in_process(spark, sensor_job, cfg) as job:
        produced = _switch_under_load(cfg, job, metrics, b)
        _switch_back_for_the_stragglers(cfg, job, metrics, produced)
        _assert_exactly_once_up_to(cfg, output, produced + 3, a)
        seen = metrics.until(lambda ms: any(metrics_of(m).config_epoch == 2 and
                                            metrics_of(m).input_rows for m in ms), 60)
    topics = {(m.config_epoch, m.source_topics) for m in map(metrics_of, seen)}
    assert {(0, (a,)), (1, (b,)), (2, (a,))} <= topics
    assert {p.partition for m in map(metrics_of, seen) if m.config_epoch == 1
            for p in m.partitions} == {0, 1, 2, 3}


def _switch_under_load(cfg: JobConfig, job: Any, metrics: TopicReader, b: str) -> int:
    """Refused while the producers write A, applied once they moved to B; how many records
    were produced in all."""
    from streaming_jobs.send_cli import send

    a = cfg.topics.input_topic
    load = SteadyLoad(cfg.bootstrap_servers, a, lambda s: (reading(s).sensor_id, reading(s)),
                      per_tick=10)
    try:
        metrics.until(lambda ms: any(metrics_of(m).input_rows for m in ms), 120)
        refused = _send(cfg, "input_topic", b, epoch=1)
        assert refused.outcome is Outcome.REJECTED, refused.detail
        assert refused.detail.startswith(f"precondition: cannot switch the input to {b}: {a} "
                                         "is still being written to"), refused.detail
        assert job.query.is_active() and job.owner.desired.input_topic == a
        load.move_to(b)
        on_a = len(load.acked)
        metrics.until(lambda ms: consumed(ms) >= on_a, 180)  # the backlog on A, read
        # As an operator would: `streamctl job send` (next epoch from the state topic).
        switched = send(cfg.bootstrap_servers, cfg.identity.query_id, "input_topic", b, KEY,
                        control_topic=cfg.topics.control_topic, ack_topic=cfg.topics.ack_topic,
                        state_topic=cfg.topics.state_topic, timeout_s=180)
        assert switched.epoch == 1
    finally:
        produced = len(load.stop())
    assert load.failed == 0
    assert switched.outcome is Outcome.APPLIED and switched.pause_ms > 0, switched.detail
    assert f"{a} drained in" in switched.detail
    assert f"{b} read from {{0: 0, 1: 0, 2: 0, 3: 0}}" in switched.detail, switched.detail
    return produced


def _switch_back_for_the_stragglers(cfg: JobConfig, job: Any, metrics: TopicReader,
                                    produced: int) -> None:
    """Records written to the retired A are reported; switching back to A reads them."""
    a = cfg.topics.input_topic
    stragglers = range(produced, produced + 3)  # a producer that did not move
    produce_records(cfg.bootstrap_servers, a, ((reading(s).sensor_id, reading(s))
                                               for s in stragglers))
    assert job.check_retired_inputs() == {a: 3}
    assert counter(job, "streamctl_job_unread_retired_input_records", topic=a) == 3
    metrics.until(lambda ms: consumed(ms) >= produced, 180)  # B drained too
    back = _send(cfg, "input_topic", a, epoch=2)
    assert back.outcome is Outcome.APPLIED, back.detail
    assert f"{a} read from {{0: " in back.detail
    assert job.check_retired_inputs() == {}


def _send(cfg: JobConfig, parameter: str, value: str, epoch: int,
          together: tuple[KnobSetting, ...] = ()) -> Ack:
    """A signed tuple, as `job send` sends it; the job's ack."""
    return send_and_await(cfg.bootstrap_servers, cfg.identity.query_id, parameter, value, epoch,
                          KEY, together=together, control_topic=cfg.topics.control_topic,
                          ack_topic=cfg.topics.ack_topic)


def _assert_exactly_once_up_to(cfg: JobConfig, output: TopicReader, produced: int,
                               topic: str) -> None:
    """`_assert_exactly_once` for readings 0 … produced − 1, flushed through `topic`."""
    sentinel = SensorReading(SENTINEL, T0_MS + 3_600_000, 0.0, -1)
    produce_records(cfg.bootstrap_servers, topic, [(SENTINEL, sentinel)])
    expected = _expected_windows(produced)
    output.until(lambda ms: len(_windows(ms)) >= len(expected), 180)
    windows = _windows(output.messages)
    keys = [(w.sensor_id, w.window_start_ms) for w in windows]
    assert len(keys) == len(set(keys)), "a window was emitted twice"
    assert {(w.sensor_id, w.window_start_ms): (w.count, w.seq_sum) for w in windows} == expected


def broken_lookup(sensor_id: str) -> str:
    """A registered UDF version that fails in every Spark task that calls it."""
    raise ValueError(f"lookup service refused {sensor_id}")


@pytest.fixture
def broken_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensor job with a third function version, registered before the job loads."""
    monkeypatch.setitem(sensor_job.functions, "broken", broken_lookup)  # type: ignore[index]


def test_a_function_version_that_fails_is_rolled_back_and_loses_nothing(
        broken_version: None, running_job: object, job_config: JobConfig,
        topic_reader: Callable[[str], TopicReader]) -> None:
    """A real failure of a swapped knob: the new UDF fails in the Spark tasks of the first
    batch that runs it. The job restarts with the previous settings, acks FAILED with the
    reason, keeps running, and the batch that failed is replayed: every window once."""
    from streaming_jobs.runtime.job import ElasticJob

    job, cfg = running_job, job_config
    assert isinstance(job, ElasticJob)
    metrics, output = topic_reader(cfg.topics.metrics_topic), topic_reader(cfg.topics.output_topic)
    with second_half_arriving(cfg, metrics):
        failed = _send(cfg, "udf_version", "broken", epoch=1)
    assert failed.outcome is Outcome.FAILED, failed.detail
    assert re.fullmatch(r"udf_version v1→broken failed in the first batch after the swap "
                        r"\(ValueError: lookup service refused sensor-\d\); restarted with the "
                        r"settings of epoch 0", failed.detail), failed.detail
    assert job.query.is_active()
    assert (job.owner.desired.udf_version, job.owner.desired.epoch) == ("v1", 0)
    metrics.until(lambda ms: consumed(ms) >= TOTAL, 180)
    _assert_exactly_once(cfg, output)
