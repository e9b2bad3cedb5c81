"""Leader election among controller instances, through Kafka itself (the `Leadership` port).

Every instance joins the controllers' group (`group_id`, the KIP-848 consumer protocol) on a
one-partition lease topic; the member that partition is assigned to leads. The broker ends a
member's session when it goes unheard for `lease_session_s` (set as the group's own config at
start), so a killed or frozen leader's lease passes to a follower. Being assigned is a belief,
not a guarantee — a frozen leader wakes up still believing — so `take_over` also fences:
it takes the shared transactional id over (`KafkaWriter.fence`) before reading back what
earlier leaders did (`kafka.history`, `core.recovery`). Neighbours: `clients` (the writer),
`app` (wiring), `loop.cycle` (asks `held` every cycle).
"""

from __future__ import annotations

import logging
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
from controller.core.recovery import Recovered, history_span_s, recorded_memories, recover
from controller.errors import TemporaryError
from controller.kafka.clients import (
    KafkaSetupError,
    KafkaWriter,
    client_config,
    partitions_of,
)
from controller.kafka.history import read_history, read_until_end
from controller.loop.ports import OnDecodeError
from controller.settings import ControllerSettings
from schemas import Decision

log = logging.getLogger("controller.lease")

_MIN_HEARTBEAT_MS = 500


class KafkaLeadership:
    def __init__(self, settings: ControllerSettings, writer: KafkaWriter,
                 on_decode_error: OnDecodeError, setup_timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._writer = writer
        self._on_error = on_decode_error
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
            partitions = partitions_of(self._consumer, kafka.lease_topic, setup_timeout_s)
            if len(partitions) != 1:
                raise KafkaSetupError(
                    f"the lease topic {kafka.lease_topic!r} has {len(partitions)} partitions; "
                    "it must have exactly one, or several instances would lead at once")
            self._consumer.subscribe([kafka.lease_topic])
        except BaseException:
            self._consumer.close()
            raise

    def held(self) -> bool:
        # Nothing is ever written to the lease topic: the poll only serves the group's
        # callbacks (assigned, revoked, lost), which update the assignment.
        self._consumer.poll(0)
        return bool(self._consumer.assignment())

    def take_over(self, now_ms: int) -> Recovered:
        self._writer.fence()
        settings = self._settings
        span_ms = int(history_span_s(ack_timeout_s=settings.ack_timeout_s,
                                     cooldown_s=settings.policy.cooldown_s) * 1000)
        try:
            history = read_history(settings.kafka, now_ms - span_ms, self._on_error)
        except KafkaSetupError as exc:
            raise TemporaryError(f"cannot read what earlier leaders did: {exc}") from exc
        recovered = recover(history, now_ms, issuer=settings.issuer,
                            cooldown_s=settings.policy.cooldown_s,
                            ack_timeout_s=settings.ack_timeout_s)
        return replace(recovered, remembered=self._recorded(now_ms))

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

    def release(self) -> None:
        """Leave the group and join again as a new member: the lease goes to another
        instance if there is one."""
        self._writer.close()
        self._consumer.unsubscribe()
        self._consumer.subscribe([self._settings.kafka.lease_topic])

    def close(self) -> None:
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
