"""Leadership of the queries' shards among controller instances, through Kafka itself (the
`Leadership` port).

Every instance joins the controllers' group (`group_id`, the KIP-848 consumer protocol) on
the lease topic, one partition per shard (its partitions, counted at start); the member a partition
is assigned to leads that shard's queries (`core.shards`). The broker ends a member's session
when it goes unheard for `lease_session_s` (set as the group's own config at start), so a
killed or frozen instance's shards pass to the others, and the group spreads the shards over
the instances there are. Being assigned is a belief, not a guarantee — a frozen leader wakes
up still believing — so `take_over` also fences: it takes each shard's transactional id over
(`ShardWriters.fence`) before reading back what earlier leaders did for the shard's queries
(`kafka.history`, `core.recovery`). Neighbours: `clients` (the writers), `app` (wiring),
`loop.leading` (asks `held` every cycle).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from controller.core.model import Remembered
from controller.core.recovery import (
    History,
    Recovered,
    history_span_s,
    recorded_memories,
    recover,
)
from controller.core.shards import shard_of
from controller.errors import TemporaryError
from controller.kafka.clients import (
    KafkaSetupError,
    ShardWriters,
    client_config,
    partitions_of,
)
from controller.kafka.history import read_history, read_until_end
from controller.loop.ports import OnDecodeError
from controller.settings import ControllerSettings
from schemas import Decision

log = logging.getLogger("controller.lease")

_MIN_HEARTBEAT_MS = 500
_RECOUNT_S = 5.0
"""How often an instance checks that the lease topic's partitions are still the shards it
counted at start."""


class ShardCountChanged(KafkaSetupError):
    """The lease topic's partitions changed while this instance ran (`controller run` prints
    it and exits 1)."""


class KafkaLeadership:
    """Also owns the writers of the shards it holds (`writers`, which the control sink and
    the decision log write through): it fences them at a takeover and drops them at a
    hand-over."""

    def __init__(self, settings: ControllerSettings, on_decode_error: OnDecodeError,
                 setup_timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._on_error = on_decode_error
        self._next_count = time.monotonic() + _RECOUNT_S
        kafka = settings.kafka
        set_session(settings, setup_timeout_s)
        self._consumer = Consumer({
            **client_config(kafka),
            "group.id": kafka.group_id,
            "group.protocol": "consumer",
            "client.id": settings.instance_id,
            "enable.auto.commit": False,
        })
        try:
            self.shards = len(partitions_of(self._consumer, kafka.lease_topic, setup_timeout_s))
            self._consumer.subscribe([kafka.lease_topic])
        except BaseException:
            self._consumer.close()
            raise
        self.writers = self._writers = ShardWriters(kafka, self.shards)

    def held(self) -> frozenset[int]:
        # Nothing is ever written to the lease topic: the poll only serves the group's
        # callbacks (assigned, revoked, lost), which update the assignment.
        self._consumer.poll(0)
        self._check_count()
        assigned = frozenset(tp.partition for tp in self._consumer.assignment())
        return frozenset(p for p in assigned if p < self.shards)

    def _check_count(self) -> None:
        """Every `_RECOUNT_S`, whether the lease topic still has the partitions this instance
        counted at start. Another count puts queries in other shards than the instances that
        started before it, and under other transactional ids: two could lead one query, and
        neither fence the other. So an instance that sees the count change stops writing and
        exits, to be started again with the new count."""
        now = time.monotonic()
        if now < self._next_count:
            return
        self._next_count = now + _RECOUNT_S
        topic = self._settings.kafka.lease_topic
        try:
            found = self._consumer.list_topics(topic, timeout=1.0).topics.get(topic)
        except KafkaException:
            return  # the broker away: counted again next time
        if found is None or found.error is not None or len(found.partitions) == self.shards:
            return
        self.release()
        raise ShardCountChanged(
            f"the lease topic {topic!r} now has {len(found.partitions)} partitions, "
            f"{self.shards} when this instance started: every instance must count the same "
            "shards, or two could lead one query; this one stopped writing and exits (start "
            "it again to count anew)")

    def take_over(self, shards: frozenset[int], now_ms: int) -> Recovered:
        try:
            for shard in sorted(shards):
                self._writers.fence(shard)
            history = self._history(now_ms)
        except BaseException:
            self.give_up(shards)  # none is led until all are taken over: no writer stays
            raise
        settings = self._settings
        ours = history.of(lambda query_id: shard_of(query_id, self.shards) in shards)
        recovered = recover(ours, now_ms, issuer=settings.issuer,
                            cooldown_s=settings.policy.cooldown_s,
                            ack_timeout_s=settings.ack_timeout_s)
        return replace(recovered, remembered={
            query_id: remembered for query_id, remembered in self._recorded(now_ms).items()
            if shard_of(query_id, self.shards) in shards})

    def _history(self, now_ms: int) -> History:
        settings = self._settings
        span_ms = int(history_span_s(ack_timeout_s=settings.ack_timeout_s,
                                     cooldown_s=settings.policy.cooldown_s) * 1000)
        try:
            return read_history(settings.kafka, now_ms - span_ms, self._on_error)
        except KafkaSetupError as exc:
            raise TemporaryError(f"cannot read what earlier leaders did: {exc}") from exc

    def _recorded(self, now_ms: int) -> dict[str, Remembered]:
        """What the decision log's last `scaling_history_s` says of each query's model; a
        memory the leader can do without, so a log it cannot read is a warning, not a failed
        take-over."""
        kafka = self._settings.kafka
        since_ms = max(0, now_ms - int(self._settings.model.scaling_history_s * 1000))
        try:
            decisions = read_until_end(kafka, kafka.decisions_topic, Decision, since_ms,
                                       self._on_error, timeout_s=30.0)
        except (KafkaSetupError, KafkaException) as exc:
            log.warning("cannot read the decision log for what each query's sizes did (%s): "
                        "learning it afresh", exc)
            return {}
        return recorded_memories(tuple(decisions))

    def give_up(self, shards: frozenset[int]) -> None:
        for shard in shards:
            self._writers.drop(shard)

    def release(self) -> None:
        """Leave the group and join again as a new member: the shards go to the other
        instances if there are any."""
        self._writers.close()
        self._consumer.unsubscribe()
        self._consumer.subscribe([self._settings.kafka.lease_topic])

    def close(self) -> None:
        self._writers.close()
        self._consumer.close()


def set_session(settings: ControllerSettings, timeout_s: float) -> None:
    """Ask the broker for the group's session of `lease_session_s` (a group config, KIP-848);
    when it refuses (an older broker, its minimum above it, no ALTER_CONFIGS right), say what
    that costs and go on: the election still works, only slower."""
    session_ms = int(settings.lease_session_s * 1000)
    heartbeat_ms = max(_MIN_HEARTBEAT_MS, session_ms // 5)
    group = settings.kafka.group_id
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", str(session_ms),
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", str(heartbeat_ms),
                    incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient(client_config(settings.kafka))
    try:
        admin.incremental_alter_configs([resource], request_timeout=timeout_s)[resource].result()
    except KafkaException as exc:
        log.warning("cannot set the session of the controllers' group %r to %.0f s (%s): a "
                    "leader that dies is replaced only after the broker's own session timeout "
                    "(45 s unless group.consumer.session.timeout.ms says otherwise)", group,
                    settings.lease_session_s, exc.args[0].str())
