"""The port contract (tests/controller_port_contract.py) against the Kafka adapters, on the
session's real broker with uuid topics and groups per test; plus the adapters' own errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from controller.app import kafka_controller
from controller.core.shards import shard_of
from controller.errors import TemporaryError
from controller.explain.prom import ControllerMetrics, new_registry
from controller.kafka import clients
from controller.kafka.clients import (
    KafkaAckSource,
    KafkaControlSink,
    KafkaDecisionLog,
    KafkaEndOffsets,
    KafkaMetricsSource,
    KafkaSetupError,
    KafkaWriter,
)
from controller.loop.ports import (
    AckSource,
    ControlSink,
    DecisionLog,
    MetricsSource,
    OffsetProbe,
    OnDecodeError,
)
from controller.settings import ControllerSettings, KafkaSettings, PolicySettings
from schemas import Ack, ControlTuple, Outcome, TaskMetrics, auth, codec_for
from streamctl.security.kafka import PLAINTEXT
from streamctl.stack.tcp import find_free_ports
from streaming_jobs.runtime.kafka import RecordPublisher
from tests.controller_port_contract import CONTRACT, PortHarness, ack, polled
from tests.support.kafka import NewTopics, produce, read_committed_once_there
from tests.support.prometheus import scrape
from tests.support.waiting import until
from tests.unit.controller.traces import T0_MS, Job, end_ms, simulate

pytestmark = pytest.mark.integration


CONTROL_KEY = "integration-test-control-key"


class KafkaHarness:
    timeout_s = 30.0

    def __init__(self, bootstrap: str, new_topic: Callable[..., str]) -> None:
        self.settings = KafkaSettings(
            bootstrap_servers=bootstrap, metrics_topic=new_topic(), control_topic=new_topic(),
            ack_topic=new_topic(), decisions_topic=new_topic(), lease_topic=new_topic(),
            group_id=f"test-{uuid.uuid4().hex}", metrics_offset_reset="earliest",
            control_key=CONTROL_KEY)
        self.metrics_topic = self.settings.metrics_topic
        self._topics = {"metrics": self.settings.metrics_topic, "acks": self.settings.ack_topic,
                        "control": self.settings.control_topic,
                        "decisions": self.settings.decisions_topic}
        self._writer = KafkaWriter(self.settings)
        self._writer.fence()  # as a leader's, when it is elected
        self._closers: list[Callable[[], None]] = [self._writer.close]

    def metrics_source(self, on_error: OnDecodeError) -> MetricsSource:
        source = KafkaMetricsSource(self.settings, on_error, read_back_s=60)
        self._closers.append(source.close)
        return source

    def ack_source(self, on_error: OnDecodeError) -> AckSource:
        source = KafkaAckSource(self.settings, on_error)
        self._closers.append(source.close)
        return source

    def control_sink(self) -> ControlSink:
        return KafkaControlSink(self._writer, self.settings.control_topic, CONTROL_KEY,
                                self.settings.decisions_topic)

    def decision_log(self) -> DecisionLog:
        return KafkaDecisionLog(self._writer, self.settings.decisions_topic)

    def offset_probe(self) -> OffsetProbe:
        return KafkaEndOffsets(self.settings)

    def publish(self, kind: str, *payloads: bytes) -> None:
        produce(self.settings.bootstrap_servers, self._topics[kind], list(payloads))

    def read(self, kind: str, count: int) -> list[bytes]:
        return [m.value() for m in read_committed_once_there(
            self.settings.bootstrap_servers, self._topics[kind], count, self.timeout_s)]

    def close(self) -> None:
        for close in reversed(self._closers):
            close()


@pytest.fixture
def kafka_harness(bootstrap_servers: str,
                  new_topic: Callable[..., str]) -> Iterator[KafkaHarness]:
    harness = KafkaHarness(bootstrap_servers, new_topic)
    yield harness
    harness.close()


@pytest.mark.parametrize("clause", CONTRACT, ids=lambda c: c.__name__)
def test_kafka_ports_keep_the_contract(clause: Callable[[PortHarness], None],
                                       kafka_harness: KafkaHarness) -> None:
    clause(kafka_harness)


SAMPLED_TOPICS = 40
"""Sources of a fleet's queries, of 8 partitions each: 320 partitions in one probe."""


def test_one_probe_asks_for_every_sources_end_offsets_in_one_request(
        kafka_harness: KafkaHarness, new_topics: NewTopics,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """However many topics the queries read, a probe is one ListOffsets request per broker
    that leads them (one here): counted by librdkafka's own statistics of what it sent."""
    topics = list(new_topics(**{f"t{i}": 8 for i in range(SAMPLED_TOPICS)}).values())
    produce(kafka_harness.settings.bootstrap_servers, topics[0], [b"x"] * 3, partition=5)
    reports: list[str] = []
    admins: list[AdminClient] = []

    def counted(config: dict[str, object]) -> AdminClient:
        admins.append(AdminClient({**config, "statistics.interval.ms": 100,
                                   "stats_cb": reports.append}))
        return admins[-1]

    monkeypatch.setattr(clients, "AdminClient", counted)
    probe = KafkaEndOffsets(kafka_harness.settings)
    asked = {(topic, p) for topic in topics for p in range(8)}
    until(lambda: _answers_all(probe, asked), 30.0, "a leader for every partition", 0.5)
    before = _list_offsets_requests_sent(admins[0], reports)

    found = probe.end_offsets(asked)

    assert _list_offsets_requests_sent(admins[0], reports) == before + 1
    assert set(found) == asked
    assert found[(topics[0], 5)] == 3 and sum(found.values()) == 3


def _answers_all(probe: KafkaEndOffsets, asked: set[tuple[str, int]]) -> bool:
    """Fresh topics answer for some partitions, or none, until each has elected a leader."""
    try:
        return set(probe.end_offsets(asked)) == asked
    except TemporaryError:
        return False


def _list_offsets_requests_sent(admin: AdminClient, reports: list[str]) -> int:
    """The newest statistics report's count of ListOffsets requests, over every broker. The
    reports a second of polling serves include ten made after the caller's request returned
    (one each 100 ms), and a request is counted when it is sent."""
    reports.clear()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        admin.poll(0.1)
    assert reports, "no statistics report in a second of polling"
    brokers = json.loads(reports[-1])["brokers"].values()
    return sum(broker["req"].get("ListOffsets", 0) for broker in brokers)


def test_a_missing_ack_topic_is_a_clear_setup_error(bootstrap_servers: str) -> None:
    settings = KafkaSettings(bootstrap_servers=bootstrap_servers,
                             ack_topic=f"missing-{uuid.uuid4().hex}")
    with pytest.raises(KafkaSetupError, match="does not exist"):
        KafkaAckSource(settings, lambda e: None, setup_timeout_s=5)


@pytest.mark.parametrize(("start", "read"), [("window", [1, 2, 3]), ("latest", [3]),
                                             ("earliest", [0, 1, 2, 3])])
def test_the_metrics_source_starts_where_its_setting_says(
        kafka_harness: KafkaHarness, new_topic: Callable[..., str], start: str,
        read: list[int]) -> None:
    """'window' reads back what was stamped within `read_back_s` (a restarted controller's
    window is full at once) and the end of a partition with nothing that new; 'latest' only
    what comes after it started; 'earliest' everything. Batches 0 (300 s old) on partition 0,
    1 and 2 (50 and 5 s old) on partition 1, then 3 on partition 0 once the source started."""
    [sample] = simulate(Job(rates=[(0, 100)], per_unit=200, parallelism=1), 2)[:1]
    encode = codec_for(TaskMetrics).encode
    settings = replace(kafka_harness.settings, metrics_topic=new_topic(2),
                       metrics_offset_reset=start)
    now_ms = int(time.time() * 1000)
    for batch_id, (partition, age_s) in enumerate([(0, 300), (1, 50), (1, 5)]):
        produce(settings.bootstrap_servers, settings.metrics_topic,
                [encode(replace(sample, batch_id=batch_id))], partition=partition,
                timestamp_ms=now_ms - age_s * 1000)
    source = KafkaMetricsSource(settings, lambda e: pytest.fail(str(e)), read_back_s=60)
    try:
        produce(settings.bootstrap_servers, settings.metrics_topic,
                [encode(replace(sample, batch_id=3))], partition=0)
        seen: list[int] = []

        def the_last_one_read() -> bool:
            seen.extend(m.batch_id for m in source.poll(0.5))
            return 3 in seen

        until(the_last_one_read, 30, "the sample written after the source started", 0)
        seen.extend(m.batch_id for m in source.poll(0.5))
        assert sorted(seen) == read
    finally:
        source.close()


def test_a_metrics_source_told_its_shards_reads_only_theirs_and_a_gained_one_from_the_window(
        kafka_harness: KafkaHarness, new_topic: Callable[..., str]) -> None:
    """The jobs' own publisher keys a query's metrics by its id: on a topic of four
    partitions divided into four shards, partition k carries exactly the queries of shard k.
    A source reading shards 1 and 3 sees only theirs; given shard 2, it reads shard 2's back
    from the window; on three shards (four partitions do not divide) it reads everything."""
    settings = replace(kafka_harness.settings, metrics_topic=new_topic(4),
                       metrics_offset_reset="window")
    [sample] = simulate(Job(rates=[(0, 100)], per_unit=200, parallelism=1), 2)[:1]
    queries = [f"q{i}" for i in range(8)]  # two in each shard of four
    publisher = RecordPublisher(settings.bootstrap_servers, "test-metrics", PLAINTEXT)

    def publish(batch_id: int) -> None:
        for query_id in queries:
            publisher.publish(settings.metrics_topic, query_id,
                              replace(sample, query_id=query_id, batch_id=batch_id))
        assert publisher.flush() == 0

    publish(0)
    source = KafkaMetricsSource(settings, lambda e: pytest.fail(str(e)), read_back_s=60)
    undivided = KafkaMetricsSource(settings, lambda e: pytest.fail(str(e)), read_back_s=60)
    try:
        now_ms = int(time.time() * 1000)
        assert source.read_shards(frozenset({1, 3}), 4, now_ms)
        assert not undivided.read_shards(frozenset({1}), 3, now_ms)
        publish(1)
        read = polled(source.poll, 8, kafka_harness.timeout_s)  # both batches of 4 queries
        assert sorted({(m.query_id, m.batch_id) for m in read}) == [
            (q, b) for q in queries if shard_of(q, 4) in (1, 3) for b in (0, 1)]
        assert source.read_shards(frozenset({1, 2, 3}), 4, now_ms)
        read = polled(source.poll, 4, kafka_harness.timeout_s)
        assert sorted({(m.query_id, m.batch_id) for m in read}) == [
            (q, b) for q in queries if shard_of(q, 4) == 2 for b in (0, 1)]
        read = polled(undivided.poll, 16, kafka_harness.timeout_s)
        assert len({(m.query_id, m.batch_id) for m in read}) == 16
    finally:
        publisher.close()
        source.close()
        undivided.close()


def test_a_stalled_metrics_fetch_is_replaced_counted_and_goes_on_where_it_stopped(
        kafka_harness: KafkaHarness) -> None:
    """Records wait that the metrics consumer does not fetch: a new consumer at the position
    reached reads them next, in order (none skipped, none read again), and the replacement is
    counted, on Prometheus too."""
    settings = kafka_harness.settings
    metrics = ControllerMetrics(new_registry())
    [sample] = simulate(Job(rates=[(0, 100)], per_unit=200, parallelism=1), 2)[:1]
    encode = codec_for(TaskMetrics).encode
    source = KafkaMetricsSource(settings, lambda e: pytest.fail(str(e)), read_back_s=60,
                                stall_check_s=1, on_fetch_restart=metrics.fetch_restarted)
    try:
        kafka_harness.publish("metrics", *[encode(replace(sample, batch_id=b)) for b in (1, 2)])
        assert [m.batch_id for m in polled(source.poll, 2, kafka_harness.timeout_s)] == [1, 2]
        # A paused partition fetches nothing: the symptom of librdkafka#5153, made on purpose.
        source._guard.consumer.pause([TopicPartition(settings.metrics_topic, 0)])
        kafka_harness.publish("metrics", *[encode(replace(sample, batch_id=b)) for b in (3, 4)])
        assert [m.batch_id for m in polled(source.poll, 2, kafka_harness.timeout_s)] == [3, 4]
        assert source.poll(0.5) == []  # none read again
        assert_replacements_counted(source, metrics, settings.metrics_topic)
    finally:
        source.close()


def test_a_stalled_ack_fetch_is_replaced_counted_and_goes_on_where_it_stopped(
        kafka_harness: KafkaHarness) -> None:
    """As the metrics consumer's: acks wait that the ack consumer does not fetch; a new
    consumer at the position reached reads them next, in order (none skipped, none read
    again), and the replacement is counted, on Prometheus too, under the ack topic."""
    settings = kafka_harness.settings
    metrics = ControllerMetrics(new_registry())
    encode = codec_for(Ack).encode
    source = KafkaAckSource(settings, lambda e: pytest.fail(str(e)), stall_check_s=1,
                            on_fetch_restart=metrics.fetch_restarted)
    try:
        kafka_harness.publish("acks", encode(ack("c1")), encode(ack("c2")))
        assert [a.control_id for a in polled(source.poll, 2, kafka_harness.timeout_s)] == [
            "c1", "c2"]
        # A paused partition fetches nothing: the symptom of librdkafka#5153, made on purpose.
        source._guard.consumer.pause([TopicPartition(settings.ack_topic, 0)])
        kafka_harness.publish("acks", encode(ack("c3")), encode(ack("c4")))
        assert [a.control_id for a in polled(source.poll, 2, kafka_harness.timeout_s)] == [
            "c3", "c4"]
        assert source.poll(0.5) == []  # none read again
        assert_replacements_counted(source, metrics, settings.ack_topic)
    finally:
        source.close()


def assert_replacements_counted(source: KafkaMetricsSource | KafkaAckSource,
                                metrics: ControllerMetrics, topic: str) -> None:
    """At least one replacement (another if the new consumer was slow to deliver), each
    counted on Prometheus under the source's topic."""
    assert source.fetch_restarts >= 1
    assert metrics.registry.get_sample_value(
        "streamctl_controller_fetch_restarts_total", {"topic": topic}) == source.fetch_restarts


def test_the_loop_closes_over_kafka(kafka_harness: KafkaHarness) -> None:
    """Backlogged metrics in → one control tuple out → its ack → cooldown, over the broker."""
    settings = ControllerSettings(kafka=kafka_harness.settings, metrics_port=0,
                                  policy=PolicySettings(cooldown_s=600))
    trace = simulate(Job(rates=[(0, 800)], per_unit=210, parallelism=2, max_per_batch=500,
                         epoch=3), 30)
    shift_ms = int(time.time() * 1000) - end_ms(trace)  # the window is pruned by the real clock
    trace = [replace(s, batch_start_ms=s.batch_start_ms + shift_ms,
                     batch_end_ms=s.batch_end_ms + shift_ms) for s in trace]
    with kafka_controller(settings, ControllerMetrics(new_registry())) as loop:
        for sample in trace:
            kafka_harness.publish("metrics", codec_for(TaskMetrics).encode(sample))
        def decided() -> bool:
            loop.run(max_cycles=1)
            return "q1" in loop.queries and loop.queries["q1"].state.in_flight is not None

        until(decided, 30, "a decision", 0)
        [raw] = kafka_harness.read("control", 1)
        control = codec_for(ControlTuple).decode(raw)
        assert control.epoch == 4 and int(control.value) > 2
        assert auth.verify(control, CONTROL_KEY.encode()) is auth.Signature.VALID
        kafka_harness.publish("acks", codec_for(Ack).encode(Ack(
            control.control_id, "q1", "i1", 4, Outcome.APPLIED, "ok", 900, T0_MS)))
        until(lambda: (loop.run(max_cycles=1), loop.queries["q1"].state.in_flight is None)[1], 30,
              "the ack to reach the loop", 0)
        assert loop.queries["q1"].state.cooldown_until_ms > time.time() * 1000


def test_the_cli_serves_metrics_and_stops_cleanly_on_sigterm(kafka_harness: KafkaHarness) -> None:
    (port,) = find_free_ports(1)
    k = kafka_harness.settings
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "STREAMCTL_BOOTSTRAP_SERVERS": k.bootstrap_servers,
           "STREAMCTL_METRICS_TOPIC": k.metrics_topic, "STREAMCTL_ACK_TOPIC": k.ack_topic,
           "STREAMCTL_CONTROL_TOPIC": k.control_topic,
           "STREAMCTL_DECISIONS_TOPIC": k.decisions_topic,
           "STREAMCTL_CONTROLLER_LEASE_TOPIC": k.lease_topic,
           "STREAMCTL_CONTROLLER_METRICS_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "controller", "run", "--timeout-s", "60"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def served() -> bool:
            assert proc.poll() is None, "the controller exited"
            return "streamctl_metrics_records_total" in (
                scrape(f"http://127.0.0.1:{port}/metrics") or "")

        until(served, 30, "the controller's /metrics endpoint", 0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "SIGTERM received" in out and "controller stopped after" in out
