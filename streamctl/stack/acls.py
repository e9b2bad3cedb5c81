"""What each streamctl principal may do on a secured broker: the one ACL set, and applying it.

Owns the grants per principal (least privilege: only the controller may write the control
topic; the job reads it and writes its outputs, metrics, acks, state, dead letters and its
transactional sink; the load generator writes the inputs), the SCRAM users, and the admin calls
that create both. The secured local broker (`broker`) and compose's init service (`streamctl
stack topics --secure-dir`) apply exactly `streamctl_acls()`; a test reads them back. The admin
is a super user (server.properties) and needs no grant. Neighbours: `secure` (the users),
`defaults` (the names), `cli`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from streamctl.stack import defaults
from streamctl.stack.errors import StackError
from streamctl.stack.secure import CONTROLLER, JOB, LOAD

SCRAM_ITERATIONS = 8192
"""Twice Kafka's minimum for SCRAM-SHA-512 (4096): a login costs a few ms, a stolen hash much
more to brute-force."""

_READ, _WRITE, _DESCRIBE = "READ", "WRITE", "DESCRIBE"


@dataclass(frozen=True)
class Grant:
    """`operations` on a resource (`topic`, `group`, `transactional_id`) for `User:<user>`."""

    user: str
    resource: str
    name: str
    operations: tuple[str, ...]
    prefixed: bool = False
    """The name is a prefix (e.g. Spark's generated consumer groups), not a literal name."""


@dataclass(frozen=True)
class Names:
    """The topics, groups and queries of one deployment that the ACLs name."""

    inputs: tuple[str, ...] = (defaults.INPUT_TOPIC, defaults.FRAUD_INPUT_TOPIC)
    outputs: tuple[str, ...] = (defaults.OUTPUT_TOPIC, defaults.FRAUD_OUTPUT_TOPIC)
    dead_letters: tuple[str, ...] = (defaults.DEAD_LETTER_TOPIC,
                                     defaults.FRAUD_DEAD_LETTER_TOPIC)
    metrics: str = defaults.METRICS_TOPIC
    control: str = defaults.CONTROL_TOPIC
    acks: str = defaults.ACKS_TOPIC
    state: str = defaults.STATE_TOPIC
    decisions: str = defaults.DECISIONS_TOPIC
    lease: str = defaults.LEASE_TOPIC
    markers: str = defaults.SINK_MARKERS_TOPIC
    query_ids: tuple[str, ...] = defaults.QUERY_IDS
    """Each query's transactional sink id is `streamctl-<query>-sink`."""
    controller_group: str = "streamctl-controller"


def streamctl_acls(n: Names = Names()) -> tuple[Grant, ...]:
    """Every grant of a streamctl deployment (the admin is a super user and needs none)."""
    return (*_controller(n), *_job(n), *_load(n))


def _controller(n: Names) -> list[Grant]:
    return [
        Grant(CONTROLLER, "topic", n.metrics, (_READ, _DESCRIBE)),
        Grant(CONTROLLER, "topic", n.acks, (_READ, _DESCRIBE)),
        # Written by the controller only; read back at start-up to resume
        # (controller.kafka.history).
        Grant(CONTROLLER, "topic", n.control, (_READ, _WRITE, _DESCRIBE)),
        Grant(CONTROLLER, "topic", n.decisions, (_READ, _WRITE, _DESCRIBE)),
        # The instances' leader election on the lease topic, in the controllers' group, whose
        # session it sets (group configs); the ack and metrics consumers' throwaway groups
        # `<group>.acks.<uuid>`, `<group>.metrics.<uuid>`.
        Grant(CONTROLLER, "topic", n.lease, (_READ, _DESCRIBE)),
        Grant(CONTROLLER, "group", n.controller_group,
              (_READ, "DESCRIBE_CONFIGS", "ALTER_CONFIGS"), prefixed=True),
        # The leader writes in transactions under the group's name: a new leader fences the
        # writes of every earlier one (controller.kafka.lease).
        Grant(CONTROLLER, "transactional_id", n.controller_group, (_WRITE, _DESCRIBE),
              prefixed=True),
        # Asks the jobs' source partitions for their end offsets every second (the arrival
        # rate between batches; ListOffsets needs DESCRIBE).
        *[Grant(CONTROLLER, "topic", t, (_DESCRIBE,)) for t in n.inputs],
    ]


def _job(n: Names) -> list[Grant]:
    grants = [Grant(JOB, "topic", t, (_READ, _DESCRIBE)) for t in n.inputs]
    grants += [Grant(JOB, "topic", t, (_WRITE, _DESCRIBE))
               for t in (n.metrics, n.acks, n.state)]
    # Its outputs' and dead letters' max.message.bytes and cleanup.policy, read at start and
    # by the sink, bound the records it writes there (`runtime.sink.dead_letter`).
    grants += [Grant(JOB, "topic", t, (_WRITE, _DESCRIBE, "DESCRIBE_CONFIGS"))
               for t in (*n.outputs, *n.dead_letters)]
    grants += [
        # The control topic is read, never written: a job cannot reconfigure another.
        Grant(JOB, "topic", n.control, (_READ, _DESCRIBE)),
        Grant(JOB, "topic", n.markers, (_READ, _WRITE, _DESCRIBE)),
        # The control consumer's group id, streamctl-job-<query>-<instance>: no member joins
        # (it assigns the partitions itself, nothing committed); its client finds the group's
        # coordinator, which takes DESCRIBE (READ implies it).
        Grant(JOB, "group", "streamctl-job-", (_READ,), prefixed=True),
        # Spark's Kafka source names its consumers' groups spark-kafka-source-<uuid>-...
        Grant(JOB, "group", "spark-kafka-source-", (_READ,), prefixed=True),
    ]
    grants += [Grant(JOB, "transactional_id", f"streamctl-{q}-sink", (_WRITE, _DESCRIBE))
               for q in n.query_ids]
    return grants


def _load(n: Names) -> list[Grant]:
    return [Grant(LOAD, "topic", t, (_WRITE, _DESCRIBE)) for t in n.inputs]


_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
              "transactional_id": ResourceType.TRANSACTIONAL_ID}


def bindings(grants: Iterable[Grant]) -> list[AclBinding]:
    return [AclBinding(_RESOURCES[g.resource], g.name,
                       ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
                       f"User:{g.user}", "*", AclOperation[op], AclPermissionType.ALLOW)
            for g in grants for op in g.operations]


def apply_acls(admin: AdminClient, grants: Iterable[Grant], timeout_s: float = 30.0) -> int:
    """Create the grants' ACL bindings (creating an existing one is a no-op); returns how many."""
    wanted = bindings(grants)
    futures = admin.create_acls(wanted, request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise StackError(f"creating the ACL {binding} failed: {exc.args[0].str()}") from exc
    return len(wanted)


def upsert_scram_users(admin: AdminClient, passwords: Mapping[str, str],
                       timeout_s: float = 30.0) -> None:
    """Create (or reset) each user's SCRAM-SHA-512 credential."""
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    changes: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, info, password.encode())
        for user, password in passwords.items()]
    for user, future in admin.alter_user_scram_credentials(
            changes, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise StackError(f"creating the SCRAM user {user} failed: "
                             f"{exc.args[0].str()}") from exc
