"""Creating and deleting Kafka topics, idempotently, with a bounded wait for metadata.

Owns `TopicSpec` (name, partitions, configs) and the admin calls that make the cluster match a
list of them. An existing topic is left as it is (its partitions may have been raised on
purpose). Neighbours: `defaults` (the standard topics), `cli` (`stack topics`), test fixtures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streamctl.security.kafka import PLAINTEXT, KafkaSecurity
from streamctl.stack.broker_files import Replication
from streamctl.stack.errors import TopicError
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.waiting import Deadline, poll_until


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    replication_factor: int | None = None
    """None: as many as the cluster's size calls for (`Replication.for_brokers`)."""
    config: Mapping[str, str] = field(default_factory=dict)
    """Topic-level configs, e.g. {"cleanup.policy": "compact"}; `min.insync.replicas` is
    all replicas but one unless given here."""


@dataclass(frozen=True)
class EnsureResult:
    created: tuple[str, ...]
    existing: tuple[str, ...]


def ensure_topics(
    bootstrap_servers: str,
    specs: Iterable[TopicSpec],
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> EnsureResult:
    """Create the topics that do not exist yet; return once all are visible with leaders in
    the metadata of the broker asked (on a cluster, the other brokers' caches follow the
    controller's log on their own, moments later).

    Replication follows the cluster's size as the metadata lists it: on a cluster with a
    broker down, give `replication_factor` explicitly (or bring the broker back first)."""
    specs = list(specs)
    deadline = Deadline.after(timeout_s)
    admin = admin_client(bootstrap_servers, security)
    sized = Replication.for_brokers(_broker_count(admin, deadline))
    new = [_new_topic(s, sized) for s in specs]
    created: list[str] = []
    existing: list[str] = []
    futures = admin.create_topics(new, request_timeout=deadline.remaining_s()) if new else {}
    for name, future in futures.items():
        if _created(name, future, deadline.remaining_s()):
            created.append(name)
        else:
            existing.append(name)
    _wait_visible(admin, [s.name for s in specs], deadline)
    return EnsureResult(tuple(created), tuple(existing))


def partition_counts(bootstrap_servers: str, names: Iterable[str],
                     security: KafkaSecurity = PLAINTEXT,
                     timeout_s: float = 10.0) -> dict[str, int]:
    """How many partitions each of the named topics has now (the ones that exist)."""
    topics = _describe(admin_client(bootstrap_servers, security), Deadline.after(timeout_s))
    return {name: len(topics[name].partitions) for name in names if name in topics}


def _new_topic(spec: TopicSpec, sized: Replication) -> NewTopic:
    replication = sized if spec.replication_factor is None else Replication.of(
        spec.replication_factor)
    config = {"min.insync.replicas": str(replication.min_insync), **spec.config}
    return NewTopic(spec.name, spec.partitions, replication.replicas, config=config)


def _broker_count(admin: AdminClient, deadline: Deadline) -> int:
    try:
        metadata = admin.list_topics(timeout=max(1.0, min(10.0, deadline.remaining_s())))
    except KafkaException as exc:
        raise TopicError(f"cannot read cluster metadata: {exc.args[0].str()}") from exc
    return len(metadata.brokers)


def delete_topics(
    bootstrap_servers: str,
    names: Iterable[str],
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> tuple[str, ...]:
    """Delete the named topics that exist; return the deleted ones once they are gone."""
    names = list(names)
    deadline = Deadline.after(timeout_s)
    admin = admin_client(bootstrap_servers, security)
    futures = admin.delete_topics(names, request_timeout=deadline.remaining_s()) if names else {}
    deleted = tuple(name for name, f in futures.items() if _deleted(name, f, deadline))
    gone = poll_until(
        lambda: True if not _present(admin, deleted, deadline) else None, deadline.remaining_s()
    )
    if gone is None:
        raise TopicError(f"topics {list(deleted)} still listed after {timeout_s:.0f}s")
    return deleted


def _created(name: str, future: object, timeout_s: float) -> bool:
    try:
        future.result(timeout=timeout_s)  # type: ignore[attr-defined]
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise TopicError(f"creating topic {name!r} failed: {exc.args[0].str()}") from exc
    return True


def _deleted(name: str, future: object, deadline: Deadline) -> bool:
    try:
        future.result(timeout=deadline.remaining_s())  # type: ignore[attr-defined]
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise TopicError(f"deleting topic {name!r} failed: {exc.args[0].str()}") from exc
    return True


def _wait_visible(admin: AdminClient, names: Sequence[str], deadline: Deadline) -> None:
    """Metadata reaches the broker's cache after the controller commits; wait for leaders."""
    timeout_s = deadline.remaining_s()
    ready = poll_until(lambda: True if _all_led(admin, names, deadline) else None, timeout_s)
    if ready is None:
        raise TopicError(f"topics {list(names)} not ready (no leaders) after {timeout_s:.0f}s")


def _all_led(admin: AdminClient, names: Sequence[str], deadline: Deadline) -> bool:
    topics = _describe(admin, deadline)
    for name in names:
        meta = topics.get(name)
        if meta is None or meta.error is not None or not meta.partitions:
            return False
        if any(p.leader < 0 for p in meta.partitions.values()):
            return False
    return True


def _present(admin: AdminClient, names: Sequence[str], deadline: Deadline) -> bool:
    return any(name in _describe(admin, deadline) for name in names)


def _describe(admin: AdminClient, deadline: Deadline) -> dict:
    try:
        return dict(admin.list_topics(timeout=max(1.0, min(5.0, deadline.remaining_s()))).topics)
    except KafkaException as exc:
        raise TopicError(f"cannot read cluster metadata: {exc.args[0].str()}") from exc
