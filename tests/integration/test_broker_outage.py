"""The job's Kafka clients across a broker outage longer than the sink's transaction timeout,
on a broker of the test's own (stopped and restarted; same port, same data).

- An instance that died with a transaction open: its rows never become visible, and the next
  instance finds the last committed marker and commits after it.
- A live sink whose broker goes away: the batch fails within the retry budget, aborted
  (`SinkBatchAborted`, librdkafka's delivery timeout) or with its outcome unknown
  (`SinkUnavailable`); the job restarts its query from the checkpoint (`runtime.roles.supervise`),
  and when the broker is back the replayed batch is written once, by a fresh producer.
- The control consumer: a tuple sent after the restart is seen (it keeps its partitions and
  its position across the outage instead of jumping to the end)."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer

from schemas import ControlTuple, codec_for
from streamctl.security.kafka import PLAINTEXT, client_config
from streamctl.stack.broker import LocalBroker
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.formats import KeyValue
from streaming_jobs.runtime.kafka import TypedConsumer
from streaming_jobs.runtime.sink.foreach_batch import TransactionalKafkaSink
from streaming_jobs.runtime.sink.gate import BatchGate
from streaming_jobs.runtime.sink.transactional import (
    OutputBatch,
    Replay,
    SinkBatchAborted,
    SinkUnavailable,
)
from streaming_jobs.runtime.sink.transactional_kafka import (
    KafkaTransactionalWriter,
    TransactionalSettings,
)
from tests.support.kafka import await_transaction_coordinator, produce, read_committed
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TIMEOUT_MS = 5_000
"""The sink's transaction timeout here."""
AWAY_S = 1.5 * TIMEOUT_MS / 1000
"""How long each outage lasts: half as long again as the transaction timeout, so a transaction
open when the broker stopped has timed out by the time it is back."""


def _unused(_: object) -> object:
    raise AssertionError("the encoder runs only under Spark")


def rows_of(batch_id: int, n: int = 20) -> OutputBatch:
    return OutputBatch(keys=[f"k{i}".encode() for i in range(n)],
                       values=[f"b{batch_id}-r{i}".encode() for i in range(n)])


def outage(broker: LocalBroker) -> None:
    """The broker away for longer than the transaction timeout, then back on the same port."""
    broker.stop(timeout_s=30)
    time.sleep(AWAY_S)  # the fault itself: how long the broker stays away
    broker.start(timeout_s=120)
    await_transaction_coordinator(broker.bootstrap_servers)


def test_the_sink_and_the_control_consumer_come_through_a_long_outage(
        restartable_broker: LocalBroker) -> None:
    bootstrap = restartable_broker.bootstrap_servers
    output, markers, control = (f"outage-{k}-{uuid.uuid4().hex[:6]}"
                                for k in ("out", "markers", "control"))
    ensure_topics(bootstrap, [TopicSpec(output, 2), TopicSpec(control, 1),
                              TopicSpec(markers, 1, config={"cleanup.policy": "compact"})],
                  timeout_s=30)
    settings = TransactionalSettings(bootstrap, "streamctl-outage-sink", marker_topic=markers,
                                     transaction_timeout_ms=TIMEOUT_MS, retry_budget_s=5.0)

    def sink() -> TransactionalKafkaSink:
        return TransactionalKafkaSink(BatchGate(), KafkaTransactionalWriter(settings), "q",
                                      output, KeyValue())

    await_transaction_coordinator(bootstrap)
    live = sink()
    assert live.write(rows_of(0), 0, "ckpt") is Replay.WRITE
    consumer = TypedConsumer(bootstrap, control, f"outage-{uuid.uuid4()}", ControlTuple,
                             PLAINTEXT)
    until(lambda: (consumer.poll(0.2), consumer.assigned.is_set())[1], 60, "the assignment")

    # A dead instance's transaction stays open across the outage (it fences `live`).
    dead = Producer(client_config(bootstrap, **{"transactional.id": settings.transactional_id,
                                                "transaction.timeout.ms": TIMEOUT_MS}))
    dead.init_transactions(30)
    dead.begin_transaction()
    dead.produce(output, key=b"k", value=b"dead-instance-row")
    assert dead.flush(30) == 0
    outage(restartable_broker)

    successor = sink()
    assert successor.write(rows_of(0), 0, "ckpt") is Replay.SKIP  # its marker is found
    assert successor.write(rows_of(1), 1, "ckpt") is Replay.WRITE

    # The live one, now the successor, loses the broker mid-stream: the batch fails in bounded
    # time and is written once when its query replays it after the broker is back.
    restartable_broker.stop(timeout_s=30)
    with pytest.raises((SinkUnavailable, SinkBatchAborted)):  # both: not committed, replay it
        successor.write(rows_of(2), 2, "ckpt")  # raises, not hangs: the test's budget bounds it
    time.sleep(AWAY_S)  # still away: longer than the transaction timeout
    restartable_broker.start(timeout_s=120)
    await_transaction_coordinator(bootstrap)
    assert successor.write(rows_of(2), 2, "ckpt") is Replay.WRITE

    values = Counter(m.value() for m in read_committed(bootstrap, output))
    expected = Counter(v for b in range(3) for v in rows_of(b).values)
    assert values == expected  # b"dead-instance-row" was aborted, nothing twice

    tuple_ = ControlTuple("c-1", "q", "query", "active_instance", "i-2", 1, "test", "", 0)
    produce(bootstrap, control, [codec_for(ControlTuple).encode(tuple_)])
    seen: list[object] = []
    until(lambda: seen.append(consumer.poll(0.5)) or tuple_ in seen, 90,
          "the control tuple sent after the restart")
    consumer.close()
    for s in (live, successor):
        s.close()
