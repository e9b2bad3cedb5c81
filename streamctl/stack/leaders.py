"""Who leads what on a Kafka cluster, and the broker faults a cluster's checks inject.

Partition leaders and in-sync replicas from the cluster's metadata; the transaction
coordinator of a transactional id, computed as the broker computes it (the leader of the
`__transaction_state` partition its hash picks); topics created with an explicit replica list
(so the caller knows which broker leads what); preferred-leader elections, to return to that
layout after a fault; kill -9 of one node. Neighbours: `cluster` (the nodes), the cluster
fault tests and `bench.cluster_faults`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping, Sequence

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamctl.stack.broker import LocalBroker
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.process import is_alive
from streamctl.stack.waiting import poll_until

TRANSACTION_STATE = "__transaction_state"
OFFSETS = "__consumer_offsets"


def create_pinned(bootstrap: str, topics: Mapping[str, Sequence[Sequence[int]]],
                  config: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> None:
    """Topics with an explicit replica list per partition: the first replica is the
    partition's preferred leader. Returns once every partition has a leader."""
    admin = admin_client(bootstrap)
    futures = admin.create_topics([
        NewTopic(name, len(replicas), replica_assignment=[list(r) for r in replicas],
                 config=dict(config or {}))
        for name, replicas in topics.items()], request_timeout=timeout_s)
    for future in futures.values():
        future.result(timeout=timeout_s)
    if poll_until(lambda: all(leaders(bootstrap, name) for name in topics) or None,
                  timeout_s, 0.2) is None:
        raise TimeoutError(f"no leader for every partition of {sorted(topics)} in {timeout_s} s")


def metadata_partitions(bootstrap: str, topic: str) -> dict[int, object]:
    meta = admin_client(bootstrap).list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None:
        return {}
    return dict(meta.partitions)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader node id (only partitions that have one)."""
    return {p: m.leader for p, m in metadata_partitions(bootstrap, topic).items()  # type: ignore[attr-defined]
            if m.leader >= 0}  # type: ignore[attr-defined]


def in_sync(bootstrap: str, topics: Iterable[str], replicas: int) -> bool:
    """Every partition of `topics` has all `replicas` in sync and a leader (one metadata
    request for all of them)."""
    metadata = admin_client(bootstrap).list_topics(timeout=10).topics
    for topic in topics:
        meta = metadata.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return False
        if any(len(m.isrs) < replicas or m.leader < 0 for m in meta.partitions.values()):
            return False
    return True


def await_in_sync(bootstrap: str, topics: Iterable[str], replicas: int = 3,
                  timeout_s: float = 120.0) -> None:
    """Until every partition of `topics` and of the internal topics is fully replicated;
    TimeoutError after `timeout_s`."""
    every = [*topics, TRANSACTION_STATE, OFFSETS]
    if poll_until(lambda: in_sync(bootstrap, every, replicas) or None, timeout_s, 0.5) is None:
        raise TimeoutError(f"{replicas} in-sync replicas of every partition of {every} not "
                           f"reached in {timeout_s} s")


def elect_preferred(bootstrap: str, topics: Iterable[str]) -> None:
    """Move leadership back to each partition's first replica (after earlier faults moved it);
    a partition already led by it needs no election."""
    admin: AdminClient = admin_client(bootstrap)
    partitions = [TopicPartition(t, p) for t in topics for p in metadata_partitions(bootstrap, t)]
    result = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
    for partition, error in result.items():
        if error is not None and error.code() != KafkaError.ELECTION_NOT_NEEDED:
            raise RuntimeError(f"preferred election of {partition}: {error}")


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (UTF-16 code units, 32-bit overflow)."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + int.from_bytes(encoded[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The node coordinating `transactional_id`: the leader of the `__transaction_state`
    partition `abs(hash) % partitions` (Kafka's TransactionStateManager.partitionFor)."""
    partitions = metadata_partitions(bootstrap, TRANSACTION_STATE)
    if not partitions:
        raise RuntimeError(f"{TRANSACTION_STATE} does not exist yet: no transaction began")
    partition = (java_string_hash(transactional_id) & 0x7FFFFFFF) % len(partitions)
    return leaders(bootstrap, TRANSACTION_STATE)[partition]


def kill_9(node: LocalBroker) -> None:
    """SIGKILL, as a crash or an OOM killer would: no controlled shutdown, no flush."""
    status = node.status(probe_timeout_s=0.5)
    pid = status.pid
    if not status.running or pid is None:
        raise RuntimeError(f"{status.label} is not running")
    os.kill(pid, signal.SIGKILL)
    if not poll_until(lambda: True if not is_alive(pid) else None, 10.0):
        raise RuntimeError(f"{status.label} (pid {pid}) outlived SIGKILL")
    node.stop(timeout_s=1.0)  # it is gone: this only forgets its pid file
